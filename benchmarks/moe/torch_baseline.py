#!/usr/bin/env python3
"""cpukern.moe.fused_moe against the eager PyTorch per-expert loop users run today, same run.

For each layer (gpt-oss-20b, gemma-4-26B-A4B, Qwen3-30B-A3B), T and thread count, times

  * torch: for each expert with tokens: F.linear (bf16) for w13 (+bias), the activation (bf16
    eager ops), F.linear for w2 (+bias), then index_add of the routing-weighted rows into an
    fp32 output (torch.set_num_threads(n));
  * cpukern.moe.fused_moe with every requested variant (threads=n);

interleaved round by round, best of N. Reports ms, TFLOP/s, GB/s of expert weights touched
(each distinct routed expert's w13 + w2 read once), process CPU time per call (best of N; the
steadier number on a shared machine), the speedup over torch, and at T=1 the
time over the time to read the touched weights once at the machine's read bandwidth, measured
in the same run with the project's all-core streaming-read probe (kernels/common/bandwidth.cc,
as //benchmarks/bandwidth; 1 and n threads, best of N).

Weights: every call reuses the same packed experts (hot). gpt-oss-20b's touched experts are
199 MB at T=1 and 1.6 GB at T=64, both far over a 32 MB L3, so they stream from DRAM anyway;
the smaller layers' T=1 sets (gemma-4 and Qwen3: 35-38 MB) sit near the L3 size. The header
names the CPU (family/model) and its measured clock.

  PYTHONPATH=<dir with cpukern> python benchmarks/moe/torch_baseline.py \
      --layers gpt-oss-20b --t 1,64 --threads 1,2

--torch-isa avx2 caps PyTorch at AVX2 (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, set
before torch is imported): what the loop costs on an AVX2-only machine such as CI's. cpukern
variants are chosen independently with --variants.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="gpt-oss-20b,gemma-4-26B-A4B,Qwen3-30B-A3B")
    p.add_argument("--t", default="1,16,64", help="token counts, comma separated")
    p.add_argument("--threads", default="1,2", help="thread counts, comma separated")
    p.add_argument("--variants", default="auto",
                   help="cpukern variants, comma separated ('auto' = every supported one but reference)")
    p.add_argument("--reps", type=int, default=7, help="rounds per measurement (best is reported)")
    p.add_argument("--min-time", type=float, default=0.05,
                   help="each timed sample repeats the call until it lasts this long (s)")
    p.add_argument("--torch-isa", choices=["native", "avx2"], default="native")
    p.add_argument("--no-torch", action="store_true", help="cpukern only")
    p.add_argument("--no-check", action="store_true", help="skip the torch vs cpukern comparison")
    p.add_argument("--bw-mib", type=int, default=1024, help="size of the bandwidth array (MiB)")
    p.add_argument("--probe", default="bazel-out/k8-opt/bin/benchmarks/bandwidth/bandwidth",
                   help="//benchmarks/bandwidth binary: the header then gives its measured clock")
    return p.parse_args(argv)


ARGS = parse_args()
if ARGS.torch_isa == "avx2":
    os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
    os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import cpukern  # noqa: E402
from cpukern import _ext, moe  # noqa: E402

LAYERS = {
    # name: (E, topk, H, I, activation, bias)
    "gpt-oss-20b": (32, 4, 2880, 2880, "swigluoai", True),
    "gemma-4-26B-A4B": (128, 8, 2816, 704, "gelu_tanh", False),
    "Qwen3-30B-A3B": (128, 8, 2048, 768, "silu", False),
}


def best_time(fn, min_time, cpu=False):
    """Seconds per call of one sample: repeats fn until min_time has passed. cpu=True returns
    (wall, process CPU) seconds per call: CPU time (all threads, spinning included) is the
    steadier number on a machine shared with other jobs."""
    n = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while True:
        fn()
        n += 1
        el = time.perf_counter() - t0
        if el >= min_time:
            return (el / n, (time.process_time() - c0) / n) if cpu else el / n


def read_bandwidth(threads, mib, reps):
    """GB/s of the project's streaming-read probe (every thread reading its share of a buffer
    far larger than the caches), best of reps."""
    return max(_ext.read_bandwidth(mib << 20, threads, 0.3) for _ in range(reps)) * 1e-9


# ---- the eager PyTorch loop ----

def torch_act(g, act):
    if act == "swigluoai":
        gate, up = g[..., 0::2], g[..., 1::2]
        gate = gate.clamp(max=7.0)
        up = up.clamp(min=-7.0, max=7.0)
        return (up + 1) * gate * torch.sigmoid(1.702 * gate)
    gate, up = g.chunk(2, dim=-1)
    if act == "silu":
        return F.silu(gate) * up
    if act == "gelu":
        return F.gelu(gate) * up
    if act == "gelu_tanh":
        return F.gelu(gate, approximate="tanh") * up
    raise ValueError(act)


def torch_moe(x, w13, w2, b13, b2, topk_weights, topk_ids, act):
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32)
    counts = torch.bincount(topk_ids.flatten(), minlength=w13.shape[0]).tolist()
    for e, c in enumerate(counts):
        if c == 0:
            continue
        tok, slot = torch.where(topk_ids == e)
        xe = x[tok]
        g = F.linear(xe, w13[e], None if b13 is None else b13[e])
        a = torch_act(g, act)
        ye = F.linear(a, w2[e], None if b2 is None else b2[e])
        out.index_add_(0, tok, ye.float() * topk_weights[tok, slot, None])
    return out.to(torch.bfloat16)


# ---- one layer ----

def make_layer(name, seed=0):
    e, topk, h, i, act, bias = LAYERS[name]
    gen = torch.Generator().manual_seed(seed)
    w13 = torch.empty(e, 2 * i, h, dtype=torch.bfloat16)
    w2 = torch.empty(e, h, i, dtype=torch.bfloat16)
    for x in range(e):  # expert by expert: no multi-GB fp32 temporaries
        w13[x] = (torch.randn(2 * i, h, generator=gen) * (1.7 / h ** 0.5)).to(torch.bfloat16)
        w2[x] = (torch.randn(h, i, generator=gen) * (1.7 / i ** 0.5)).to(torch.bfloat16)
    b13 = (torch.randn(e, 2 * i, generator=gen) * 0.5).to(torch.bfloat16) if bias else None
    b2 = (torch.randn(e, h, generator=gen) * 0.5).to(torch.bfloat16) if bias else None
    return w13, w2, b13, b2


def routing(name, t, seed):
    e, topk, h, _, _, _ = LAYERS[name]
    gen = torch.Generator().manual_seed(1000 + seed)
    x = torch.randn(t, h, generator=gen).to(torch.bfloat16)
    logits = torch.randn(t, e, generator=gen).to(torch.float32)
    wts, ids = moe.route(logits.numpy(), topk, renormalize=True)
    return x, torch.from_numpy(np.ascontiguousarray(wts)), torch.from_numpy(np.ascontiguousarray(ids))


def cpu_model():
    """CPU family / model / name from /proc/cpuinfo (the platform string elsewhere)."""
    try:
        fields = {}
        for line in open("/proc/cpuinfo"):
            if ":" in line:
                k, v = (x.strip() for x in line.split(":", 1))
                fields.setdefault(k, v)
        if "cpu family" in fields:
            return f"{fields.get('model name', '?')} (family {fields['cpu family']} model {fields.get('model', '?')})"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fmt(v, d=2):
    return f"{v:.{d}f}"


def main():
    args = ARGS
    layers = [s for s in args.layers.split(",") if s]
    ts = [int(s) for s in args.t.split(",")]
    ths = [int(s) for s in args.threads.split(",")]
    info = cpukern.kernels("fused_moe")
    if args.variants == "auto":
        variants = [v["name"] for v in info if v["supported"] and v["name"] != "reference"]
    else:
        variants = args.variants.split(",")

    cpu = cpukern.cpu_info()
    print(f"# machine: {cpu_model()}, {os.cpu_count()} logical CPUs, L3 {cpu['l3_bytes'] >> 20} MiB, "
          f"cpukern features: {' '.join(cpu.get('features', []))}")
    if os.access(args.probe, os.X_OK):
        m = json.loads(subprocess.run([args.probe, "--json"], check=True, capture_output=True,
                                      text=True).stdout)
        print(f"# clock (measured by {args.probe}): {m['clock_GHz_measured']:.2f} GHz")
    print(f"# torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, "
          f"--torch-isa {args.torch_isa}, mkldnn {torch.backends.mkldnn.is_available()}")
    print(f"# cpukern variants: {', '.join(variants)}; best of {args.reps} rounds, "
          f"samples >= {args.min_time}s")
    bw = {}
    for n in ths:
        bw[n] = read_bandwidth(n, args.bw_mib, args.reps)
        print(f"# read bandwidth, {n} thread(s): {bw[n]:.1f} GB/s (all-core streaming-read probe, {args.bw_mib} MiB)")
    sys.stdout.flush()

    rows = []
    for name in layers:
        e, topk, h, i, act, bias = LAYERS[name]
        w13, w2, b13, b2 = make_layer(name)
        packed = {}
        for v in variants:
            packed[v] = (moe.prepare(w13, variant=v), moe.prepare(w2, variant=v))
        for t in ts:
            x, wts, ids = routing(name, t, t)
            experts = int((torch.bincount(ids.flatten(), minlength=e) > 0).sum())
            flop = 2.0 * t * topk * (2 * i * h + h * i)
            nbytes = experts * 3.0 * i * h * 2
            outs = {v: torch.empty(t, h, dtype=torch.bfloat16) for v in variants}
            if not args.no_check:
                ref = None if args.no_torch else torch_moe(x, w13, w2, b13, b2, wts, ids, act)
                for v in variants:
                    moe.fused_moe(x, *packed[v], wts, ids, activation=act, w13_bias=b13, w2_bias=b2,
                                  out=outs[v])
                    if ref is not None:
                        d = (outs[v].float() - ref.float()).abs().max().item()
                        s = ref.float().abs().max().item()
                        if d > 0.05 * s + 1e-3:
                            print(f"# WARNING {name} T={t} {v}: max |cpukern - torch| = {d:.3g} "
                                  f"(max |out| {s:.3g})")
            for n in ths:
                fns = {}
                if not args.no_torch:
                    def run_torch(n=n):
                        torch.set_num_threads(n)
                        torch_moe(x, w13, w2, b13, b2, wts, ids, act)
                    fns["torch"] = run_torch
                for v in variants:
                    def run_v(v=v, n=n):
                        moe.fused_moe(x, *packed[v], wts, ids, activation=act, w13_bias=b13,
                                      w2_bias=b2, threads=n, out=outs[v])
                    fns[v] = run_v
                for f in fns.values():  # warm-up
                    f()
                best = {k: float("inf") for k in fns}
                best_cpu = {k: float("inf") for k in fns}
                for _ in range(args.reps):  # interleaved rounds
                    for k, f in fns.items():
                        w, c = best_time(f, args.min_time, cpu=True)
                        best[k] = min(best[k], w)
                        best_cpu[k] = min(best_cpu[k], c)
                for k, s in best.items():
                    rows.append(dict(layer=name, t=t, threads=n, impl=k, ms=s * 1e3,
                                     cpu_ms=best_cpu[k] * 1e3,
                                     tflops=flop / s * 1e-12, gbs=nbytes / s * 1e-9,
                                     speedup=(best["torch"] / s) if "torch" in best else float("nan"),
                                     roof=s / (nbytes / (bw[n] * 1e9)), experts=experts))
                    r = rows[-1]
                    print(f"{name:16s} T={t:<4d} threads={n} {k:12s} {r['ms']:9.2f} ms "
                          f"(CPU {r['cpu_ms']:8.2f} ms) "
                          f"{r['tflops']:7.4f} TFLOP/s {r['gbs']:6.1f} GB/s "
                          f"x{r['speedup']:.2f} vs torch  {r['roof']:.2f}x read-time", flush=True)
            del outs
        del packed, w13, w2, b13, b2
        gc.collect()

    print()
    print("| layer | T | threads | impl | ms | CPU ms | TFLOP/s | GB/s | vs torch | T=1: time / read time |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        roof = fmt(r["roof"]) if r["t"] == 1 else ""
        vs = "1.00" if r["impl"] == "torch" else fmt(r["speedup"])
        impl = "torch (eager loop)" if r["impl"] == "torch" else f"cpukern {r['impl']}"
        print(f"| {r['layer']} | {r['t']} | {r['threads']} | {impl} | {fmt(r['ms'])} | {fmt(r['cpu_ms'])} | "
              f"{fmt(r['tflops'], 4)} | {fmt(r['gbs'], 1)} | {vs} | {roof} |")
    print()
    print("read bandwidth: " + ", ".join(f"{n} thread(s) {bw[n]:.1f} GB/s" for n in ths))


if __name__ == "__main__":
    main()
