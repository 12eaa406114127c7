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
import re
import subprocess
import tempfile


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


def ggml_enum(header, name):
    body = re.search(r"enum\s+" + name + r"\s*\{(.*?)\};", header, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", re.sub(r"//[^\n]*", "", body), flags=re.S)
    out, v = {}, -1
    for item in (x.strip() for x in body.split(",")):
        if not item:
            continue
        if "=" in item:
            k, e = (p.strip() for p in item.split("=", 1))
            v = out[e] if e in out else int(e, 0)
        else:
            k, v = item, v + 1
        out[k] = v
    return out


def run_ggml(build, shapes, threads, work):
    src = [l.split("=", 1)[1].strip() for l in open(os.path.join(build, "CMakeCache.txt"))
           if l.startswith("CMAKE_HOME_DIRECTORY:")][0]
    header = open(os.path.join(src, "include", "ggml.h")).read()
    types, ops = ggml_enum(header, "ggml_type"), ggml_enum(header, "ggml_op")
    f32 = types["GGML_TYPE_F32"]
    lines = []
    for ty in ("TQ1_0", "TQ2_0"):
        for m, k in shapes:
            f = [ops["GGML_OP_MUL_MAT"], f32, m, 1, 1, 1, 0, 2,
                 types["GGML_TYPE_" + ty], k, m, 1, 1, 0, 0, 0, 0, f32, k, 1, 1, 1, 0, 0, 0, 0]
            lines.append(" ".join(map(str, f)) + f" {ty}_{m}x{k}")
    path = os.path.join(work, "cases.txt")
    open(path, "w").write("\n".join(lines) + "\n")
    shim = os.path.join(work, "nprocs.so")
    if not os.path.exists(shim):
        c = os.path.join(work, "nprocs.c")
        open(c, "w").write('#include <stdlib.h>\nint get_nprocs(void) { const char* s = '
                           'getenv("PEER_THREADS"); return s ? atoi(s) : 1; }\n')
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", shim, c], check=True)
    env = dict(os.environ, LD_PRELOAD=shim, PEER_THREADS=str(threads))
    r = subprocess.run([os.path.join(build, "bin", "test-backend-ops"), "perf", "-b", "CPU",
                        "--test-file", path], capture_output=True, text=True, env=env)
    out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r"name=(\w+),.*?\d+ runs -\s+([\d.]+) us/run", out)}


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
                gg[t] = run_ggml(a.ggml_build, [(4096, 14336), (32768, 14336)], t, work)
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
