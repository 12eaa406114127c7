"""Whole models, one run: cpukern under Hugging Face transformers (its cpukern quantizer),
stock transformers, llama.cpp's own `llama-bench` on GGUF files of the same random weights,
and (with --ik-llama-cpp-build) ik_llama.cpp's `llama-bench`.

    ./bazelw run //benchmarks/e2e -- --llama-cpp-build /path/to/llama.cpp/build \
        [--ik-llama-cpp-build /path/to/ik_llama.cpp/build] \
        [--models bitnet,qwen3-moe,gpt-oss] [--threads 1,2] [--rounds 1]

The llama.cpp and ik_llama.cpp builds are the user's (nothing of them is vendored or built
here): CMake Release builds with the CPU backend, e.g.
    cmake -S llama.cpp -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
    cmake --build build --target llama-bench llama-quantize
ik_llama.cpp reads BitNet as IQ2_BN, made here from an F16 GGUF by its own llama-quantize
(token embedding, which is also the LM head, kept F16 as in the TQ2_0 file); Qwen3-MoE as the
same BF16 file. Its decode is `-gp 128,128` (128 tokens after a 128-token prompt, the prompt
not timed: tg128 at depth 128), its row the best of `-fa 0/1` x `-rtr 0/1` (medians per
setting over the rounds, then the best; the row names the winner).

Per (model, threads), the engines run one after the other, each in its own process (its peak
RSS is that process's, from wait4), round after round, so their ratios come from the same
minutes of a shared machine. Columns:
  prefill tok/s  one forward over 512 tokens (HF: logits of the last token only, like
                 llama-bench's pp512);
  decode tok/s   128 greedy tokens after a 128-token prompt (HF: the prompt's forward, then
                 128 one-token forwards with the KV cache, argmax; llama-bench: tg128 at depth
                 128, `-n 128 -d 128`). cpukern rows say how they step: "compiled" (a
                 StaticCache and the model's forward under torch.compile) or "eager"
                 (--cpukern-steps), with cpukern's kernels on `threads` threads and torch's
                 own ops on one (docs/pytorch.md: two polling pools on the same cores
                 take turns); stock transformers runs eager, as it ships, and
                 --stock-decode N times N tokens instead (stock BitNet unpacks every
                 weight at every step);
  peak RSS       of the process (llama-bench maps the GGUF: resident pages count);
  load s         transformers engines: seconds of from_pretrained (cpukern: loading and
                 packing every layer);
  weight B/tok   bytes of weights a decode step reads: all weights but the input embedding
                 (counted when it is tied to the LM head), MoE experts times top-k/E;
  of probe       weight B/tok x decode tok/s over the all-core read probe's GB/s at that
                 thread count (benchmarks/bandwidth);
  decode step    shares of 4 more one-token steps under torch.profiler: self time in
                 cpukern's ops, in torch matmuls (bf16 projections, LM head, attention), and
                 the rest (norms, RoPE, conversions, Python, dispatch).
Weights are random and deterministic (weights.py), written once under ~/.cache/cpukern/e2e.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import weights as W  # noqa: E402

PREFILL, PROMPT, DECODE = 512, 128, 128


def log(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def model_specs(args) -> dict[str, W.ModelSpec]:
    specs = {"bitnet": lambda: W.bitnet(args.bitnet_layers),
             "qwen3-moe": lambda: W.qwen3_moe(args.qwen3_moe_layers),
             "gpt-oss": lambda: W.gpt_oss(args.gpt_oss_layers)}
    unknown = set(args.models) - set(specs)
    if unknown:
        raise SystemExit(f"--models: expected names from {sorted(specs)}, got {sorted(unknown)}")
    return {k: specs[k]() for k in args.models}


# ---------------------------------------------------------------- child processes

def run_measured(cmd: list[str], env: Optional[dict] = None, timeout: float = 3600) -> tuple[int, str, str, int]:
    """Runs cmd with its peak RSS taken from wait4 (that child alone)."""
    import tempfile
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, env=env)
        t0 = time.time()
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.time() - t0 > timeout:
                p.kill()
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        return p.returncode, fo.read(), fe.read(), int(ru.ru_maxrss) * 1024


# ---------------------------------------------------------------- llama.cpp

def llama_tool(build: str, tool: str = "llama-bench", option: str = "--llama-cpp-build") -> str:
    for c in (f"bin/{tool}", tool, f"tools/{tool}/{tool}"):
        p = os.path.join(build, c)
        if os.path.exists(p):
            return p
    raise SystemExit(f"{option}: no {tool} under {build}")


def gguf_bytes_per_token(path: str, experts: tuple) -> int:
    sizes = W.gguf_tensor_bytes(path)
    total = 0
    for name, n in sizes.items():
        if name == "token_embd.weight" and "output.weight" in sizes:
            continue  # one row per token; the LM head is its own tensor
        if "_exps" in name and experts[0]:
            n = n * experts[1] // experts[0]
        total += n
    return total


def run_llama(spec: W.ModelSpec, qtype: str, threads: int, args) -> dict[str, Any]:
    exe = llama_tool(args.llama_cpp_build)
    path = spec.gguf_path(qtype)
    res: dict[str, Any] = {"engine": f"llama.cpp {qtype}"}
    rss = 0
    for what, flags in (("prefill", ["-p", str(PREFILL), "-n", "0"]),
                        ("decode", ["-p", "0", "-n", str(DECODE), "-d", str(PROMPT)])):
        cmd = [exe, "-m", path, "-t", str(threads), "-r", str(args.llama_reps), "-o", "json"] + flags
        rc, out, err, peak = run_measured(cmd)
        rss = max(rss, peak)
        if rc != 0:
            res["skip"] = f"llama-bench failed (rc {rc}): {err.strip().splitlines()[-1:] or ''}"
            return res
        rows = json.loads(out)
        res[what] = float(rows[0]["avg_ts"])
        res["build"] = rows[0].get("build_commit", "?")
    res["rss"] = rss
    res["bytes_per_token"] = gguf_bytes_per_token(path, spec.experts)
    return res


# ---------------------------------------------------------------- ik_llama.cpp

IK_SETTINGS = [(fa, rtr) for rtr in (0, 1) for fa in (0, 1)]


def ik_gguf(spec: W.ModelSpec, qtype: str, args) -> str:
    """ik_llama.cpp's file of qtype: written here, or made by its llama-quantize from the
    source type that spec.ik_types names (kept next to the others in the cache)."""
    source = spec.ik_types[qtype]
    path = spec.gguf_path(qtype if source is None else f"{qtype}-ik")
    if source is None or os.path.exists(path):
        return path
    spec.ensure(log, gguf_types=(source,))
    exe = llama_tool(args.ik_llama_cpp_build, "llama-quantize", "--ik-llama-cpp-build")
    # The token embedding is also the LM head: F16, as in the TQ2_0 file (the default for
    # IQ2_BN would be IQ4_NL, a quarter of the LM head's bytes).
    cmd = [exe, "--token-embedding-type", "f16", spec.gguf_path(source), path + ".tmp", qtype,
           str(os.cpu_count() or 1)]
    log(f"{spec.key}: {' '.join(cmd)}")
    rc, out, err, _ = run_measured(cmd)
    if rc != 0:
        raise SystemExit(f"ik_llama.cpp llama-quantize failed (rc {rc}): {(err or out)[-500:]}")
    os.replace(path + ".tmp", path)
    return path


def run_ik(spec: W.ModelSpec, qtype: str, threads: int, args) -> dict[str, Any]:
    """ik_llama.cpp's llama-bench: pp512 and `-gp 128,128` for every -fa x -rtr setting
    (-rtr repacks at load: one process per value, -fa both in each)."""
    res: dict[str, Any] = {"engine": f"ik_llama.cpp {qtype}", "settings": {}}
    try:
        exe = llama_tool(args.ik_llama_cpp_build, option="--ik-llama-cpp-build")
        path = ik_gguf(spec, qtype, args)
    except SystemExit as e:
        return {**res, "skip": str(e)}
    rss = 0
    for rtr in sorted({r for _, r in IK_SETTINGS}):
        cmd = [exe, "-m", path, "-t", str(threads), "-r", str(args.llama_reps), "-o", "json",
               "-p", str(PREFILL), "-n", "0", "-gp", f"{PROMPT},{DECODE}",
               "-fa", ",".join(str(f) for f, r in IK_SETTINGS if r == rtr), "-rtr", str(rtr)]
        rc, out, err, peak = run_measured(cmd)
        rss = max(rss, peak)
        if rc != 0:
            return {**res, "skip": f"ik_llama.cpp llama-bench failed (rc {rc}): "
                                   f"{err.strip().splitlines()[-1:] or ''}"}
        for row in json.loads(out):
            what = "decode" if int(row["n_gen"]) > 0 else "prefill"
            key = f"-fa {int(bool(row['flash_attn']))} -rtr {rtr}"
            res["settings"].setdefault(key, {})[what] = float(row["avg_ts"])
            res["build"] = row.get("build_commit", "?")
    res.update(best_setting(res["settings"]))
    res["rss"] = rss
    res["bytes_per_token"] = gguf_bytes_per_token(path, spec.experts)
    return res


def best_setting(settings: dict[str, dict]) -> dict[str, Any]:
    """The fastest setting for prefill and for decode, each on its own."""
    out: dict[str, Any] = {"best": {}}
    for what in ("prefill", "decode"):
        have = {k: v[what] for k, v in settings.items() if what in v}
        if have:
            k = max(have, key=have.get)
            out[what], out["best"][what] = have[k], k
    return out


# ---------------------------------------------------------------- transformers (worker side)

def hf_bytes_per_token(model, experts: tuple) -> int:
    # cpukern modules hold their weights packed only (PackedWeightsTensor buffers): each
    # counts as its serialised bytes.
    seen, total = set(), 0
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight.data_ptr() == emb.data_ptr()
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        t = getattr(t, "blob", t)  # a PackedWeightsTensor: its serialised bytes
        if t.data_ptr() in seen or t.device.type == "meta":
            continue
        seen.add(t.data_ptr())
        n = t.numel() * t.element_size()
        if t.data_ptr() == emb.data_ptr() and not tied:
            continue
        if ".experts." in name + "." and experts[0]:
            n = n * experts[1] // experts[0]
        total += n
    return total


def lift_accelerate_check() -> None:
    """transformers' BitNet quantizer refuses to load without `accelerate` importable, which
    its CPU path never uses (and which is not pinned here): lift that one check only."""
    from transformers.utils import is_accelerate_available
    if is_accelerate_available():
        return
    from transformers.quantizers import quantizer_bitnet
    quantizer_bitnet.BitNetHfQuantizer.validate_environment = lambda self, *a, **k: None


def stock_attention(model) -> None:
    """Back to the attention implementation transformers chose ("sdpa" / "eager") from
    cpukern's one-token decode attention (cpukern.torch.attention)."""
    from cpukern.torch.attention import IMPLEMENTATIONS
    stock = {v: k for k, v in IMPLEMENTATIONS.items()}
    model.set_attn_implementation(stock.get(model.config._attn_implementation,
                                            model.config._attn_implementation))


def worker(cfg: dict) -> dict[str, Any]:
    """One engine on one model at one thread count, in this (fresh) process."""
    import torch
    torch.set_num_threads(cfg["threads"])
    res: dict[str, Any] = {"engine": cfg["engine"]}
    from transformers import AutoModelForCausalLM
    lift_accelerate_check()
    kw = {"threads": cfg["threads"]}
    if cfg.get("variant"):
        kw["variant"] = cfg["variant"]
    if cfg.get("format"):
        kw["format"] = cfg["format"]
    if cfg.get("lm_head"):
        kw["lm_head"] = cfg["lm_head"]
    mxfp4 = json.load(open(os.path.join(cfg["hf_dir"], "config.json"))).get(
        "quantization_config", {}).get("quant_method") == "mxfp4"
    if cfg["engine"].startswith("cpukern"):
        try:
            import cpukern.torch as ct
        except Exception as e:  # noqa: BLE001 (report any import failure as the skip reason)
            return {**res, "skip": f"cpukern.torch not available ({e})"}
        # transformers' loader with cpukern's quantizer: MXFP4 blocks and packed ternary rows
        # go straight into cpukern layouts (a stock load would dequantise every gpt-oss expert
        # to bf16, 42 GB).
        if not hasattr(ct, "from_pretrained"):
            return {**res, "skip": "cpukern.torch.from_pretrained not available"}
        t0 = time.perf_counter()
        model = ct.from_pretrained(cfg["hf_dir"], dtype=torch.bfloat16, **kw)
        res["load"] = time.perf_counter() - t0
        res["patched"] = str(model.cpukern_report)[:300]
        if cfg.get("attention") == "stock":  # transformers' own attention at decode too
            stock_attention(model)
        res["attention"] = model.config._attn_implementation
    else:
        extra = {}
        if mxfp4:  # what transformers does on a CPU anyway, without asking for accelerate
            from transformers import Mxfp4Config
            extra["quantization_config"] = Mxfp4Config(dequantize=True)
        t0 = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(cfg["hf_dir"], dtype=torch.bfloat16, **extra)
        res["load"] = time.perf_counter() - t0
    model.eval()
    global PREFILL, PROMPT, DECODE
    PREFILL, PROMPT, DECODE = cfg.get("lengths", (PREFILL, PROMPT, DECODE))
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (1, PREFILL), generator=g)
    with torch.inference_mode():
        # Warm-up: two prompt lengths (torch.compile'd helpers, as in HF BitLinear, turn
        # dynamic on the second shape) and two cached one-token steps, so no compile is timed.
        for n in (32, 48):
            w = model(ids[:, :n], use_cache=True, logits_to_keep=1)
        for _ in range(2):
            w = model(ids[:, :1], past_key_values=w.past_key_values, use_cache=True, logits_to_keep=1)
        del w
        t0 = time.perf_counter()
        model(ids, logits_to_keep=1, use_cache=False)
        res["prefill"] = PREFILL / (time.perf_counter() - t0)
        if cfg["engine"].startswith("cpukern"):
            # One pool per core at decode: cpukern's kernels keep cfg["threads"] threads (set
            # by patch); torch's own ops (norms, RoPE, attention at one token) are too small to
            # gain from threads, and its OpenMP workers would poll on the cores cpukern uses.
            torch.set_num_threads(1)
        step = decode_step(model, cfg.get("compile", False), ids)
        tok = step.prompt(ids[:, :PROMPT])
        t0 = time.perf_counter()
        for _ in range(DECODE):
            tok = step(tok)
        res["decode"] = DECODE / (time.perf_counter() - t0)
        if cfg.get("profile"):
            res["profile"] = profile_decode(step, tok, cfg["profile"])
    res["bytes_per_token"] = hf_bytes_per_token(model, tuple(cfg["experts"]))
    res["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return res


# Where a decode step goes: torch.profiler self times, by kind of op.
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear",
              "aten::matmul", "aten::_scaled_dot_product_flash_attention_for_cpu")


class decode_step:
    """One greedy token at a time after a prompt. Eager: transformers' DynamicCache. compiled:
    a StaticCache and the model's forward under torch.compile (fixed shapes: one graph for
    every step; compiled here, before anything is timed)."""

    def __init__(self, model, compiled: bool, ids):
        import torch
        self.model, self.compiled = model, compiled
        if not compiled:
            return
        from transformers import StaticCache
        self.cache = StaticCache(config=model.config, max_cache_len=PROMPT + DECODE + 16)
        # Fixed shapes: one graph. A sliding-window cache (gpt-oss) hands the mask its offset
        # as a Python int that grows every step: automatic dynamic makes it symbolic at the
        # second step, two graphs in all (with dynamic=False each step would compile anew).
        sliding = "sliding_attention" in (getattr(model.config, "layer_types", None) or ())
        self.forward = torch.compile(model, dynamic=None if sliding else False)
        tok = self.prompt(ids[:, :PROMPT])
        for _ in range(3):  # compiles (and would show a recompile) outside the timing
            tok = self(tok)

    def prompt(self, ids):
        import torch
        if self.compiled:
            self.cache.reset()
            self.pos = ids.shape[1]
            pos = torch.arange(self.pos)
            out = self.model(ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1,
                             cache_position=pos, position_ids=pos[None])
        else:
            out = self.model(ids, use_cache=True, logits_to_keep=1)
            self.cache = out.past_key_values
        return out.logits[:, -1].argmax(-1, keepdim=True)

    def __call__(self, tok):
        import torch
        if self.compiled:
            # positions as tensors: a Python int (e.g. a sliding-window cache's length) would
            # be a guard, and every step would compile again
            pos = torch.tensor([self.pos])
            out = self.forward(tok, past_key_values=self.cache, use_cache=True, logits_to_keep=1,
                               cache_position=pos, position_ids=pos[None])
            self.pos += 1
        else:
            out = self.model(tok, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
            self.cache = out.past_key_values
        return out.logits[:, -1].argmax(-1, keepdim=True)


def profile_decode(step: decode_step, tok, steps: int) -> dict[str, float]:
    """Shares of `steps` one-token steps' wall time: in cpukern's ops (the kernels), in
    torch matmuls (bf16 projections, LM head, attention) and in everything else (norms, RoPE,
    softmax, dtype conversions, Python and dispatch)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            tok = step(tok)
        wall_us = (time.perf_counter() - t0) * 1e6
    ev = prof.key_averages()
    kern = sum(e.self_cpu_time_total for e in ev if e.key.startswith("cpukern::"))
    mm = sum(e.self_cpu_time_total for e in ev if e.key in MATMUL_OPS)
    return {"cpukern": kern / wall_us, "matmul": mm / wall_us,
            "other": max(0.0, 1 - (kern + mm) / wall_us)}


def run_hf(spec: W.ModelSpec, engine: str, threads: int, args, hf_dir: Optional[str] = None,
           fmt: str = "", compiled: bool = False, decode: int = 0,
           attention: str = "cpukern") -> dict[str, Any]:
    cfg = {"engine": engine, "threads": threads, "hf_dir": hf_dir or spec.hf_dir, "format": fmt,
           "profile": args.profile_steps, "compile": compiled, "attention": attention,
           "experts": list(spec.experts), "variant": args.variant, "lm_head": args.lm_head,
           "lengths": (PREFILL, PROMPT, decode or DECODE)}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    rc, out, err, peak = run_measured([sys.executable, os.path.abspath(__file__), "--worker",
                                       json.dumps(cfg)], env=env)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if rc != 0 or not lines:
        tail = (err.strip().splitlines() or ["?"])[-1]
        return {"engine": engine, "skip": f"worker failed (rc {rc}): {tail[:200]}"}
    res = json.loads(lines[-1])
    res["rss"] = max(res.get("rss", 0), peak)
    return res


# ---------------------------------------------------------------- the table

def probe(binary: Optional[str]) -> dict[str, Any]:
    if binary and os.path.exists(binary):
        return json.loads(subprocess.run([binary, "--json"], check=True, capture_output=True,
                                         text=True).stdout)
    return {}


def median_row(rows: list[dict]) -> dict:
    ok = [r for r in rows if "skip" not in r]
    if not ok:
        return rows[-1]
    out = dict(ok[-1])
    for k in ("prefill", "decode", "load"):
        if all(k in r for r in ok):
            out[k] = statistics.median(r[k] for r in ok)
    if "settings" in out:  # ik_llama.cpp: the median of each setting, then the best
        out["settings"] = {s: {k: statistics.median(r["settings"][s][k] for r in ok)
                               for k in v if all(k in r["settings"].get(s, {}) for r in ok)}
                           for s, v in out["settings"].items()}
        out.update(best_setting(out["settings"]))
    out["rss"] = max(r.get("rss", 0) for r in ok)
    return out


def fmt_profile(p: Optional[dict]) -> str:
    return "-" if not p else " / ".join(f"{p[k]:.0%}" for k in ("cpukern", "matmul", "other"))


def fmt_table(results: list[tuple], gbs: dict) -> str:
    hdr = (f"| model | engine | threads | prefill tok/s ({PREFILL}) | decode tok/s ({DECODE} after {PROMPT}) "
           "| decode x stock | peak RSS GB | load s | weight MB/token | of probe "
           "| decode step: cpukern ops / torch matmul / other |")
    lines = [hdr, "|" + "---|" * 11]
    for model, threads, row, stock in results:
        if "skip" in row:
            lines.append(f"| {model} | {row['engine']} | {threads} | skipped: {row['skip']} |||||||")
            continue
        ratio = (f"{row['decode'] / stock['decode']:.2f}x"
                 if stock and "decode" in stock and "decode" in row else "-")
        bpt = row.get("bytes_per_token", 0)
        frac = "-"
        probe_gbs = gbs.get(str(threads))
        if bpt and probe_gbs and "decode" in row:
            frac = f"{bpt * row['decode'] / (probe_gbs * 1e9):.0%}"
        engine = row["engine"]
        if row.get("best"):
            b = row["best"]
            engine += (f", best: `{b['decode']}`" if b.get("decode") == b.get("prefill") else
                       f", best decode `{b.get('decode')}`, prefill `{b.get('prefill')}`")
        load = f"{row['load']:.1f}" if "load" in row else "-"
        lines.append(f"| {model} | {engine} | {threads} | {row.get('prefill', 0):.1f} | "
                     f"{row.get('decode', 0):.2f} | {ratio} | {row.get('rss', 0) / 1e9:.2f} | "
                     f"{load} | {bpt / 1e6:.0f} | {frac} | {fmt_profile(row.get('profile'))} |")
    return "\n".join(lines)


def llama_types(spec: W.ModelSpec, args) -> tuple:
    if not args.llama_cpp_types:
        return spec.gguf_types
    return tuple(q for q in args.llama_cpp_types.split(",") if q in spec.gguf_types)


def main() -> None:
    global PREFILL, PROMPT, DECODE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--llama-cpp-build", help="the user's llama.cpp CMake build directory")
    ap.add_argument("--ik-llama-cpp-build",
                    help="the user's ik_llama.cpp CMake build directory (llama-bench and "
                         "llama-quantize): adds its rows")
    ap.add_argument("--models", default="bitnet,qwen3-moe,gpt-oss")
    ap.add_argument("--engines", default="cpukern,transformers,llama.cpp")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (median)")
    ap.add_argument("--llama-reps", type=int, default=2, help="llama-bench -r (both peers)")
    ap.add_argument("--llama-cpp-types", default="",
                    help="llama.cpp GGUF types to run (default: all of each model's, e.g. "
                         "TQ2_0,TQ1_0 for BitNet)")
    ap.add_argument("--variant", default="",
                    help="cpukern variant (registry row) to force (default: automatic)")
    ap.add_argument("--lm-head", dest="lm_head", default="", choices=("", "bf16", "int8"),
                    help="cpukern's LM head format (default: bf16)")
    ap.add_argument("--probe", help="benchmarks/bandwidth binary")
    ap.add_argument("--bitnet-layers", type=int, default=30)
    ap.add_argument("--qwen3-moe-layers", dest="qwen3_moe_layers", type=int, default=8,
                    help="Qwen3-30B-A3B layers kept (of 48; bf16 experts are 1.2 GB a layer)")
    ap.add_argument("--gpt-oss-layers", dest="gpt_oss_layers", type=int, default=24)
    ap.add_argument("--gpt-oss-stock-layers", type=int, default=4,
                    help="layers of gpt-oss for stock transformers (it dequantises MXFP4 to bf16)")
    ap.add_argument("--gpt-oss-formats", default="mxfp4,mxfp4_a8",
                    help="cpukern expert formats for gpt-oss: mxfp4 (exact), mxfp4_a8 (W4A8), bf16")
    ap.add_argument("--cpukern-steps", default="auto",
                    help="cpukern decode steps, one row per mode: compiled (a StaticCache and a "
                         "torch.compile'd step), eager (transformers' DynamicCache); auto: "
                         "compiled (gpt-oss's sliding-window offset becomes symbolic at the "
                         "second step: two graphs)")
    ap.add_argument("--cpukern-attention", default="cpukern",
                    help="cpukern rows' attention at one token: cpukern (cpukern.torch.attention, "
                         "what patch sets) and/or stock (transformers' sdpa / eager, as loaded): "
                         "one row per value")
    ap.add_argument("--profile-steps", type=int, default=4,
                    help="decode steps profiled after the timed ones (0: none): the last column")
    ap.add_argument("--prefill", type=int, default=PREFILL, help="prefill tokens (512)")
    ap.add_argument("--prompt", type=int, default=PROMPT, help="prompt before decode (128)")
    ap.add_argument("--decode", type=int, default=DECODE, help="greedy tokens timed (128)")
    ap.add_argument("--stock-decode", type=int, default=0,
                    help="greedy tokens timed for stock transformers (default: --decode); stock "
                         "BitNet unpacks every weight at every step, so 128 tokens take an hour")
    ap.add_argument("--prepare-only", action="store_true",
                    help="write the weight files (with --ik-llama-cpp-build, its too) and stop")
    args = ap.parse_args()

    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))), flush=True)
        return

    PREFILL, PROMPT, DECODE = args.prefill, args.prompt, args.decode
    args.models = args.models.split(",")
    engines = args.engines.split(",")
    if args.ik_llama_cpp_build and "ik_llama.cpp" not in engines:
        engines.append("ik_llama.cpp")
    threads = [int(t) for t in args.threads.split(",")]
    if args.cpukern_steps != "auto" and set(args.cpukern_steps.split(",")) - {"compiled", "eager"}:
        raise SystemExit(f"--cpukern-steps: expected auto, or compiled and/or eager, got "
                         f"{args.cpukern_steps!r}")
    attentions = args.cpukern_attention.split(",")
    if set(attentions) - {"cpukern", "stock"}:
        raise SystemExit(f"--cpukern-attention: expected cpukern and/or stock, got "
                         f"{args.cpukern_attention!r}")
    specs = model_specs(args)
    for s in specs.values():  # GGUF files only where llama.cpp runs
        s.ensure(log, gguf_types=llama_types(s, args) if "llama.cpp" in engines or
                 args.prepare_only else ())
    if args.prepare_only:
        if args.ik_llama_cpp_build:
            for s in specs.values():
                for q in s.ik_types:
                    ik_gguf(s, q, args)
        return
    if "llama.cpp" in engines and not args.llama_cpp_build:
        log("no --llama-cpp-build: the llama.cpp rows are skipped")
    pr = probe(args.probe)
    gbs = pr.get("read_GB_s", {})
    print(f"machine: {pr.get('cpu', '?')}; read probe GB/s by threads: {gbs or 'not run'}")

    results = []
    for key, spec in specs.items():
        stock_name, stock_dir = "transformers stock", None
        if key == "gpt-oss" and args.gpt_oss_stock_layers < spec.config["num_hidden_layers"]:
            # Stock transformers dequantises MXFP4 experts to bf16 (42 GB for 24 layers): it
            # runs on a checkpoint of the first layers only (the same tensors).
            small = W.gpt_oss(args.gpt_oss_stock_layers)
            small.ensure(log, gguf_types=())
            stock_name = f"transformers stock ({args.gpt_oss_stock_layers} of 24 layers)"
            stock_dir = small.hf_dir
        if args.stock_decode and args.stock_decode != DECODE:
            stock_name += f" ({args.stock_decode} decode tokens)"
        modes = args.cpukern_steps.split(",") if args.cpukern_steps != "auto" else ["compiled"]
        for t in threads:
            rows: dict[str, list] = {}
            fewer_layers = {stock_name} if stock_dir else set()  # rows on the stock checkpoint
            for rnd in range(args.rounds):
                for e in engines:
                    jobs = []
                    if e == "llama.cpp":
                        jobs = [(f"llama.cpp {q}", lambda q=q: run_llama(spec, q, t, args) if args.llama_cpp_build
                                 else {"engine": f"llama.cpp {q}", "skip": "no --llama-cpp-build"})
                                for q in llama_types(spec, args)]
                    elif e == "ik_llama.cpp" and args.ik_llama_cpp_build:
                        jobs = [(f"ik_llama.cpp {q}", lambda q=q: run_ik(spec, q, t, args))
                                for q in spec.ik_types]
                    elif e == "transformers":
                        jobs = [(stock_name, lambda: run_hf(spec, stock_name, t, args, stock_dir,
                                                            decode=args.stock_decode))]
                        if stock_dir and "cpukern" in engines:  # cpukern on those layers too
                            f, m = args.gpt_oss_formats.split(",")[0], modes[0]
                            small_name = (f"cpukern {f} {m} "
                                          f"({args.gpt_oss_stock_layers} of 24 layers)")
                            fewer_layers.add(small_name)
                            jobs.append((small_name, lambda f=f, m=m, n=small_name: run_hf(
                                spec, n, t, args, stock_dir, fmt=f, compiled=m == "compiled")))
                    elif e == "cpukern":
                        fmts = args.gpt_oss_formats.split(",") if key == "gpt-oss" else [""]
                        names = {(f, m, a): " ".join(filter(None, ("cpukern", f, m))) +
                                 (", stock attention" if a == "stock" else "")
                                 for f in fmts for m in modes for a in attentions}
                        jobs = [(n, lambda f=f, m=m, a=a, n=n: run_hf(
                                    spec, n, t, args, fmt=f, compiled=m == "compiled", attention=a))
                                for (f, m, a), n in names.items()]
                    for name, job in jobs:
                        log(f"{key} threads={t} round {rnd + 1}: {name}")
                        r = job()
                        log(f"  -> {json.dumps({k: v for k, v in r.items() if k != 'patched'})}")
                        rows.setdefault(name, []).append(r)
            # "x stock" compares like with like: rows on fewer layers against the stock run on
            # those layers, full models against a full stock run (where one fits).
            stock = median_row(rows[stock_name]) if stock_name in rows else None
            for name, rs in rows.items():
                same = (name in fewer_layers) == (stock_dir is not None)
                results.append((spec.title, t, median_row(rs), stock if same else None))
            print(fmt_table(results, gbs), flush=True)
    print()
    print(fmt_table(results, gbs))


if __name__ == "__main__":
    main()
