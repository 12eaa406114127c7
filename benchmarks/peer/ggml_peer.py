"""cpukern next to ggml, same shapes, same session: ggml's own `test-backend-ops perf` against
cpukern's Python API, interleaved round by round, medians of the rounds.

    ./bazelw run //benchmarks/peer:ggml -- --ggml-build /path/to/ggml/build [--rounds 3]

The ggml build is the user's (nothing of ggml is vendored or built here): a CMake build of
ggml (or llama.cpp's ggml) with tests, Release, the CPU backend, e.g.
    cmake -S ggml -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_BUILD_TESTS=ON
    cmake --build build --target test-backend-ops

How ggml is timed: each shape is one line of a `--test-file` (test-backend-ops' generic-op
format: op, type, ne, op params, sources), run with `perf -b CPU`. The enum values come from
the build's own include/ggml.h. test-backend-ops sets the CPU backend's thread count to
std::thread::hardware_concurrency(); to run it with 1 thread, a three-line shim compiled here
and LD_PRELOADed answers get_nprocs() (which libstdc++ asks) with the thread count wanted.
Its perf mode repeats the same op over the same tensors: hot; a weight tensor larger than the
L3 is streamed from memory anyway (the 32768x14336 layer, every MoE expert set here).
MUL_MAT_ID routing in test-backend-ops: every token goes to experts 0..topk-1 (shuffled), so
cpukern's MoE is timed with that routing ("ggml routing") and with random top-k routing.

Shapes (issue 15): ternary 4096x14336 B=1 and B=16 hot, 32768x14336 B=1 cold (ggml TQ2_0,
2.06 bits/weight, and TQ1_0, 1.69: both quantize x to int8; vs cpukern fp32 and int8
activations), 1 and 2 threads; the
gpt-oss-20b MoE layer (E=32, top-4, H=I=2880, swigluoai, biases) T=1 at 1 and 2 threads and
T=64 at 2 threads: ggml's two MUL_MAT_ID expert GEMMs (gate_up, down; bf16 and MXFP4) vs
cpukern's whole fused_moe (both GEMMs, activation, biases, weighted sum) in the same format,
and cpukern's W4A8 (MXFP4 weights, int8 activations) against ggml's MXFP4 (which quantises
activations to int8 too). `--moe-variant avx512_bf16,avx2` times cpukern's MoE on each named
variant (default: the selected one); `--only moe` skips the ternary shapes.

Working sets: test-backend-ops times gate_up (133 MB of bf16 at T=1) and down (66 MB) one op
at a time, each repeated on its own weights; cpukern's fused call reads both (199 MB). Sets
of 2-4x the L3 are partly served from it when repeated, so the script also runs the probe
repeated over a buffer of each call's size and prints each call's GB/s against it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

import ml_dtypes
import numpy as np

import cpukern
from cpukern import _ext, moe, ternary
from ggml_cli import build_shim, ggml_enums, ggml_source_commit, run_ggml, test_line


TERNARY_TYPES = ("TQ2_0", "TQ1_0")  # ggml's ternary formats (TQ1_0 only where the build has it)
TERNARY = [  # (name, M, K, B, temperature)
    ("4096x14336 B=1", 4096, 14336, 1, "hot"),
    ("4096x14336 B=16", 4096, 14336, 16, "hot"),
    ("32768x14336 B=1", 32768, 14336, 1, "cold"),
]
MOE = dict(e=32, topk=4, h=2880, i=2880)  # gpt-oss-20b
MOE_CASES = [(1, 1), (1, 2), (64, 2)]  # (T, threads)


def log(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the machine and its probe

def l3_bytes() -> int:
    return int(cpukern.cpu_info()["l3_bytes"])


def probe(binary: Optional[str]) -> dict[str, Any]:
    """CPU, measured clock, L3 and read GB/s per thread count: benchmarks/bandwidth (the
    C++ probe) when given, else the same probe through cpukern._ext."""
    if binary and os.path.exists(binary):
        return json.loads(subprocess.run([binary, "--json"], check=True, capture_output=True,
                                         text=True).stdout)
    n = cpukern.cpu_info()["num_cores"]
    size = max(512 << 20, 16 * l3_bytes())
    return {"cpu": "?", "l3_bytes": l3_bytes(), "cores": n,
            "read_GB_s": {str(t): _ext.read_bandwidth(size, t, 0.5) / 1e9 for t in range(1, n + 1)}}


# ---------------------------------------------------------------- ggml

def ggml_cases(types: dict[str, int], ops: dict[str, int], threads: int,
               ternary_shapes: bool = True) -> list[str]:
    f32, i32 = types["GGML_TYPE_F32"], types["GGML_TYPE_I32"]
    mm, mmid = ops["GGML_OP_MUL_MAT"], ops["GGML_OP_MUL_MAT_ID"]
    lines = []
    for name, m, k, b, _ in TERNARY if ternary_shapes else ():
        for tq in TERNARY_TYPES:
            if f"GGML_TYPE_{tq}" in types:
                lines.append(test_line(mm, f32, [m, b, 1, 1],
                                       [(types[f"GGML_TYPE_{tq}"], [k, m, 1, 1]), (f32, [k, b, 1, 1])],
                                       ggml_ternary_name(tq, name)))
    e, topk, h, i = MOE["e"], MOE["topk"], MOE["h"], MOE["i"]
    for t, th in MOE_CASES:
        if th != threads:
            continue
        for fmt in ("BF16", "MXFP4"):
            ty = types[f"GGML_TYPE_{fmt}"]
            # gate_up: as [H, 2I, E], x [H, 1, T] (shared by the topk experts), ids [topk, T].
            lines.append(test_line(mmid, f32, [2 * i, topk, t, 1],
                                   [(ty, [h, 2 * i, e, 1]), (f32, [h, 1, t, 1]), (i32, [topk, t, 1, 1])],
                                   f"moe_{fmt.lower()}_T{t}_gate_up"))
            # down: as [I, H, E], x [I, topk, T].
            lines.append(test_line(mmid, f32, [h, topk, t, 1],
                                   [(ty, [i, h, e, 1]), (f32, [i, topk, t, 1]), (i32, [topk, t, 1, 1])],
                                   f"moe_{fmt.lower()}_T{t}_down"))
    return lines


def ggml_ternary_name(tq: str, name: str) -> str:
    return f"ternary_{tq.lower()}_" + name.replace(" ", "_").replace("=", "")


def moe_working_sets() -> dict[str, int]:
    """Bytes of bf16 expert weights one timed call reads at T=1 (ggml routing: experts
    0..topk-1): ggml's gate_up and down ops, each timed alone, and cpukern's fused call."""
    k, h, i = MOE["topk"], MOE["h"], MOE["i"]
    gate_up, down = k * 2 * i * h * 2, k * h * i * 2
    return {"ggml gate_up": gate_up, "ggml down": down, "cpukern fused": gate_up + down}


# ---------------------------------------------------------------- cpukern

def timeit(calls: list, min_time: float) -> float:
    """Median seconds per call, cycling through `calls` (several = the cold rotation)."""
    for c in calls:
        c()
    times, start, n = [], time.perf_counter(), 0
    while time.perf_counter() - start < min_time or len(times) < 5:
        t0 = time.perf_counter()
        calls[n % len(calls)]()
        times.append(time.perf_counter() - t0)
        n += 1
    return float(np.median(times))


MOE_FORMATS = ("bf16", "mxfp4", "mxfp4_a8")  # cpukern's; ggml has bf16 and MXFP4
GGML_FORMAT = {"bf16": "bf16", "mxfp4": "mxfp4", "mxfp4_a8": "mxfp4"}


class Cpukern:
    def __init__(self, rng, min_time: float, moe_variants: list[str], ternary_shapes: bool = True):
        self.min_time = min_time
        self.ternary = {}
        self.layout_bytes = {}
        for name, m, k, _, temp in TERNARY if ternary_shapes else ():
            if (m, k, temp) in self.ternary:
                continue
            words = (k + 15) // 16
            # Random 2-bit codes; 11 (invalid) becomes 10 (+1).
            w = rng.integers(0, 1 << 32, size=(m, words), dtype=np.uint64).astype(np.uint32)
            w ^= w & (w >> 1) & np.uint32(0x55555555)
            if k % 16:
                w[:, -1] &= np.uint32((1 << (2 * (k % 16))) - 1)
            scale = np.full(m, 0.02, np.float32)
            first = ternary.prepare(w, k, scale)
            sets = 1 if temp == "hot" else max(2, -(-3 * l3_bytes() // first.nbytes))
            self.ternary[(m, k, temp)] = [first] + [ternary.prepare(w, k, scale) for _ in range(sets - 1)]
            # Layout bytes each path reads: the kernel layout (fp32), the int8 layout (the
            # same bytes where the variant's int8 kernel reads the kernel layout itself).
            i8 = ternary.serialized_size(first, int8=True) - ternary.serialized_size(first)
            self.layout_bytes[(m, k)] = (first.nbytes, i8 or first.nbytes)
            log(f"cpukern ternary {m}x{k} {temp}: {sets} prepared set(s) of {first.nbytes >> 20} MiB")
        e, h, i = MOE["e"], MOE["h"], MOE["i"]
        bf = ml_dtypes.bfloat16
        w13 = (rng.standard_normal((e, 2 * i, h), dtype=np.float32) / np.sqrt(h)).astype(bf)
        w2 = (rng.standard_normal((e, h, i), dtype=np.float32) / np.sqrt(i)).astype(bf)
        self.bias = ((rng.standard_normal((e, 2 * i)) * 0.1).astype(bf),
                     (rng.standard_normal((e, h)) * 0.1).astype(bf))
        q13, q2 = moe.quantize(w13), moe.quantize(w2)
        self.moe = {}
        for variant in moe_variants:
            self.moe[variant, "bf16"] = (moe.prepare(w13, variant=variant),
                                         moe.prepare(w2, variant=variant))
            for fmt, act in (("mxfp4", "fp32"), ("mxfp4_a8", "int8")):
                self.moe[variant, fmt] = (
                    moe.prepare(q13[0], format="mxfp4", scales=q13[1], act=act, variant=variant),
                    moe.prepare(q2[0], format="mxfp4", scales=q2[1], act=act, variant=variant))
            log(f"cpukern MoE experts packed for {variant} (bf16, MXFP4, W4A8)")
        del w13, w2
        self.rng = rng

    def ternary_ms(self, m: int, k: int, b: int, temp: str, act: str, threads: int) -> float:
        x = self.rng.standard_normal((b, k)).astype(np.float32)
        calls = [lambda w=w: ternary.gemv(w, x, act=act, threads=threads)
                 for w in self.ternary[(m, k, temp)]]
        return timeit(calls, self.min_time) * 1e3

    def moe_ms(self, variant: str, t: int, fmt: str, routing: str, threads: int) -> float:
        e, topk, h = MOE["e"], MOE["topk"], MOE["h"]
        x = self.rng.standard_normal((t, h)).astype(ml_dtypes.bfloat16)
        if routing == "ggml":  # test-backend-ops: experts 0..topk-1 for every token, shuffled
            ids = np.stack([self.rng.permutation(topk) for _ in range(t)]).astype(np.int32)
        else:
            ids = np.stack([self.rng.permutation(e)[:topk] for _ in range(t)]).astype(np.int32)
        tw = np.full((t, topk), 1.0 / topk, np.float32)
        w13, w2 = self.moe[variant, fmt]
        call = lambda: moe.fused_moe(x, w13, w2, tw, ids, activation="swigluoai",
                                     w13_bias=self.bias[0], w2_bias=self.bias[1], threads=threads)
        return timeit([call], self.min_time) * 1e3


# ---------------------------------------------------------------- the run

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ggml-build", required=True, help="a ggml CMake build directory with bin/test-backend-ops")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are reported)")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds per cpukern measurement")
    p.add_argument("--probe", default=None, help="benchmarks/bandwidth binary (default: next to this script in the runfiles)")
    p.add_argument("--json", metavar="FILE", help="also write every round as JSON")
    p.add_argument("--ggml-commit", default=None, help="the ggml commit, where the source is not a git checkout")
    p.add_argument("--moe-variant", default=None,
                   help="comma-separated fused_moe variants to time (default: the selected one)")
    p.add_argument("--only", choices=("all", "moe"), default="all", help="'moe': skip the ternary shapes")
    args = p.parse_args(argv)
    selected_moe = next(v["name"] for v in cpukern.kernels("fused_moe") if v["selected"])
    moe_variants = args.moe_variant.split(",") if args.moe_variant else [selected_moe]
    with_ternary = args.only == "all"
    build = os.path.abspath(os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), args.ggml_build))
    binary = os.path.join(build, "bin", "test-backend-ops")
    if not os.access(binary, os.X_OK):
        p.error(f"--ggml-build: no bin/test-backend-ops in {build} (build it with -DGGML_BUILD_TESTS=ON)")
    probe_bin = args.probe or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bandwidth", "bandwidth")
    types, ops = ggml_enums(build)
    for needed in ("GGML_TYPE_TQ2_0", "GGML_TYPE_BF16", "GGML_TYPE_MXFP4"):
        if needed not in types:
            p.error(f"--ggml-build: this ggml has no {needed}")
    work = tempfile.mkdtemp(prefix="cpukern-peer-")
    shim = build_shim(work)

    machine = probe(probe_bin)
    commit = args.ggml_commit or ggml_source_commit(build)
    print(f"cpu: {machine['cpu']}; clock (measured) {machine.get('clock_GHz_measured', 0):.2f} GHz; "
          f"L3 {machine['l3_bytes'] >> 20} MiB; {machine['cores']} cores")
    print(f"cpukern {cpukern.__version__} (ternary '{next(v['name'] for v in cpukern.kernels('ternary_gemv') if v['selected'])}', "
          f"moe '{next(v['name'] for v in cpukern.kernels('fused_moe') if v['selected'])}'); ggml {commit} ({build})")
    ck = Cpukern(np.random.default_rng(0), args.min_time, moe_variants, with_ternary)
    rounds = []
    for r in range(args.rounds):
        row: dict[str, Any] = {"load_start": os.getloadavg()[0]}
        row["probe_GB_s"] = probe(probe_bin)["read_GB_s"]
        # The same probe repeated over each MoE T=1 working set (ggml's ops one at a time,
        # cpukern's fused call): a set under ~4x the L3 is partly served from it.
        for name, nbytes in moe_working_sets().items():
            for th in (1, 2):
                row[f"ws/{name}/t{th}"] = _ext.read_bandwidth(nbytes, th, 0.3) / 1e9
        for threads in (1, 2):
            log(f"round {r + 1}: ggml, {threads} thread(s)")
            cases = ggml_cases(types, ops, threads, with_ternary)
            for name, us in run_ggml(binary, shim, cases, threads, work).items():
                row[f"ggml/{name}/t{threads}"] = us / 1e3
            log(f"round {r + 1}: cpukern, {threads} thread(s)")
            for name, m, k, b, temp in TERNARY if with_ternary else ():
                for act in ("fp32", "int8"):
                    row[f"cpukern/ternary_{name}/{act}/t{threads}"] = ck.ternary_ms(m, k, b, temp, act, threads)
            for t, th in MOE_CASES:
                if th != threads:
                    continue
                for variant in moe_variants:
                    for fmt in MOE_FORMATS:
                        for routing in ("ggml", "random"):
                            row[f"cpukern/{variant}/moe_T{t}/{fmt}/{routing}/t{threads}"] = \
                                ck.moe_ms(variant, t, fmt, routing, threads)
        row["load_end"] = os.getloadavg()[0]
        rounds.append(row)
        log(f"round {r + 1} done, load {row['load_start']:.2f} -> {row['load_end']:.2f}")

    med = {k: statistics.median(rd[k] for rd in rounds) for k in rounds[0] if k.startswith(("ggml", "cpukern"))}
    bw = {t: statistics.median(rd["probe_GB_s"][t] for rd in rounds) for t in rounds[0]["probe_GB_s"]}
    loads = [rd[k] for rd in rounds for k in ("load_start", "load_end")]
    bw_all = max(bw.values())  # the all-core figure: the most any thread count streamed
    print(f"\nmedians of {args.rounds} interleaved rounds; 1-minute load average {min(loads):.2f}-{max(loads):.2f}; "
          f"read probe " + ", ".join(f"{t} thr {v:.1f} GB/s" for t, v in bw.items()))
    print("\n| ternary | threads | weights | ggml TQ2_0 ms | ggml TQ1_0 ms | cpukern fp32 ms | "
          "cpukern int8 ms | fp32 vs TQ2_0 | int8 vs TQ2_0 | fp32 / int8 vs TQ1_0 | "
          "cpukern fp32 / int8 layout GB/s (cold: of the all-core probe) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, m, k, b, temp in TERNARY if with_ternary else ():
        for th in (1, 2):
            g = med[f"ggml/{ggml_ternary_name('TQ2_0', name)}/t{th}"]
            g1 = med.get(f"ggml/{ggml_ternary_name('TQ1_0', name)}/t{th}")
            f32 = med[f"cpukern/ternary_{name}/fp32/t{th}"]
            i8 = med[f"cpukern/ternary_{name}/int8/t{th}"]
            rates = []
            for ms, nbytes in zip((f32, i8), ck.layout_bytes[(m, k)]):
                gbs = nbytes / ms / 1e6
                rates.append(f"{gbs:.1f}" + (f" ({gbs / bw_all:.0%})" if temp == "cold" else ""))
            tq1 = (f"{g1:.3f}", f"{g1 / f32:.2f}x / {g1 / i8:.2f}x") if g1 else ("-", "-")
            print(f"| {name} | {th} | {temp} | {g:.3f} | {tq1[0]} | {f32:.3f} | {i8:.3f} | "
                  f"{g / f32:.2f}x | {g / i8:.2f}x | {tq1[1]} | "
                  f"{' / '.join(rates)}{'' if temp == 'cold' else ' (hot)'} |")
    print("\n| MoE gpt-oss-20b | threads | cpukern variant | cpukern format (ggml's) | ggml MUL_MAT_ID "
          "gate_up + down ms | cpukern fused_moe ms (ggml routing) | vs ggml | vs cpukern bf16 | "
          "cpukern ms (random top-4) | weights GB/s, random (of the all-core probe) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    mx = 3 * MOE["h"] * MOE["i"] * 17 / 32
    expert = {"bf16": 3 * MOE["h"] * MOE["i"] * 2, "mxfp4": mx, "mxfp4_a8": mx}
    for t, th in MOE_CASES:
        for variant in moe_variants:
            for fmt in MOE_FORMATS:
                gf = GGML_FORMAT[fmt]
                g = med[f"ggml/moe_{gf}_T{t}_gate_up/t{th}"] + med[f"ggml/moe_{gf}_T{t}_down/t{th}"]
                c = med[f"cpukern/{variant}/moe_T{t}/{fmt}/ggml/t{th}"]
                cb = med[f"cpukern/{variant}/moe_T{t}/bf16/ggml/t{th}"]
                cr = med[f"cpukern/{variant}/moe_T{t}/{fmt}/random/t{th}"]
                touched = min(MOE["e"], t * MOE["topk"]) if t == 1 else MOE["e"] * (1 - (1 - MOE["topk"] / MOE["e"]) ** t)
                gbs = touched * expert[fmt] / cr / 1e6
                print(f"| T={t} | {th} | {variant} | {fmt} ({gf}) | {g:.2f} | {c:.2f} | {g / c:.2f}x | "
                      f"{cb / c:.2f}x | {cr:.2f} | {gbs:.1f} ({gbs / bw_all:.0%}) |")
    ws = moe_working_sets()
    print("\nMoE T=1 bf16 at equal working sets: each timed call's weight bytes, the GB/s it read, "
          "and the probe repeated over a buffer of that size (same rounds; a set under ~4x the L3 "
          "is partly served from the L3 when repeated, as test-backend-ops perf repeats each op)")
    print("\n| call | threads | weights MB | GB/s | probe GB/s at that size | of probe |")
    print("|---|---|---|---|---|---|")
    for th in (1, 2):
        timed = {"ggml gate_up": med[f"ggml/moe_bf16_T1_gate_up/t{th}"],
                 "ggml down": med[f"ggml/moe_bf16_T1_down/t{th}"],
                 "cpukern fused": med[f"cpukern/{moe_variants[0]}/moe_T1/bf16/ggml/t{th}"]}
        for name, ms in timed.items():
            gbs = ws[name] / ms / 1e6
            pb = statistics.median(rd[f"ws/{name}/t{th}"] for rd in rounds)
            print(f"| {name} | {th} | {ws[name] / 1e6:.0f} | {gbs:.1f} | {pb:.1f} | {gbs / pb:.0%} |")
    if args.json:
        path = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), args.json)
        with open(path, "w") as f:
            json.dump({"machine": machine, "ggml_commit": commit, "rounds": rounds, "medians": med}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
