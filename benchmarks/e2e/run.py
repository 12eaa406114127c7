"""Whole-model tokens per second: cpukern under transformers (cpukern.torch.from_pretrained)
against stock transformers on the same checkpoint, in one run.

    python benchmarks/e2e/run.py                        # every model, 1 and 2 threads
    python benchmarks/e2e/run.py --models bitnet --threads 1 --decode 32

Each (model, implementation, threads) runs in its own process (peak RSS is that process's):
prefill of --prefill tokens (one forward), then a --prompt-token prompt and --decode greedy
tokens with the KV cache (decode tokens/s over those steps). The share of a cpukern decode
step outside cpukern's kernels comes from torch.profiler (self CPU time of the cpukern::*
ops against the step). Checkpoints (benchmarks/e2e/checkpoints.py) are written once under
--dir. Implementations are columns: a peer adds an entry to IMPLS (a function
(kind, path, threads, args) -> dict with decode_tps, prefill_tps, rss_mb)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _load(kind: str, path: str, impl: str):
    import torch
    import transformers

    if impl == "cpukern":
        import cpukern.torch as ct
        return ct.from_pretrained(path)
    torch._dynamo.config.disable = True  # stock BitLinear's @torch.compile: eager (see docs)
    cfg = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    if kind == "bitnet":  # transformers' BitNet quantizer needs accelerate: build as it does
        from safetensors.torch import load_file
        from transformers.integrations.bitnet import replace_with_bitnet_linear
        qc = dict(cfg.quantization_config)
        qc.pop("quant_method")
        torch.set_default_dtype(torch.bfloat16)  # BitLinear takes its compute dtype from here
        with torch.device("meta"):
            m = transformers.BitNetForCausalLM(cfg)
        replace_with_bitnet_linear(m, modules_to_not_convert=qc.pop("modules_to_not_convert"),
                                   quantization_config=transformers.BitNetQuantConfig(**qc))
        torch.set_default_dtype(torch.float32)
        m.load_state_dict(load_file(os.path.join(path, "model.safetensors")), strict=False, assign=True)
        m.model.rotary_emb = type(m.model.rotary_emb)(cfg)  # its buffers were on meta
        m.lm_head.weight = m.model.embed_tokens.weight  # tie_word_embeddings
        return m.eval()
    kw = {}
    if kind == "gpt_oss":
        kw["quantization_config"] = transformers.Mxfp4Config(dequantize=True)
    return transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **kw).eval()


def _decode_share(model, ids, past, steps: int) -> float:
    """Share of decode-step CPU time outside cpukern::* ops (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = None
        for _ in range(steps):
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            ids = out.logits[:, -1:].argmax(-1)
    events = prof.key_averages()
    kern = sum(e.self_cpu_time_total for e in events if e.key.startswith("cpukern::"))
    total = sum(e.self_cpu_time_total for e in events)
    return 1.0 - kern / total if total else float("nan")


def worker(kind: str, impl: str, path: str, threads: int, args) -> dict:
    import torch

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = _load(kind, path, impl)
    load_s = time.perf_counter() - t0
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    res = {"load_s": load_s}
    with torch.no_grad():
        if args.prefill:
            ids = torch.randint(0, vocab, (1, args.prefill), generator=g)
            t0 = time.perf_counter()
            model(input_ids=ids, use_cache=False)
            res["prefill_tps"] = args.prefill / (time.perf_counter() - t0)
        ids = torch.randint(0, vocab, (1, args.prompt), generator=g)
        out = model(input_ids=ids, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        steps = args.decode if impl == "cpukern" else min(args.decode, args.stock_decode)
        t0 = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        res["decode_tps"] = steps / (time.perf_counter() - t0)
        res["decode_steps"] = steps
        if impl == "cpukern" and args.profile_steps:
            res["outside_share"] = _decode_share(model, nxt, past, args.profile_steps)
    res["rss_mb"] = _rss_mb()
    return res


IMPLS = ("cpukern", "transformers")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bitnet,gpt_oss,qwen3_moe")
    ap.add_argument("--layers", default="gpt_oss=4,qwen3_moe=2",
                    help="kind=N: fewer layers where memory forces it (default: what fits 24 GB "
                         "beside other work)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--stock-decode", type=int, default=16,
                    help="decode steps timed for stock transformers (slow)")
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--profile-steps", type=int, default=8)
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--dir", default=os.path.join(os.path.expanduser("~"), ".cache", "cpukern", "e2e"))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--one", nargs=4, metavar=("KIND", "IMPL", "PATH", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        kind, impl, path, threads = args.one
        print("RESULT " + json.dumps(worker(kind, impl, path, int(threads), args)), flush=True)
        return
    import checkpoints

    layers = dict(kv.split("=") for kv in args.layers.split(",") if kv)
    rows = []
    for kind in args.models.split(","):
        path = os.path.join(args.dir, kind + (f"-{layers[kind]}l" if kind in layers else ""))
        t0 = time.perf_counter()
        cfg = checkpoints.write(kind, path, layers.get(kind))
        print(f"# {kind}: {cfg['num_hidden_layers']} layers, checkpoint {path} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        for threads in (int(t) for t in args.threads.split(",")):
            row = {"model": kind, "layers": cfg["num_hidden_layers"], "threads": threads}
            for impl in args.impls.split(","):
                cmd = [sys.executable, os.path.abspath(__file__), "--one", kind, impl, path, str(threads)]
                for k in ("prompt", "decode", "stock_decode", "prefill", "profile_steps"):
                    cmd += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
                p = subprocess.run(cmd, capture_output=True, text=True)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                row[impl] = json.loads(lines[-1][7:]) if lines else {"error": p.stderr.strip().splitlines()[-1:]}
                print(f"  {kind} threads={threads} {impl}: {row[impl]}", flush=True)
            rows.append(row)
    print_table(rows, args.impls.split(","))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def print_table(rows, impls) -> None:
    head = ["model (layers)", "threads"]
    for impl in impls:
        head += [f"{impl} decode tok/s", f"{impl} prefill tok/s", f"{impl} RSS GB"]
    head += ["decode cpukern/transformers", "cpukern step outside kernels"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = [f"{r['model']} ({r['layers']})", str(r["threads"])]
        for impl in impls:
            d = r.get(impl, {})
            cells += [f"{d['decode_tps']:.2f}" if "decode_tps" in d else "-",
                      f"{d['prefill_tps']:.1f}" if "prefill_tps" in d else "-",
                      f"{d['rss_mb'] / 1024:.1f}" if "rss_mb" in d else "-"]
        a, b = r.get("cpukern", {}), r.get("transformers", {})
        cells.append(f"{a['decode_tps'] / b['decode_tps']:.1f}x"
                     if "decode_tps" in a and "decode_tps" in b else "-")
        cells.append(f"{a['outside_share']:.0%}" if "outside_share" in a else "-")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
