"""cpukern demo: what this CPU is, which kernels it gets, are they right, and how fast.

    ./bazelw run //:demo [-- --threads N --json out.json --plot roofline.png --quick ...]

For each op it checks the selected variant against the reference on a real model shape and
times it against the obvious baseline measured in the same run (numpy fp32 `W @ x` for the
ternary ops, the reference variant for MoE). Every timing is given twice: hot (the same
weights every call: cached where they fit in the L3) and cold (calls rotate over distinct
weight sets spanning at least 3x the L3, so the weights stream from memory; for MoE, over 8
routings to different experts), cold next to its fraction of the measured all-core read
bandwidth. --plot FILE.png draws every measured kernel
on a roofline (benchmarks/roofline.py: measured read bandwidth and BLAS fp32 peak).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from typing import Any, Callable, Optional


def _threads_from_argv(argv: list[str]) -> Optional[str]:
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return None


# The BLAS roof (numpy matmul) must use the kernels' thread count; BLAS reads it at import.
if _threads_from_argv(sys.argv[1:]):
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _threads_from_argv(sys.argv[1:])

import ml_dtypes
import numpy as np

import cpukern
from cpukern import _ext, moe, ternary, widely_linear

import roofline  # benchmarks/roofline.py, next to this file

MOE_LAYERS = {  # name: (E, topk, H, I, activation, bias)
    "gpt-oss-20b": (32, 4, 2880, 2880, "swigluoai", True),
    "gemma-4-26b-a4b": (128, 8, 2816, 704, "gelu_tanh", False),
    "qwen3-30b-a3b": (128, 8, 2048, 768, "silu", False),
}


MIN_TIME = 0.3  # seconds of repetitions per measurement (--quick: less)
POINTS: list[dict[str, Any]] = []  # roofline points of every kernel measured (--plot)
T0 = time.time()


def progress(msg: str) -> None:
    """One line per measurement on stderr, so that long runs show where they are."""
    print(f"  [{time.time() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def measured(label: str, group: str, ops: float, nbytes: float, seconds: float) -> dict[str, str]:
    """Records a roofline point; returns the row fields (intensity, Gops/s)."""
    p = roofline.point(label, ops, nbytes, seconds, group)
    POINTS.append(p)
    return {"intensity": p["intensity"], "gops_s": p["ops_per_s"] / 1e9}


def timeit(fn: Callable[[], Any], min_time: Optional[float] = None, max_reps: int = 200) -> float:
    """Median seconds per call after one warm-up call."""
    min_time = MIN_TIME if min_time is None else min_time
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (time.perf_counter() - start < min_time or len(times) < 3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def read_bandwidth(nbytes: int, threads: Optional[int]) -> float:
    """Bytes/s of a streaming read far above the L3 with the kernels' thread pool and thread
    count (cpukern's own probe: a single-threaded numpy sum sees about half of it)."""
    return _ext.read_bandwidth(nbytes, threads or 0, min(0.5, 2 * MIN_TIME))


def l3_bytes() -> int:
    """The L3 of cpu0 (cpukern's detection: sysfs, else sysconf, else 32 MiB)."""
    return int(cpukern.cpu_info()["l3_bytes"])


COLD_MAX_SETS = 64  # --quick: tiny shapes would need hundreds of copies; the span is reported


def cold_copies(make: Callable[[], Any], nbytes: int) -> list[Any]:
    """Distinct weight sets spanning >= 3x the L3 (at least 2; at most COLD_MAX_SETS)."""
    n = min(COLD_MAX_SETS, max(2, -(-3 * l3_bytes() // max(1, nbytes))))
    return [make() for _ in range(n)]


def timeit_rotating(fns: list[Callable[[], Any]]) -> float:
    """Median seconds per call over calls that rotate through fns (the cold sets)."""
    state = {"i": 0}

    def step():
        fns[state["i"] % len(fns)]()
        state["i"] += 1

    return timeit(step)


def selected(op: str) -> str:
    return next(v["name"] for v in cpukern.kernels(op) if v["selected"])


def print_table(rows: list[dict[str, Any]], cols: list[tuple[str, str, str]]) -> None:
    """cols: (key, header, format spec); rows hold numbers (what --json writes)."""
    cells = [[format(r[k], f) if k in r else "" for k, _, f in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (_, h, _) in enumerate(cols)]
    print("  ".join(h.ljust(w) for (_, h, _), w in zip(cols, widths)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)))


def demo_ternary(args, rng, results, bandwidth):
    m, k = args.ternary_shape
    print(f"\n== ternary_gemv: {m} x {k} ({'Llama-3-8B down' if (m, k) == (4096, 14336) else 'custom'}), "
          f"selected '{selected('ternary_gemv')}'")
    w = rng.integers(-1, 2, size=(m, k), dtype=np.int8)
    scale = rng.uniform(0.5, 1.5, m).astype(np.float32)
    packed = ternary.pack(w)
    dense = w.astype(np.float32) * scale[:, None]
    del w
    fast = ternary.prepare(packed, k, scale)
    ref = ternary.prepare(packed, k, scale, variant="reference")
    cold = cold_copies(lambda: ternary.prepare(packed, k, scale), fast.nbytes)
    cold_span = len(cold) * fast.nbytes
    rows = []
    for b in args.batches:
        x = rng.standard_normal((b, k)).astype(np.float32)
        y = ternary.gemv(fast, x, threads=args.threads)
        y_ref = ternary.gemv(ref, x, threads=args.threads)
        mag = np.abs(x) @ (np.abs(dense.T))
        ok = bool(np.all(np.abs(y - y_ref) <= 2e-5 * mag + 1e-30))
        progress(f"ternary_gemv B={b}: numpy baseline")
        t_np = timeit(lambda: x @ dense.T if b > 1 else dense @ x[0])
        ops = 2.0 * m * k * b  # adds/subtracts, counted like the FLOPs of a dense GEMV
        io_bytes = 4 * b * (k + m)
        measured(f"B={b}", "numpy fp32 W@x", ops, dense.nbytes + io_bytes, t_np)
        row = {"op": "ternary_gemv", "shape": f"{m}x{k}", "B": b, "cold_sets": len(cold),
               "cold_span_MiB": cold_span / 2**20, "l3_MiB": l3_bytes() / 2**20}
        for act in ("fp32", "int8"):
            progress(f"ternary_gemv B={b}: act={act}, hot and cold ({len(cold)} sets)")
            t = timeit(lambda: ternary.gemv(fast, x, act=act, threads=args.threads))
            t_cold = timeit_rotating([lambda w=w: ternary.gemv(w, x, act=act, threads=args.threads)
                                      for w in cold])
            row[f"{act}_hot_ms"] = t * 1e3
            row[f"{act}_cold_ms"] = t_cold * 1e3
            row[f"{act}_gw_s"] = m * k * b / t / 1e9
            row[f"{act}_vs_numpy"] = t_np / t
            row[f"{act}_cold_GB_s"] = fast.nbytes / t_cold / 1e9
            row[f"{act}_cold_of_read_bw"] = fast.nbytes / t_cold / bandwidth
            for key, v in measured(f"B={b}", f"ternary_gemv {act}", ops, fast.nbytes + io_bytes, t).items():
                row[f"{act}_{key}"] = v
            measured(f"B={b}", f"ternary_gemv {act} cold", ops, fast.nbytes + io_bytes, t_cold)
        row.update({"numpy_ms": t_np * 1e3, "packed_GB_s": packed.nbytes / row["fp32_hot_ms"] / 1e6,
                    "check": "ok" if ok else "MISMATCH"})
        rows.append(row)
    print(f"hot: the same weights every call; cold: {len(cold)} prepared copies ({cold_span / 2**20:.0f} MiB"
          f"{'' if cold_span >= 3 * l3_bytes() else ', LESS than 3x the L3: not cold (--quick)'}) in rotation")
    print_table(rows, [("B", "B", "d"), ("fp32_hot_ms", "fp32 hot ms", ".3f"), ("fp32_gw_s", "Gweights/s", ".1f"),
                       ("packed_GB_s", "GB/s (2-bit)", ".1f"), ("fp32_vs_numpy", "vs numpy", ".1f"),
                       ("fp32_cold_ms", "fp32 cold ms", ".3f"), ("fp32_cold_of_read_bw", "of read BW", ".0%"),
                       ("int8_hot_ms", "int8 hot ms", ".3f"), ("int8_gw_s", "Gweights/s", ".1f"),
                       ("int8_vs_numpy", "vs numpy", ".1f"), ("int8_cold_ms", "int8 cold ms", ".3f"),
                       ("int8_cold_of_read_bw", "of read BW", ".0%"), ("numpy_ms", "numpy fp32 W@x ms", ".3f"),
                       ("check", "check", "s")])
    results["ternary_gemv"] = rows
    return all(r["check"] == "ok" for r in rows)


def demo_widely_linear(args, rng, results, bandwidth):
    n2, m2 = args.wl_shape
    n, m = n2 // 2, m2 // 2
    print(f"\n== widely_linear (Fairy2i, 2 stages): {n2} x {m2}, selected '{selected('widely_linear')}'")
    a = rng.standard_normal((n2, m2)).astype(np.float32)
    planes, scales = widely_linear.quantize(a, stages=2)
    dense = widely_linear.dense(planes, scales, m)
    layer = widely_linear.prepare(planes, scales, m)
    ref = widely_linear.prepare(planes, scales, m, variant="reference")
    cold = cold_copies(lambda: widely_linear.prepare(planes, scales, m), layer.nbytes)
    rows = []
    for b in args.batches[:2]:
        x = rng.standard_normal((b, m2)).astype(np.float32)
        y = widely_linear.apply(layer, x, threads=args.threads)
        y_ref = widely_linear.apply(ref, x, threads=args.threads)
        mag = np.abs(x) @ np.abs(dense.T) * 4
        ok = bool(np.all(np.abs(y - y_ref) <= 2e-5 * mag + 1e-30))
        progress(f"widely_linear B={b}: fused, unfused, numpy")
        t_f = timeit(lambda: widely_linear.apply(layer, x, threads=args.threads))
        t_c = timeit_rotating([lambda l=l: widely_linear.apply(l, x, threads=args.threads) for l in cold])
        t_u = timeit(lambda: widely_linear.apply(layer, x, fused=False, threads=args.threads))
        t_np = timeit(lambda: x @ dense.T)
        ops = 2.0 * n2 * m2 * b  # dense-equivalent operations of the (2n, 2m) layer
        io_bytes = 4 * b * (n2 + m2)
        point = measured(f"B={b}", "widely_linear fused", ops, layer.nbytes + io_bytes, t_f)
        measured(f"B={b}", "widely_linear unfused", ops, layer.nbytes + io_bytes, t_u)
        measured(f"B={b}", "numpy fp32 a@x", ops, dense.nbytes + io_bytes, t_np)
        rows.append({**point, "B": b, "fused_ms": t_f * 1e3, "fused_cold_ms": t_c * 1e3,
                     "cold_of_read_bw": layer.nbytes / t_c / bandwidth, "cold_sets": len(cold),
                     "unfused_ms": t_u * 1e3,
                     "fusion": t_u / t_f, "GB_s": planes.nbytes / t_f / 1e9,
                     "numpy_ms": t_np * 1e3, "vs_numpy": t_np / t_f,
                     "check": "ok" if ok else "MISMATCH"})
    print(f"hot: the same layer every call; cold: {len(cold)} prepared copies in rotation "
          f"({len(cold) * layer.nbytes / 2**20:.0f} MiB; L3 {l3_bytes() >> 20} MiB"
          f"{'' if len(cold) * layer.nbytes >= 3 * l3_bytes() else ': LESS than 3x the L3, not cold (--quick)'})")
    print_table(rows, [("B", "B", "d"), ("fused_ms", "fused hot ms", ".3f"), ("fused_cold_ms", "fused cold ms", ".3f"),
                       ("cold_of_read_bw", "of read BW", ".0%"), ("unfused_ms", "unfused hot ms", ".3f"),
                       ("fusion", "fusion gain", ".2f"), ("GB_s", "plane GB/s", ".1f"),
                       ("numpy_ms", "numpy a@x ms", ".3f"), ("vs_numpy", "vs numpy", ".1f"),
                       ("check", "check", "s")])
    results["widely_linear"] = rows
    return all(r["check"] == "ok" for r in rows)


def random_bf16(rng, shape, std):
    """Gaussian bf16 weights, fast: a 4M-value random pool laid out with a random shift per expert."""
    pool = (rng.standard_normal(1 << 22, dtype=np.float32) * std).astype(ml_dtypes.bfloat16)
    out = np.empty(shape, dtype=ml_dtypes.bfloat16)
    flat = out.reshape(shape[0], -1)
    for i in range(shape[0]):
        flat[i] = np.resize(np.roll(pool, int(rng.integers(pool.size))), flat.shape[1])
    return out


def demo_moe(args, rng, results, bandwidth):
    e, topk, h, inter, act, bias = MOE_LAYERS[args.moe_layer]
    print(f"\n== fused_moe: {args.moe_layer} (E={e}, top-{topk}, H={h}, I={inter}, {act}), "
          f"selected '{selected('fused_moe')}'")
    w13 = random_bf16(rng, (e, 2 * inter, h), 1 / np.sqrt(h))
    w2 = random_bf16(rng, (e, h, inter), 1 / np.sqrt(inter))
    b13 = (rng.standard_normal((e, 2 * inter)) * 0.1).astype(ml_dtypes.bfloat16) if bias else None
    b2 = (rng.standard_normal((e, h)) * 0.1).astype(ml_dtypes.bfloat16) if bias else None
    p13, p2 = moe.prepare(w13), moe.prepare(w2)
    r13, r2 = moe.prepare(w13, variant="reference"), moe.prepare(w2, variant="reference")
    del w13, w2
    expert_bytes = 3 * h * inter * 2
    rows = []
    for t in args.tokens:
        x = (rng.standard_normal((t, h))).astype(ml_dtypes.bfloat16)
        tw, ids = moe.route(rng.standard_normal((t, e)).astype(np.float32), topk)
        kw = dict(activation=act, w13_bias=b13, w2_bias=b2, threads=args.threads)
        progress(f"fused_moe T={t}: selected (hot, cold) and reference variants")
        y = moe.fused_moe(x, p13, p2, tw, ids, **kw)
        t_fast = timeit(lambda: moe.fused_moe(x, p13, p2, tw, ids, **kw))
        # Cold: 8 routings drawn independently, in rotation (a call's experts were not the
        # previous call's); their mean touched bytes give the cold GB/s.
        routes = [moe.route(rng.standard_normal((t, e)).astype(np.float32), topk) for _ in range(8)]
        t_cold = timeit_rotating([lambda r=r: moe.fused_moe(x, p13, p2, r[0], r[1], **kw) for r in routes])
        cold_touched = float(np.mean([len(np.unique(r[1])) for r in routes])) * expert_bytes
        t0 = time.perf_counter()  # the scalar reference is slow: one call checks and times it
        y_ref = moe.fused_moe(x, r13, r2, tw, ids, **kw)
        t_ref = time.perf_counter() - t0
        ok = np.allclose(y.astype(np.float32), y_ref.astype(np.float32), atol=1e-2, rtol=3.2e-2)
        touched = len(np.unique(ids)) * expert_bytes
        flops = 2 * t * topk * 3 * h * inter
        point = measured(f"T={t}", "fused_moe", flops, touched + 4 * t * h, t_fast)
        rows.append({**point, "T": t, "hot_ms": t_fast * 1e3, "TFLOP_s": flops / t_fast / 1e12,
                     "GB_s": touched / t_fast / 1e9, "of_read_bw": touched / bandwidth / t_fast,
                     "hot_fits_l3": int(touched <= l3_bytes()), "cold_ms": t_cold * 1e3,
                     "cold_GB_s": cold_touched / t_cold / 1e9,
                     "cold_of_read_bw": cold_touched / bandwidth / t_cold,
                     "ref_ms": t_ref * 1e3, "vs_ref": t_ref / t_fast,
                     "check": "ok" if ok else "MISMATCH"})
    print(f"hot: the same routing every call (its experts {'fit' if rows and rows[0]['hot_fits_l3'] else 'do not fit'}"
          f" in the {l3_bytes() >> 20} MiB L3 at T={rows[0]['T'] if rows else '-'}); cold: 8 routings in rotation"
          f"{'' if e * expert_bytes >= 3 * l3_bytes() else ' (the whole layer is LESS than 3x the L3: not cold, --quick)'}")
    print_table(rows, [("T", "T", "d"), ("hot_ms", "hot ms", ".2f"), ("TFLOP_s", "TFLOP/s", ".3f"),
                       ("GB_s", "weights GB/s", ".1f"), ("of_read_bw", "of read BW", ".0%"),
                       ("cold_ms", "cold ms", ".2f"), ("cold_GB_s", "cold GB/s", ".1f"),
                       ("cold_of_read_bw", "of read BW", ".0%"),
                       ("ref_ms", "reference ms", ".1f"), ("vs_ref", "speedup", ".1f"),
                       ("check", "check", "s")])
    results["fused_moe"] = rows
    return all(r["check"] == "ok" for r in rows)


def user_path(path: Optional[str]) -> Optional[str]:
    """A relative path means the directory `bazel run` was started from, not the runfiles."""
    if path is None or os.path.isabs(path):
        return path
    return os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), path)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model name")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_id() -> dict[str, Any]:
    """Family/model/stepping (x86) or MIDR fields (AArch64) of the first CPU in /proc/cpuinfo."""
    keys = {"cpu family": "family", "model": "model", "stepping": "stepping",
            "CPU implementer": "implementer", "CPU part": "part", "CPU variant": "variant",
            "CPU revision": "revision"}
    out: dict[str, Any] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                k, v = k.strip(), v.strip()
                if k in keys:
                    out[keys[k]] = int(v, 0) if v.lstrip("-").isdigit() or v.startswith("0x") else v
    except OSError:
        pass
    return out


def machine_probe() -> dict[str, Any]:
    """The measured clock from benchmarks/bandwidth (the C++ probe) where it is in the
    runfiles (`bazel run //:demo`); {} otherwise."""
    import subprocess
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bandwidth", "bandwidth")
    if not os.access(binary, os.X_OK):
        return {}
    r = subprocess.run([binary, "--json"], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def shape(s: str) -> tuple[int, int]:
    a, b = s.lower().split("x")
    return int(a), int(b)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=None, help="threads per op (default: all cores)")
    p.add_argument("--ternary-shape", type=shape, default=(4096, 14336), help="M x K (default 4096x14336)")
    p.add_argument("--wl-shape", type=shape, default=(4096, 4096), help="2n x 2m (default 4096x4096)")
    p.add_argument("--moe-layer", choices=sorted(MOE_LAYERS), default="gpt-oss-20b")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16], help="ternary batch sizes")
    p.add_argument("--tokens", type=int, nargs="+", default=[1, 16], help="MoE token counts")
    p.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="draw a roofline of every kernel measured (needs matplotlib)")
    args = p.parse_args(argv)
    args.json, args.plot = user_path(args.json), user_path(args.plot)
    global MIN_TIME
    if args.plot:
        import matplotlib  # noqa: F401  (fail before the measurements, not after)
    if args.quick:
        MIN_TIME = 0.05
        args.ternary_shape, args.wl_shape, args.batches, args.tokens = (512, 1000), (256, 200), [1, 3], [1, 5]
        MOE_LAYERS["gpt-oss-20b"] = (4, 2, 96, 80, "swigluoai", True)

    t0 = time.time()
    info = cpukern.cpu_info()
    print(f"cpukern {cpukern.__version__} on {info['arch']} ({info['vendor']}, {platform.processor() or '?'}), "
          f"{info['num_cores']} cores, L2 {info['l2_bytes'] >> 10} KiB")
    print(f"features: {' '.join(info['features']) or '(none)'}")
    ident = cpu_id()
    probed = machine_probe()
    clock = probed.get("clock_GHz_measured")
    print(f"cpu: {cpu_model()} ({', '.join(f'{k} {v}' for k, v in ident.items()) or '?'}), "
          f"L3 {l3_bytes() >> 20} MiB, clock {f'{clock:.2f} GHz (measured)' if clock else 'not measured (run as bazel run //:demo)'}")
    for op in ("ternary_gemv", "widely_linear", "fused_moe", "decode_attention"):
        print(f"{op}:")
        for v in cpukern.kernels(op):
            mark = "selected" if v["selected"] else ("available" if v["supported"] else
                                                     "needs " + ", ".join(v["requires"]))
            print(f"  {v['name']:<18} {v['ukernel']:<58} {mark}")
    threads = args.threads or cpukern.get_num_threads()
    bw_mib = 64 if args.quick else 1024
    bw = read_bandwidth(bw_mib << 20, args.threads)
    print(f"measured read bandwidth: {bw / 1e9:.1f} GB/s ({threads} threads streaming {bw_mib} MiB)")
    rng = np.random.default_rng(0)
    results: dict[str, Any] = {
        "version": cpukern.__version__,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_model": cpu_model(), "platform": platform.platform(), **info, **ident,
                    "l3_bytes": l3_bytes(), **({"clock_GHz_measured": clock} if clock else {})},
        "threads": threads,
        "quick": bool(args.quick),
        "read_bandwidth_GB_s": bw / 1e9,
    }
    ok = demo_ternary(args, rng, results, bw)
    ok &= demo_widely_linear(args, rng, results, bw)
    ok &= demo_moe(args, rng, results, bw)
    print(f"\n{'all selected variants agree with the reference' if ok else 'MISMATCH against the reference'}"
          f" ({time.time() - t0:.1f} s)")
    if args.plot:
        progress("peak fp32 throughput (numpy BLAS matmul)")
        peak = roofline.measure_peak_flops(256 if args.quick else 512, min_time=2 * MIN_TIME)
        results["peak_GFLOP_s"] = peak / 1e9
        roofline.draw(POINTS, bw, peak, args.plot,
                      title=f"cpukern on {info['arch']} ({info['num_cores']} cores): {len(POINTS)} measurements")
        print(f"roofline: {args.plot} ({len(POINTS)} points, read {bw / 1e9:.1f} GB/s, "
              f"peak {peak / 1e9:.0f} GFLOP/s: numpy BLAS fp32 matmul)")
    results["roofline_points"] = POINTS
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
