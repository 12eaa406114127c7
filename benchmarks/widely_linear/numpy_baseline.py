"""numpy fp32 a @ x on the dense (2n, 2m) matrix of each benchmark shape: the baseline the
widely-linear benchmark is compared with. Prints one JSON object per line
{"shape": "4096x4096", "B": 1, "threads": 1, "us": best-of-N microseconds, "GB/s": dense
fp32 bytes / time}. Threads via OPENBLAS_NUM_THREADS (each count in its own process).

    /root/.cache/cpukern/venv/bin/python benchmarks/widely_linear/numpy_baseline.py
"""
import json
import os
import subprocess
import sys
import time

SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008)]


def child(threads, reps, budget_s):
    import numpy as np
    rng = np.random.default_rng(0)
    for rows, cols in SHAPES:
        a = rng.standard_normal((rows, cols), dtype=np.float32)
        for b in (1, 4):
            x = rng.standard_normal(cols, dtype=np.float32) if b == 1 else \
                rng.standard_normal((cols, b), dtype=np.float32)
            a @ x  # warm
            best = float("inf")
            t_end = time.perf_counter() + budget_s
            n = 0
            while n < reps or time.perf_counter() < t_end:
                t0 = time.perf_counter()
                a @ x
                best = min(best, time.perf_counter() - t0)
                n += 1
            print(json.dumps({"shape": f"{rows}x{cols}", "B": b, "threads": threads,
                              "us": best * 1e6, "GB/s": a.nbytes / best / 1e9}), flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), 5, 1.0)
        return
    for threads in (1, 2):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
        subprocess.run([sys.executable, __file__, "--child", str(threads)], env=env, check=True)


if __name__ == "__main__":
    main()
