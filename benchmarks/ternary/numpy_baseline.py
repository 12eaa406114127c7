#!/usr/bin/env python3
"""numpy fp32 W @ x on the ternary benchmark shapes: the dense baseline of the
docs/performance/ternary.md tables.

Usage: OPENBLAS_NUM_THREADS=T python numpy_baseline.py [--reps N] [--shapes MxK,...] [--batches 1,16]
Prints one JSON object per (shape, batch): best-of-N seconds and Gweights/s (M*K*B / s).
W is an (M, K) float32 matrix with entries in {-1, 0, +1}; x is (K,) for B = 1 and (K, B)
for B > 1 (so W @ x is one sgemv / sgemm call). Set the thread count through the
environment before Python starts (OpenBLAS reads it once).
"""
import argparse
import json
import os
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds per case at least")
    ap.add_argument("--shapes", default="4096x14336,14336x4096,4096x4096,2560x6912,13824x2560")
    ap.add_argument("--batches", default="1,16")
    args = ap.parse_args()
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    rng = np.random.default_rng(7)
    for shape in args.shapes.split(","):
        m, k = (int(v) for v in shape.split("x"))
        w = rng.integers(-1, 2, size=(m, k)).astype(np.float32)
        for batch in (int(b) for b in args.batches.split(",")):
            x = rng.uniform(-1, 1, size=(k,) if batch == 1 else (k, batch)).astype(np.float32)
            y = w @ x  # warm up
            best, n, t_start = float("inf"), 0, time.perf_counter()
            while n < args.reps or time.perf_counter() - t_start < args.min_time:
                t0 = time.perf_counter()
                y = w @ x
                best = min(best, time.perf_counter() - t0)
                n += 1
            del y
            print(json.dumps({"shape": shape, "batch": batch, "threads": threads,
                              "seconds": best, "iterations": n,
                              "gweights_per_s": m * k * batch / best * 1e-9}), flush=True)


if __name__ == "__main__":
    main()
