"""Where cpukern's decode step goes, per op, on 1 and 2 threads (BitNet by default):

    ./bazelw run //benchmarks/e2e:profile_decode -- [--model bitnet|qwen3-moe] [--threads 1,2]

One process per thread count loads the model as benchmarks/e2e/run.py does (the same cached
random weights), times --steps greedy steps the way run.py does (compiled for BitNet, eager for
the MoE models), then:
  step       --profile steps under torch.profiler (record_shapes): self time per op and input
             shapes, as a share of the step's wall time. Compiled steps show inductor's fused
             C++ kernels by name (torch._inductor.config.cpp.enable_kernel_profile). "unattributed"
             is wall time that no op claims: Python, dispatch, the compiled graph's wrapper and
             the profiler's own cost (the profiled step is slower than the timed one by that
             cost; both are printed).
  kernels    every cpukern op call of one eager step is captured (a TorchDispatchMode) and
             replayed alone at 1 and 2 threads: "hot" repeats one call (its weights stay in
             cache), "sweep" cycles through every call of the same shape (all layers: their
             weights come from DRAM when they do not fit the L3). GB/s is weight bytes (the op's
             uint8 buffer) over time; "2T overhead" is t(2 threads) - t(1 thread) / 2 per call,
             hot: what splitting costs (wake-up, barrier, imbalance) when memory is not the
             limit.
  pool       a 2-row ternary GEMV (one task per thread at most) at 1 and 2 threads, polling
             on and off: the pool's fork/join cost alone.
The read probe (benchmarks/bandwidth) runs in the same invocation, for the GB/s ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run as R  # noqa: E402
import weights as W  # noqa: E402

MATMUL_OPS = set(R.MATMUL_OPS)
# The decode step's attention (query x cached keys, softmax, x cached values): torch's SDPA op
# and the inductor kernel fused with it (the repeated KV heads), or the batched matmuls and
# softmax of cpukern.torch.attention (the step's only bmm), eager or inside inductor's fused
# kernels (named after the ops they hold). The cache update, fused with RoPE, is not counted.
ATTENTION_OPS = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::bmm",
                 "aten::_softmax", "aten::softmax"}


def shapes_key(args) -> str:
    """The shapes of the tensor arguments (as the profiler's input shapes, less the empty
    entries that it gives other arguments)."""
    import torch
    return json.dumps([list(a.shape) for a in args if isinstance(a, torch.Tensor) and a.dim()])


def capture_cpukern_calls(model, tok) -> list[tuple]:
    """(op, args, weight bytes) of every cpukern op in one eager one-token forward."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Capture(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.name())
            if name.startswith("cpukern::"):
                weight = max((a for a in args if isinstance(a, torch.Tensor)),
                             key=lambda a: a.numel() * a.element_size())
                calls.append((func, tuple(args), dict(kwargs or {}),
                              weight.numel() * weight.element_size()))
            return func(*args, **(kwargs or {}))

    with torch.inference_mode(), Capture():
        model(tok, use_cache=False, logits_to_keep=1)
    return calls


def time_calls(calls: list[tuple], reps: int) -> float:
    """Microseconds per call, cycling through `calls` (median of 3 passes)."""
    import torch
    passes = []
    with torch.inference_mode():
        for f, a, k, _ in calls:  # warm
            f(*a, **k)
        for _ in range(3):
            t0 = time.perf_counter()
            n = 0
            while n < reps:
                for f, a, k, _ in calls:
                    f(*a, **k)
                    n += 1
            passes.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(passes)


def op_label(op: str, out_features: int, nbytes: int) -> str:
    return f"{op.removeprefix('cpukern::')} ->{out_features} ({nbytes / 1e6:.2f} MB)"


def kernel_table(calls: list[tuple], threads: list[int]) -> list[dict]:
    import cpukern
    import torch
    groups: dict[tuple, list] = defaultdict(list)
    for c in calls:
        f, a, k, nbytes = c
        out = next((x for x in a if isinstance(x, int)), 0)
        groups[(str(f.name()), out, nbytes, shapes_key(a))].append(c)
    rows = []
    for (op, out, nbytes, key), cs in groups.items():
        row = {"op": op_label(op, out, nbytes), "key": f"{op}|{key}", "calls": len(cs),
               "bytes": nbytes}
        for n in threads:
            cpukern.set_num_threads(n)
            torch.set_num_threads(1)  # as in the decode loop: cpukern's pool polls
            row[f"hot{n}"] = time_calls(cs[:1], 50 if nbytes < 64e6 else 3)
            row[f"sweep{n}"] = time_calls(cs, max(len(cs), 60) if nbytes < 64e6 else 3)
        rows.append(row)
    return rows


def pool_cost(threads: list[int], rows: int = 2) -> dict:
    """A ternary GEMV of `rows` x 256 (almost no work, at most one task per thread) through
    the extension directly (no torch, no checks): the pool's fork/join cost alone, with the
    helpers polling (as at decode) and sleeping, back to back and after 1 ms idle."""
    import numpy as np
    from cpukern import _ext, ternary
    rng = np.random.default_rng(0)
    w = ternary.prepare(ternary.pack(rng.integers(-1, 2, (rows, 256)).astype(np.int8)), 256)
    x = rng.standard_normal(256).astype(np.float32)
    y = np.empty(rows, np.float32)
    out = {}
    for polling in (True, False):
        prev = _ext.set_polling(polling)
        mode = "polling" if polling else "sleeping"
        for n in threads:
            for _ in range(100):
                _ext.ternary_gemv(w, x, None, "fp32", "", n, y)
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(5000):
                    _ext.ternary_gemv(w, x, None, "fp32", "", n, y)
                ts.append((time.perf_counter() - t0) / 5000 * 1e6)
            out[f"{mode} {n}T"] = statistics.median(ts)
            ts = []
            for _ in range(200):  # idle past the polling window (200 us): helpers sleep
                time.sleep(0.001)
                t0 = time.perf_counter()
                _ext.ternary_gemv(w, x, None, "fp32", "", n, y)
                ts.append((time.perf_counter() - t0) * 1e6)
            out[f"{mode} {n}T after 1 ms idle"] = statistics.median(ts)
        _ext.set_polling(prev)
    return out


def classify(key: str) -> str:
    if key.startswith("cpukern::"):
        return "cpukern kernels"
    if key in ATTENTION_OPS or ("cpp_fused" in key and ("softmax" in key or "scaled_dot" in key)):
        return "attention (SDPA, or bmm + softmax)"
    if key in MATMUL_OPS:
        return "torch matmul"
    if "cpp_fused" in key or key.startswith("graph_"):
        return "inductor fused kernels (norms, RoPE, residuals)"
    if key.startswith("aten::"):
        return "other torch ops"
    return "wrappers (compiled region, record_function)"


def worker(cfg: dict) -> dict:
    import torch
    threads = cfg["threads"]
    torch.set_num_threads(threads)
    import torch._inductor.config as inductor_config
    inductor_config.cpp.enable_kernel_profile = True
    import cpukern.torch as ct
    R.lift_accelerate_check()
    model = ct.from_pretrained(cfg["hf_dir"], dtype=torch.bfloat16, threads=threads)
    if cfg["attention"] == "stock":
        R.stock_attention(model)
    model.eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (1, R.PROMPT), generator=g)
    res = {"threads": threads, "compiled": cfg["compiled"],
           "attention": model.config._attn_implementation}
    with torch.inference_mode():
        for n in (32, 48):
            w = model(ids[:, :n], use_cache=True, logits_to_keep=1)
        del w
        torch.set_num_threads(1)
        step = R.decode_step(model, cfg["compiled"], ids)
        tok = step.prompt(ids)
        for _ in range(4):
            tok = step(tok)
        t0 = time.perf_counter()
        for _ in range(cfg["steps"]):
            tok = step(tok)
        res["step_us"] = (time.perf_counter() - t0) / cfg["steps"] * 1e6

        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            t0 = time.perf_counter()
            for _ in range(cfg["profile"]):
                tok = step(tok)
            wall = (time.perf_counter() - t0) * 1e6
        res["profiled_step_us"] = wall / cfg["profile"]
        ops = []
        for e in prof.key_averages(group_by_input_shape=True):
            if e.self_cpu_time_total <= 0:
                continue
            ops.append({"key": e.key, "shapes": json.dumps(e.input_shapes), "count": e.count,
                        "self_us": e.self_cpu_time_total / cfg["profile"],
                        "kind": classify(e.key)})
        res["ops"] = ops
        res["unattributed_us"] = res["profiled_step_us"] - sum(o["self_us"] for o in ops)
    if cfg["replay_threads"]:
        calls = capture_cpukern_calls(model, tok)
        res["kernels"] = kernel_table(calls, cfg["replay_threads"])
        res["pool"] = pool_cost(cfg["replay_threads"])
    return res


def interleaved_worker(cfg: dict) -> dict:
    """Decode step times of both attentions in one process: one model, a compiled step (its own
    StaticCache) for each attention implementation, then turns of cfg["interleave"] steps of
    each, cfg["rounds"] times (a shared machine's load drifts alike over both)."""
    import torch
    threads = cfg["threads"]
    torch.set_num_threads(threads)
    import cpukern.torch as ct
    R.lift_accelerate_check()
    model = ct.from_pretrained(cfg["hf_dir"], dtype=torch.bfloat16, threads=threads)
    model.eval()
    names = {"cpukern": model.config._attn_implementation}
    R.stock_attention(model)
    names["stock"] = model.config._attn_implementation
    ids = torch.randint(0, model.config.vocab_size, (1, R.PROMPT),
                        generator=torch.Generator().manual_seed(1))
    steps, toks, times = {}, {}, {a: [] for a in names}
    with torch.inference_mode():
        for n in (32, 48):
            w = model(ids[:, :n], use_cache=True, logits_to_keep=1)
        del w
        torch.set_num_threads(1)
        for a, name in names.items():  # compiles one graph per implementation, untimed
            model.set_attn_implementation(name)
            steps[a] = R.decode_step(model, cfg["compiled"], ids)
            toks[a] = steps[a].prompt(ids)
        for _ in range(cfg["rounds"]):
            for a, name in names.items():
                model.set_attn_implementation(name)
                t0 = time.perf_counter()
                for _ in range(cfg["interleave"]):
                    toks[a] = steps[a](toks[a])
                times[a].append((time.perf_counter() - t0) / cfg["interleave"] * 1e6)
    return {"threads": threads, "names": names, "step_us": times}


def interleaved_report(results: list[dict]) -> str:
    out = ["| threads | stock attention: ms a step (tok/s) | cpukern attention: ms a step (tok/s) "
           "| speed-up, of the medians | speed-up per turn: median (min-max) |",
           "|---|---|---|---|---|"]
    for r in results:
        st, ck = r["step_us"]["stock"], r["step_us"]["cpukern"]
        ms, mc = statistics.median(st), statistics.median(ck)
        per = [a / b for a, b in zip(st, ck)]
        out.append(f"| {r['threads']} | {ms / 1e3:.1f} ({1e6 / ms:.2f}) | {mc / 1e3:.1f} "
                   f"({1e6 / mc:.2f}) | {ms / mc:.2f}x | {statistics.median(per):.2f}x "
                   f"({min(per):.2f}-{max(per):.2f}) |")
    return "\n".join(out)


def run_worker(cfg: dict) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(cfg["threads"]))
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg)],
                       capture_output=True, text=True, env=env)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"worker failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1])


def in_step_us(r: dict) -> dict[str, float]:
    """cpukern op -> self microseconds a call in the profiled steps, by op and input shapes."""
    return {f"{o['key']}|{json.dumps([s for s in json.loads(o['shapes']) if s])}":
            o["self_us"] * r["ops_steps"] / o["count"]
            for o in r["ops"] if o["key"].startswith("cpukern::")}


def report(results: list[dict], probe: dict) -> str:
    gbs = probe.get("read_GB_s", {})
    out = []
    for r in results:
        t = r["threads"]
        step = r["profiled_step_us"]
        out.append(f"\n### {t} thread(s), attention {r.get('attention', '?')}: "
                   f"{r['step_us'] / 1e3:.1f} ms a step timed "
                   f"({1e6 / r['step_us']:.2f} tok/s), {step / 1e3:.1f} ms profiled\n")
        kinds: dict[str, float] = defaultdict(float)
        for o in r["ops"]:
            kinds[classify(o["key"])] += o["self_us"]
        kinds["unattributed (Python, dispatch, profiler)"] = r["unattributed_us"]
        out.append("| where | ms a step | share |\n|---|---|---|")
        for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]):
            out.append(f"| {k} | {v / 1e3:.2f} | {v / step:.1%} |")
        out.append("\n| op (self time) | calls a step | us a call | share of the step |"
                   "\n|---|---|---|---|")
        for o in sorted(r["ops"], key=lambda o: -o["self_us"])[:16]:
            name = o["key"] if len(o["key"]) < 70 else o["key"][:67] + "..."
            out.append(f"| {name} | {o['count'] / r['ops_steps']:.0f} | "
                       f"{o['self_us'] * r['ops_steps'] / o['count']:.1f} | "
                       f"{o['self_us'] / step:.1%} |")
    last = results[-1]
    if not last.get("kernels"):
        return "\n".join(out)
    ts = [r["threads"] for r in results]
    steps = {r["threads"]: in_step_us(r) for r in results}
    out.append(f"\n### Kernels of one step, replayed alone\n\nus a call and GB/s of weights; "
               f"read probe {', '.join(f'{gbs.get(str(n))} GB/s on {n}T' for n in ts)}; "
               "in-step: self time in the profiled steps of that thread count.\n")
    hdr = "| op | calls a step |" + "".join(f" in-step {n}T |" for n in ts)
    hdr += "".join(f" hot {n}T | sweep {n}T |" for n in ts) + " 2T overhead, hot (us) |"
    out.append(hdr + "\n|" + "---|" * (3 + 3 * len(ts)))
    for k in last["kernels"]:
        b = k["bytes"]
        cell = lambda us: f"{us:.0f}, {b / us / 1e3:.1f}" if us else "-"  # noqa: E731
        line = f"| {k['op']} | {k['calls']} |"
        line += "".join(f" {cell(steps[n].get(k['key']))} |" for n in ts)
        line += "".join(f" {cell(k[f'hot{n}'])} | {cell(k[f'sweep{n}'])} |" for n in ts)
        line += f" {k['hot2'] - k['hot1'] / 2:.1f} |" if "hot1" in k and "hot2" in k else " - |"
        out.append(line)
    out.append("\nPool alone, a 2 x 256 ternary GEMV through the extension (us a call): " +
               ", ".join(f"{k} {v:.1f}" for k, v in last["pool"].items()))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="bitnet", choices=("bitnet", "qwen3-moe"))
    ap.add_argument("--qwen3-moe-layers", type=int, default=4)
    ap.add_argument("--threads", default="1,2", help="one process per thread count")
    ap.add_argument("--steps", type=int, default=32, help="timed decode steps")
    ap.add_argument("--profile", type=int, default=8, help="profiled decode steps")
    ap.add_argument("--steps-mode", default="auto", choices=("auto", "compiled", "eager"))
    ap.add_argument("--attention", default="cpukern",
                    help="attention at one token: cpukern (cpukern.torch.attention, what patch "
                         "sets) and/or stock (transformers' sdpa / eager): a process for each, "
                         "per thread count, interleaved")
    ap.add_argument("--no-replay", action="store_true", help="skip the kernel and pool replays")
    ap.add_argument("--interleave", type=int, default=0,
                    help="instead of the profile: step times of stock and cpukern attention in "
                         "one process per thread count, turns of this many steps each "
                         "(--rounds turns; rounds x interleave <= 140)")
    ap.add_argument("--rounds", type=int, default=16, help="turns of each with --interleave")
    ap.add_argument("--probe", help="benchmarks/bandwidth binary")
    ap.add_argument("--json", help="also write the raw results here (after every process)")
    ap.add_argument("--report", help="print the tables of a --json file and stop")
    args = ap.parse_args()
    if args.worker:
        cfg = json.loads(args.worker)
        fn = interleaved_worker if cfg.get("interleave") else worker
        print(json.dumps(fn(cfg)), flush=True)
        return
    if args.report:
        saved = json.load(open(args.report))
        print(report(saved["results"], saved["probe"]))
        return
    spec = W.bitnet() if args.model == "bitnet" else W.qwen3_moe(args.qwen3_moe_layers)
    spec.ensure(R.log, gguf_types=())
    compiled = args.steps_mode == "compiled" or (args.steps_mode == "auto" and args.model == "bitnet")
    threads = [int(t) for t in args.threads.split(",")]
    attentions = args.attention.split(",")
    if set(attentions) - {"cpukern", "stock"}:
        raise SystemExit(f"--attention: expected cpukern and/or stock, got {args.attention!r}")
    probe = R.probe(args.probe)
    print(f"machine: {probe.get('cpu', '?')}; read probe GB/s by threads: "
          f"{probe.get('read_GB_s', 'not run')}", flush=True)
    results = []
    if args.interleave:
        if args.rounds * args.interleave > R.DECODE + 12:
            raise SystemExit(f"--rounds x --interleave: at most {R.DECODE + 12} steps (the "
                             f"static cache), got {args.rounds * args.interleave}")
        for t in threads:
            R.log(f"{args.model}: stock and cpukern attention, interleaved, {t} thread(s)")
            results.append(run_worker({"hf_dir": spec.hf_dir, "threads": t, "compiled": compiled,
                                       "interleave": args.interleave, "rounds": args.rounds}))
            R.log(json.dumps(results[-1]))
        print(interleaved_report(results))
        return
    for t in threads:
        for a in attentions:
            R.log(f"{args.model}: profiling on {t} thread(s), {a} attention")
            # the replays run once, in the last process
            last = t == threads[-1] and a == attentions[-1] and not args.no_replay
            r = run_worker({"hf_dir": spec.hf_dir, "threads": t, "compiled": compiled,
                            "steps": args.steps, "profile": args.profile, "attention": a,
                            "replay_threads": threads if last else []})
            r["ops_steps"] = args.profile
            results.append(r)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"probe": probe, "results": results}, f)
    print(report(results, probe))


if __name__ == "__main__":
    main()
