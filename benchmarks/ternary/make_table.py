#!/usr/bin/env python3
"""Runs the ternary GEMV google benchmark and numpy's fp32 W @ x in one session and prints
the markdown tables of docs/performance/ternary.md (best of N repetitions, Gweights/s = M*K*B
per second): the hot rows (same weights every call) against numpy, then the cold rows (weights
streamed) with their fraction of the all-core read probe.

Usage (after `./bazelw build //benchmarks/ternary`):
  /root/.cache/cpukern/venv/bin/python benchmarks/ternary/make_table.py \
      --bench bazel-out/k8-opt/bin/benchmarks/ternary/ternary [--reps 5] [--shapes ...] [--batches 1,16]
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_bench(binary, regex, reps, min_time):
    out = subprocess.run([binary, f"--benchmark_filter={regex}", "--benchmark_format=json",
                          f"--benchmark_repetitions={reps}", f"--benchmark_min_time={min_time}",
                          # Repetitions of all cases interleaved at random: on a shared
                          # machine, load that comes and goes hits every variant alike.
                          "--benchmark_enable_random_interleaving=true"],
                         check=True, capture_output=True, text=True).stdout
    best = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = re.sub(r"/(min_time:[0-9.]+|real_time|repeats:\d+)", "", b["run_name"])
        g = b["Gweights/s"]
        if g > best.get(name, (0.0, 0.0))[0]:
            best[name] = (g, b.get("of_probe", 0.0))
    return best


def run_numpy(threads, shapes, batches, reps):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, os.path.join(HERE, "numpy_baseline.py"), "--shapes",
                          ",".join(shapes), "--batches", ",".join(map(str, batches)), "--reps",
                          str(reps)], check=True, capture_output=True, text=True, env=env).stdout
    res = {}
    for line in out.splitlines():
        r = json.loads(line)
        res[(r["shape"], r["batch"])] = r["gweights_per_s"]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="bazel-out/k8-opt/bin/benchmarks/ternary/ternary")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", default="0.1")
    ap.add_argument("--shapes", default="4096x14336,14336x4096,4096x4096,2560x6912,13824x2560")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--variants", default="", help="comma list (default: every one that runs)")
    ap.add_argument("--no-reference", action="store_true")
    args = ap.parse_args()
    shapes = args.shapes.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    shape_re = "(" + "|".join(shapes) + ")"
    b_re = "B(" + "|".join(map(str, batches)) + ")"
    t_re = "T(" + "|".join(map(str, threads)) + ")/(hot|cold)"
    results = {}
    # The reference variant is slow: one repetition.
    if not args.no_reference:
        results.update(run_bench(args.bench, f"^reference/.*/{shape_re}/{b_re}/{t_re}/", 1, "0.01"))
    if args.variants:
        names = args.variants.split(",")
    else:  # every variant the binary registered (the ones this CPU runs), but the reference
        listed = subprocess.run([args.bench, "--benchmark_list_tests"], check=True,
                                capture_output=True, text=True).stdout.split()
        names = []
        for n in listed:
            v = n.split("/")[0]
            if v != "reference" and v not in names:
                names.append(v)
    var_re = "(" + "|".join(names) + ")"
    results.update(run_bench(args.bench, f"^{var_re}/.*/{shape_re}/{b_re}/{t_re}/",
                             args.reps, args.min_time))
    numpy = {t: run_numpy(t, shapes, batches, max(args.reps, 5)) for t in threads}
    variants = []
    for name in results:
        v = name.split("/")[0]
        if v not in variants:
            variants.append(v)
    for mode in ("fp32", "int8"):
        print(f"\n#### {mode} activations, Gweights/s (M*K*B per second; best of {args.reps})\n")
        head = "| shape (MxK) | B | threads | numpy fp32 W@x | " + " | ".join(variants) + \
               " | best / numpy |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for sh in shapes:
            for b in batches:
                for t in threads:
                    vals = [results.get(f"{v}/{mode}/{sh}/B{b}/T{t}/hot", (None,))[0]
                            for v in variants]
                    npv = numpy[t].get((sh, b))
                    best = max(v for v in vals if v is not None)
                    cells = [f"{v:.1f}" if v is not None else "-" for v in vals]
                    print(f"| {sh} | {b} | {t} | {npv:.1f} | " + " | ".join(cells) +
                          f" | {best / npv:.1f}x |")
    cold = sorted({n.split("/", 1)[1] for n in results if n.endswith("/cold")})
    if cold:
        print(f"\n#### cold (weights rotate over copies spanning >= 3x the L3), Gweights/s "
              f"(fraction of the all-core read probe)\n")
        head = "| mode / shape / B / threads | " + " | ".join(variants) + " |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for rest in cold:
            cells = []
            for v in variants:
                g, frac = results.get(f"{v}/{rest}", (None, None))
                cells.append(f"{g:.1f} ({frac:.0%})" if g is not None else "-")
            print(f"| {rest[:-len('/cold')]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
