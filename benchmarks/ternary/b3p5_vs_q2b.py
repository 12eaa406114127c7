"""One run: the 1.6-bit b3p5 int8 kernel next to the 2-bit q2b one (and ggml's TQ1_0/TQ2_0
when a ggml build is given), hot and cold, 1 and 2 threads, with the all-core read probe
and the load average before and after.

    ./bazelw build //benchmarks/ternary //benchmarks/bandwidth
    python3 benchmarks/ternary/b3p5_vs_q2b.py --bench bazel-bin/benchmarks/ternary/ternary \\
        --probe bazel-bin/benchmarks/bandwidth/bandwidth [--ggml-build /tmp/ggml-build]

ggml is timed with its own `test-backend-ops perf` (MUL_MAT, B=1; it repeats the same
tensors, so 4096x14336 is hot and 32768x14336 streams from memory anyway); its thread count
is set with an LD_PRELOAD get_nprocs shim, as benchmarks/peer does.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peer"))
from ggml_cli import build_shim, ggml_enums, run_ggml, test_line  # noqa: E402


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


def run_tq(build, shapes, threads, work):
    """ggml's TQ1_0 / TQ2_0 MUL_MAT at B=1 for each (m, k): us per run by case name."""
    types, ops = ggml_enums(build)
    f32 = types["GGML_TYPE_F32"]
    lines = [test_line(ops["GGML_OP_MUL_MAT"], f32, [m, 1, 1, 1],
                       [(types["GGML_TYPE_" + ty], [k, m, 1, 1]), (f32, [k, 1, 1, 1])],
                       f"{ty}_{m}x{k}")
             for ty in ("TQ1_0", "TQ2_0") for m, k in shapes]
    return run_ggml(os.path.join(build, "bin", "test-backend-ops"), build_shim(work), lines,
                    threads, work)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True)
    p.add_argument("--probe", required=True)
    p.add_argument("--ggml-build")
    p.add_argument("--min-time", default="1")
    p.add_argument("--rows", default="avx2|avx2_b3p5")
    a = p.parse_args()
    print("load before:", *loadavg())
    probe = json.loads(subprocess.run([a.probe, "--json"], check=True, capture_output=True,
                                      text=True).stdout)
    print("probe:", json.dumps(probe))
    flt = f"^({a.rows})/int8/(4096x14336|32768x14336)/B1/T[12]/(hot|cold)"
    r = subprocess.run([a.bench, "--benchmark_filter=" + flt, "--benchmark_min_time=" + a.min_time,
                        "--benchmark_format=json"], check=True, capture_output=True, text=True)
    rows = json.loads(r.stdout)["benchmarks"]
    print("load after cpukern:", *loadavg())
    gg = {}
    if a.ggml_build:
        with tempfile.TemporaryDirectory() as work:
            for t in (1, 2):
                gg[t] = run_tq(a.ggml_build, [(4096, 14336), (32768, 14336)], t, work)
        print("load after ggml:", *loadavg())
    gbs = probe["read_GB_s"]
    print("\n| kernel | shape | threads | weights | us (real) | us (CPU) | Gweights/s | GB/s | of probe (same threads) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b in rows:
        name = b["name"].replace("/real_time", "")
        row, _, shape, _, th, temp = name.split("/")
        t = th[1:]
        us = b["real_time"]
        gbps = b["GB/s"]
        print(f"| {row} int8 | {shape} | {t} | {temp} | {us:.0f} | {b['cpu_time']:.0f} | "
              f"{b['Gweights/s']:.1f} | {gbps:.1f} | {gbps / gbs[t]:.2f} |")
    for t, res in gg.items():
        for name, us in res.items():
            ty, shape = name.split("_", 1)[0] + "_0", name.split("_")[-1]
            m, k = map(int, shape.split("x"))
            bits = 1.6875 if ty == "TQ1_0" else 2.0625
            gbps = m * k * bits / 8 / us / 1e3
            print(f"| ggml {ty} | {shape} | {t} | {'hot' if m == 4096 else 'streamed'} | {us:.0f} | | "
                  f"{m * k / us / 1e3:.1f} | {gbps:.1f} | {gbps / gbs[str(t)]:.2f} |")


if __name__ == "__main__":
    main()
