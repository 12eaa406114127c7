"""cpukern's op next to ik_llama.cpp's own kernel, matrix by matrix, in one run: every weight
matrix of BitNet b1.58 2B-4T, Qwen3-30B-A3B and gpt-oss-20b (an MoE expert is the same GEMV as
a dense layer), T = 1, 2, 4, 8 activation rows, 1 and 2 threads, cold.

    ./bazelw run //benchmarks/peer:ik -- --ik-llama-cpp-build /path/to/ik_llama.cpp/build
        [--models bitnet,qwen3-moe,gpt-oss] [--matrices q,gate] [--t 1,8] [--threads 1]
        [--rounds 3] [--min-time 0.3] [--lm-head-rows 32768] [--mxfp4-act fp32,int8]
        [--int8] [--wait-quiet S] [--json FILE]

ik_llama.cpp is the user's build (a CMake build of github.com/ikawrakow/ik_llama.cpp with
-DGGML_NATIVE=ON; only its ggml library is used). benchmarks/peer/ik_mul_mat.cc is compiled
here with g++ against it (headers from the source tree next to the build, its libggml linked)
and times one ggml_mul_mat on ik's CPU backend after iqk_repack_tensor (ik's `-rtr 1`):
BF16 -> BF16_R16, IQ2_BN -> IQ2_BN_R4, MXFP4 -> MXFP4_R8. Without --ik-llama-cpp-build the
cpukern rows run alone, the ik columns empty and the reason printed.

cpukern: ternary.gemv(act="int8_bitnet") on BitNet's layers against ik's IQ2_BN; linear on bf16
against BF16; linear on MXFP4 (act fp32 exact, and int8: W4A8) against MXFP4 (ik quantizes the
activations to int8). Cold, both engines: several copies of the weights, together over 3x the
L3, rotated call by call; each time is the median of single calls. Per matrix and round the two
engines run one after the other (interleaved), medians over the rounds. GB/s = the bytes of
weights one call reads / its time, against the read probe (benchmarks/bandwidth) at the same
thread count, median of at least 3 runs in this invocation. "other load": the cores other
processes kept busy while a matrix was timed (a shared machine; ik's 2-thread calls stall when
one of its threads shares a core).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ggml_cli import ggml_source_commit  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Matrix:
    model: str
    names: str  # the model's matrices of this shape and kind, e.g. "q, o"
    m: int      # output features (rows)
    k: int      # input features
    kind: str   # "ternary", "bf16" or "mxfp4"


# The published configurations (HF config.json): (matrix name, out, in, kind).
BITNET = [("q", 2560, 2560), ("k", 640, 2560), ("v", 640, 2560), ("o", 2560, 2560),
          ("gate", 6912, 2560), ("up", 6912, 2560), ("down", 2560, 6912)]
QWEN3_MOE = [("q", 4096, 2048), ("k", 512, 2048), ("v", 512, 2048), ("o", 2048, 4096),
             ("expert gate", 768, 2048), ("expert up", 768, 2048), ("expert down", 2048, 768)]
GPT_OSS = [("q", 4096, 2880, "bf16"), ("k", 512, 2880, "bf16"), ("v", 512, 2880, "bf16"),
           ("o", 2880, 4096, "bf16"), ("expert gate_up", 5760, 2880, "mxfp4"),
           ("expert down", 2880, 2880, "mxfp4")]
GPT_OSS_VOCAB = 201088
MODELS = ("bitnet", "qwen3-moe", "gpt-oss")
# cpukern's format -> ik_mul_mat --type (the GGUF type the peers run the same weights in; int8
# per-row scales against Q8_0's per-32 scales, both with int8 activations)
IK_TYPE = {"ternary int8_bitnet": "iq2_bn", "bf16": "bf16", "mxfp4": "mxfp4", "mxfp4_a8": "mxfp4",
           "int8": "q8_0"}


def model_matrices(model: str, lm_head_rows: int) -> list[tuple[str, int, int, str]]:
    if model == "bitnet":
        return [(n, m, k, "ternary") for n, m, k in BITNET]
    if model == "qwen3-moe":
        return [(n, m, k, "bf16") for n, m, k in QWEN3_MOE]
    if model == "gpt-oss":
        rows = min(lm_head_rows, GPT_OSS_VOCAB) if lm_head_rows > 0 else GPT_OSS_VOCAB
        head = "lm_head" if rows == GPT_OSS_VOCAB else f"lm_head[:{rows}]"
        return GPT_OSS + [(head, rows, 2880, "bf16")]
    raise ValueError(f"unknown model {model!r} (one of {', '.join(MODELS)})")


def matrices(models: Sequence[str], only: Optional[Sequence[str]] = None,
             lm_head_rows: int = 32768) -> list[Matrix]:
    """The distinct (model, shape, kind) of the chosen models, names of one shape merged
    ("q, o"); `only`: keep matrices whose name (or its last word: "gate" for "expert gate")
    is listed."""
    out: list[Matrix] = []
    for model in models:
        merged: dict[tuple[int, int, str], list[str]] = {}
        for name, m, k, kind in model_matrices(model, lm_head_rows):
            if only and name not in only and name.split()[-1].split("[")[0] not in only:
                continue
            merged.setdefault((m, k, kind), []).append(name)
        out += [Matrix(model, ", ".join(names), m, k, kind) for (m, k, kind), names in merged.items()]
    return out


def int_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def name_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ik-llama-cpp-build", default=None,
                   help="an ik_llama.cpp CMake build directory (its ggml library); without it the ik rows are skipped")
    p.add_argument("--models", type=name_list, default=list(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    p.add_argument("--matrices", type=name_list, default=None,
                   help="comma-separated matrix names to keep (q,k,v,o,gate,up,down,gate_up,lm_head)")
    p.add_argument("--t", type=int_list, default=[1, 2, 4, 8], help="activation rows (tokens)")
    p.add_argument("--threads", type=int_list, default=[1, 2])
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians are reported)")
    p.add_argument("--min-time", type=float, default=0.3, help="seconds per measurement, each engine")
    p.add_argument("--lm-head-rows", type=int, default=32768,
                   help=f"rows of gpt-oss's bf16 LM head to time (0: all {GPT_OSS_VOCAB})")
    p.add_argument("--mxfp4-act", type=name_list, default=["fp32", "int8"],
                   help="cpukern's MXFP4 activations: fp32 (exact) and/or int8 (W4A8)")
    p.add_argument("--int8", action="store_true",
                   help="also time the bf16 matrices as cpukern int8 (W8A8) against ik's Q8_0 (Q8_0_R8)")
    p.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                   help="before each round of a matrix, wait up to S seconds for other processes to use "
                        "under 0.1 cores (a shared machine)")
    p.add_argument("--probe", default=None, help="benchmarks/bandwidth binary")
    p.add_argument("--json", metavar="FILE", help="also write every measurement as JSON")
    args = p.parse_args(argv)
    for model in args.models:
        if model not in MODELS:
            p.error(f"--models: unknown {model!r} (one of {', '.join(MODELS)})")
    for act in args.mxfp4_act:
        if act not in ("fp32", "int8"):
            p.error(f"--mxfp4-act: unknown {act!r} (fp32, int8)")
    if args.rounds < 1:
        p.error("--rounds: at least 1")
    return args


# ---------------------------------------------------------------- the table's arithmetic

def cpukern_formats(matrix: Matrix, mxfp4_acts: Sequence[str], int8: bool = False) -> list[str]:
    """cpukern's rows for one matrix: the format names the table prints (IK_TYPE's keys)."""
    if matrix.kind == "mxfp4":
        return ["mxfp4" if act == "fp32" else "mxfp4_a8" for act in mxfp4_acts]
    if matrix.kind == "ternary":
        return ["ternary int8_bitnet"]
    return ["bf16", "int8"] if int8 else ["bf16"]


def gb_per_s(nbytes: float, ms: float) -> float:
    return nbytes / ms / 1e6


def row_numbers(cpukern_ms: float, cpukern_bytes: int, ik_ms: Optional[float],
                ik_bytes: Optional[int], probe_gb_s: float) -> dict[str, Any]:
    """ratio = ik time / cpukern time (> 1: cpukern faster); GB/s and fraction of the probe of
    each; target: cpukern at least 1.1x ik, or at 95% of the probe."""
    ck_gbs = gb_per_s(cpukern_bytes, cpukern_ms)
    out: dict[str, Any] = {"cpukern_gb_s": ck_gbs, "cpukern_of_probe": ck_gbs / probe_gb_s,
                           "ratio": None, "ik_gb_s": None, "ik_of_probe": None}
    if ik_ms is not None and ik_bytes is not None:
        out["ratio"] = ik_ms / cpukern_ms
        out["ik_gb_s"] = gb_per_s(ik_bytes, ik_ms)
        out["ik_of_probe"] = out["ik_gb_s"] / probe_gb_s
    out["meets_target"] = (out["ratio"] is not None and out["ratio"] >= 1.1) or out["cpukern_of_probe"] >= 0.95
    return out


def format_row(matrix: Matrix, fmt: str, ik_type: str, t: int, threads: int, ck_ms: float,
               ik_ms: Optional[float], n: dict[str, Any], other_cores: float) -> str:
    def opt(v: Optional[float], spec: str) -> str:
        return "-" if v is None else format(v, spec)
    return (f"| {matrix.model} | {matrix.names} | {matrix.m}x{matrix.k} | {fmt} / {ik_type} | {t} | "
            f"{threads} | {ck_ms:.3f} | {opt(ik_ms, '.3f')} | {opt(n['ratio'], '.2f')} | "
            f"{n['cpukern_gb_s']:.1f} / {opt(n['ik_gb_s'], '.1f')} | "
            f"{n['cpukern_of_probe']:.0%} / {opt(n['ik_of_probe'], '.0%')} | "
            f"{'yes' if n['meets_target'] else 'no'} | {other_cores:.2f} |")


TABLE_HEADER = ("| model | matrix | M x K | cpukern / ik format | T | threads | cpukern ms | ik ms | "
                "ik / cpukern | GB/s cpukern / ik | of probe cpukern / ik | target | other load |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def cpu_busy_seconds() -> float:
    """Seconds all CPUs together spent busy since boot (/proc/stat; steal not counted)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children (ik_mul_mat, the probe)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def other_cores(start: tuple[float, float, float], end: tuple[float, float, float]) -> float:
    """Cores other processes kept busy on average between two (wall, busy, own) samples: a row
    timed next to them is not a quiet-machine figure (ik's 2-thread barrier suffers most)."""
    wall = end[0] - start[0]
    return max(0.0, ((end[1] - start[1]) - (end[2] - start[2])) / wall) if wall > 0 else 0.0


def cpu_sample() -> tuple[float, float, float]:
    return time.monotonic(), cpu_busy_seconds(), own_cpu_seconds()


def wait_quiet(limit_s: float, threshold: float = 0.1) -> float:
    """Waits (at most limit_s) until other processes use under `threshold` cores over one
    second; returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        before = cpu_sample()
        time.sleep(1.0)
        if other_cores(before, cpu_sample()) < threshold:
            break
    return time.monotonic() - start


def parse_ik_lines(stdout: str) -> dict[tuple[int, int], dict[str, Any]]:
    """ik_mul_mat's JSON lines, by (T, threads)."""
    out = {}
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            case = json.loads(line)
            out[(int(case["t"]), int(case["threads"]))] = case
    return out


def cold_copies(nbytes: int, cold_bytes: int) -> int:
    """Copies of a weight that together exceed cold_bytes (at least one)."""
    return max(1, math.ceil(cold_bytes / nbytes))


# ---------------------------------------------------------------- ik_llama.cpp

def ik_source_dir(build: str) -> str:
    for line in open(os.path.join(build, "CMakeCache.txt")):
        if line.startswith("CMAKE_HOME_DIRECTORY:"):
            return line.split("=", 1)[1].strip()
    raise RuntimeError(f"{build}/CMakeCache.txt names no source directory")


def ik_libraries(build: str) -> list[str]:
    """The build's libggml* shared libraries (or static archives where it made no .so)."""
    found = sorted(glob.glob(os.path.join(build, "**", "libggml*.so"), recursive=True))
    return found or sorted(glob.glob(os.path.join(build, "**", "libggml*.a"), recursive=True))


def build_ik_mul_mat(build: str, work: str) -> str:
    """Compiles ik_mul_mat.cc against the build; returns the binary's path (raises with the
    compiler's message where it cannot)."""
    src = ik_source_dir(build)
    libs = ik_libraries(build)
    if not libs:
        raise RuntimeError(f"no libggml*.so or .a under {build} (build its ggml target)")
    binary = os.path.join(work, "ik_mul_mat")
    cmd = [os.environ.get("CXX", "g++"), "-O2", "-std=c++17",
           "-I", os.path.join(src, "ggml", "include"), "-I", os.path.join(src, "ggml", "src"),
           os.path.join(os.path.dirname(os.path.abspath(__file__)), "ik_mul_mat.cc"), "-o", binary]
    for lib in libs:
        cmd += [lib, f"-Wl,-rpath,{os.path.dirname(lib)}"]
    cmd += ["-fopenmp", "-lpthread", "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"compiling ik_mul_mat.cc failed:\n{r.stderr[-3000:]}")
    return binary


def run_ik(binary: str, matrix: Matrix, ik_type: str, ts: Sequence[int], threads: Sequence[int],
           cold_bytes: int, min_time: float) -> dict[tuple[int, int], dict[str, Any]]:
    cmd = [binary, "--type", ik_type, "--m", str(matrix.m), "--k", str(matrix.k),
           "--t", ",".join(map(str, ts)), "--threads", ",".join(map(str, threads)),
           "--cold-bytes", str(cold_bytes), "--min-time", str(min_time)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return parse_ik_lines(r.stdout)


# ---------------------------------------------------------------- cpukern

class CpukernMatrix:
    """One matrix's cold copies, prepared for cpukern, and its timed call."""

    def __init__(self, matrix: Matrix, fmt: str, cold_bytes: int, rng):
        import ml_dtypes
        import numpy as np
        from cpukern import linear, moe, ternary
        self.matrix, self.fmt, self.rng = matrix, fmt, rng
        m, k = matrix.m, matrix.k
        if matrix.kind == "ternary":
            words = (k + 15) // 16
            # random 2-bit codes (cpukern.ternary.pack's layout); 11 (invalid) becomes 10 (+1)
            w = rng.integers(0, 1 << 32, size=(m, words), dtype=np.uint64).astype(np.uint32)
            w ^= w & (w >> 1) & np.uint32(0x55555555)
            scale = np.full(m, 0.02, np.float32)
            prepare = lambda: ternary.prepare(w, k, scale)  # noqa: E731
            first = prepare()
            # bytes the int8 path reads: its own layout where the variant has one
            int8_extra = ternary.serialized_size(first, int8=True) - ternary.serialized_size(first)
            self.nbytes = int8_extra or first.nbytes
            self.x_dtype = np.float32
            self.call = lambda wt, x, th: ternary.gemv(wt, x, act="int8_bitnet", threads=th)
        else:
            wb = (rng.standard_normal((m, k), dtype=np.float32) / np.sqrt(k)).astype(ml_dtypes.bfloat16)
            if fmt == "int8":
                q, scales = moe.quantize(wb, format="int8")
                prepare = lambda: linear.prepare(q, format="int8", scales=scales)  # noqa: E731
            elif matrix.kind == "mxfp4":
                blocks, scales = moe.quantize(wb)
                act = "int8" if fmt == "mxfp4_a8" else "fp32"
                prepare = lambda: linear.prepare(blocks, format="mxfp4", scales=scales, act=act)  # noqa: E731
            else:
                prepare = lambda: linear.prepare(wb)  # noqa: E731
            first = prepare()
            self.nbytes = first.nbytes
            self.x_dtype = ml_dtypes.bfloat16
            self.call = lambda wt, x, th: linear.linear(x, wt, threads=th)
        self.copies = [first] + [prepare() for _ in range(cold_copies(first.nbytes, cold_bytes) - 1)]

    def ms(self, t: int, threads: int, min_time: float) -> float:
        from ggml_peer import timeit
        x = self.rng.standard_normal((t, self.matrix.k)).astype(self.x_dtype)
        return timeit([lambda w=w: self.call(w, x, threads) for w in self.copies], min_time) * 1e3


# ---------------------------------------------------------------- the run

def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    import numpy as np
    import cpukern
    from ggml_peer import l3_bytes, log, probe

    cwd = os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd())
    probe_bin = args.probe or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bandwidth", "bandwidth")
    cold_bytes = 3 * l3_bytes()
    chosen = matrices(args.models, args.matrices, args.lm_head_rows)
    if not chosen:
        print("no matrices chosen (--models / --matrices)")
        return 1

    ik_binary, ik_skip, ik_commit, build = None, None, None, None
    if args.ik_llama_cpp_build:
        build = os.path.abspath(os.path.join(cwd, args.ik_llama_cpp_build))
        try:
            ik_binary = build_ik_mul_mat(build, tempfile.mkdtemp(prefix="cpukern-ik-peer-"))
            ik_commit = ggml_source_commit(build)
        except (OSError, RuntimeError) as e:
            ik_skip = f"ik_llama.cpp rows skipped: {e}"
    else:
        ik_skip = "ik_llama.cpp rows skipped: no --ik-llama-cpp-build given"
    if ik_skip:
        print(ik_skip)

    machine = probe(probe_bin)
    print(f"cpu: {machine['cpu']}; clock (measured) {machine.get('clock_GHz_measured', 0):.2f} GHz; "
          f"L3 {machine['l3_bytes'] >> 20} MiB; {machine['cores']} cores; cold sets over {cold_bytes >> 20} MiB")
    selected = {op: next(v["name"] for v in cpukern.kernels(op) if v["selected"]) for op in ("ternary_gemv", "linear")}
    print(f"cpukern {cpukern.__version__} (ternary '{selected['ternary_gemv']}', linear '{selected['linear']}'); "
          f"ik_llama.cpp {ik_commit or '-'} ({build or 'not given'})")

    rng = np.random.default_rng(0)
    loads = [os.getloadavg()[0]]
    other: dict[Matrix, float] = {}  # cores used by other processes while the matrix ran
    probes = [machine["read_GB_s"]]
    timings: dict[tuple, list[float]] = {}  # (matrix, fmt or ik type, t, threads) -> ms per round
    ik_cases: dict[tuple, dict[str, Any]] = {}
    cpukern_bytes: dict[tuple[Matrix, str], int] = {}  # weight bytes one call reads
    for matrix in chosen:
        formats = cpukern_formats(matrix, args.mxfp4_act, args.int8)
        prepared = {fmt: CpukernMatrix(matrix, fmt, cold_bytes, rng) for fmt in formats}
        cpukern_bytes.update({(matrix, fmt): pm.nbytes for fmt, pm in prepared.items()})
        log(f"{matrix.model} {matrix.names} {matrix.m}x{matrix.k}: "
            + ", ".join(f"{f} {len(p.copies)} x {p.nbytes / 1e6:.1f} MB" for f, p in prepared.items()))
        timed = [0.0, 0.0, 0.0]  # wall, busy and own CPU seconds over the rounds (waits left out)
        for r in range(args.rounds):
            if args.wait_quiet > 0:
                waited = wait_quiet(args.wait_quiet)
                if waited > 1.5:
                    log(f"  waited {waited:.0f} s for a quiet machine")
            start = cpu_sample()
            for fmt, pm in prepared.items():
                for th in args.threads:
                    for t in args.t:
                        timings.setdefault((matrix, fmt, t, th), []).append(pm.ms(t, th, args.min_time))
            for ik_type in sorted({IK_TYPE[f] for f in formats}) if ik_binary else ():
                try:
                    for key, case in run_ik(ik_binary, matrix, ik_type, args.t, args.threads,
                                            cold_bytes, args.min_time).items():
                        timings.setdefault((matrix, "ik " + ik_type) + key, []).append(case["seconds_per_call"] * 1e3)
                        ik_cases[(matrix, ik_type) + key] = case
                except RuntimeError as e:
                    print(f"ik_llama.cpp: {matrix.model} {matrix.names} {ik_type}: {e}")
            timed = [a + b - c for a, b, c in zip(timed, cpu_sample(), start)]
        other[matrix] = other_cores((0.0, 0.0, 0.0), tuple(timed))
        loads.append(os.getloadavg()[0])
        log(f"  other processes kept {other[matrix]:.2f} cores busy meanwhile")
        del prepared
    while len(probes) < 3:
        probes.append(probe(probe_bin)["read_GB_s"])
    probe_gb_s = {t: statistics.median(float(p[t]) for p in probes) for t in probes[0]}

    print(f"\nmedians of {args.rounds} interleaved rounds; 1-minute load average {min(loads):.2f}-{max(loads):.2f}; "
          f"read probe (median of {len(probes)}): "
          + ", ".join(f"{t} thr {v:.1f} GB/s" for t, v in probe_gb_s.items()))
    if ik_skip:
        print(ik_skip)
    print("\nother load: cores that other processes kept busy on average while the matrix's rounds ran "
          "(/proc/stat less this process and its children); 0.00 = a quiet machine")
    print("\n" + TABLE_HEADER)
    results = []
    for matrix in chosen:
        for fmt in cpukern_formats(matrix, args.mxfp4_act, args.int8):
            for th in args.threads:
                for t in args.t:
                    ck_ms = statistics.median(timings[(matrix, fmt, t, th)])
                    ik_runs = timings.get((matrix, "ik " + IK_TYPE[fmt], t, th))
                    ik_ms = statistics.median(ik_runs) if ik_runs else None
                    case = ik_cases.get((matrix, IK_TYPE[fmt], t, th))
                    ck_bytes = cpukern_bytes[(matrix, fmt)]
                    n = row_numbers(ck_ms, ck_bytes, ik_ms, case["weight_bytes"] if case else None,
                                    probe_gb_s[str(th)])
                    ik_type = case["kernel_type"] if case else IK_TYPE[fmt]
                    print(format_row(matrix, fmt, ik_type, t, th, ck_ms, ik_ms, n, other[matrix]))
                    results.append({"matrix": dataclasses.asdict(matrix), "format": fmt, "t": t,
                                    "threads": th, "cpukern_ms": ck_ms, "ik_ms": ik_ms,
                                    "cpukern_bytes": ck_bytes, "ik_case": case,
                                    "other_cores": other[matrix], **n})
    if ik_cases:
        worst: dict[str, float] = {}
        for case in ik_cases.values():
            worst[case["kernel_type"]] = max(worst.get(case["kernel_type"], 0.0), case["check_error"])
        print("\nik_llama.cpp's results against the float weights before quantization (first token, "
              "64 rows), largest error as a fraction of sum |w x|: "
              + ", ".join(f"{k} {v:.2g}" for k, v in sorted(worst.items())))
    if args.json:
        with open(os.path.join(cwd, args.json), "w") as f:
            json.dump({"machine": machine, "probe_GB_s": probe_gb_s, "ik_commit": ik_commit, "load_average": loads,
                       "rows": results, "rounds": {repr(k): v for k, v in timings.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
