"""The fixed cost of one call of each packed layer kind from Python: tiny layers (64 x 64, one
token, one thread), so that the kernels take about a microsecond and what is left is the call
path (module, F.linear hook, argument checks, the extension, allocation; for the op rows,
torch's dispatcher, which a compiled graph goes through per layer). A decode step makes
hundreds of such calls (BitNet: 210), so this is the fast loop for the glue between kernels.

    ./bazelw run //benchmarks/e2e:call_cost [-- --rounds 7 --calls 5000]

Prints the best of `rounds` runs of `calls` back-to-back calls, in microseconds a call.

    ./bazelw run //benchmarks/e2e:call_cost -- --bitnet-projections [--threads 1,2]

instead times BitNet b1.58 2B-4T's projections at their own sizes, one layer at a time over
30 layers of random ternary weights (cold: 0.9 GB, past the L3): q, k, v (and gate, up) as
separate packed layers against one packed_linears call (the input quantised once, one pass
over the pool), median of 6 sweeps after a warm-up, microseconds a layer.

    ./bazelw run //benchmarks/e2e:call_cost -- --attention [--threads 1,2] [--lengths 256,1024]

times one token's attention at the three models' head shapes over a bf16 cache (in the L2:
the cache of one layer is 0.3-2.6 MB), as cpukern.torch.attention runs it: the C++ op
(torch.ops.cpukern.decode_attention) against the same math in torch's float32 ops (the path
before the op, still taken for float16 / float64 models), both with a bool mask; best of
`rounds` runs of 200 calls, microseconds a call."""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import cpukern.torch as ct


def cases() -> dict:
    """name -> a no-argument call of one tiny packed layer."""
    torch.manual_seed(0)
    f32, bf16_3d = torch.randn(1, 64), torch.randn(1, 1, 64, dtype=torch.bfloat16)
    ternary = ct.TernaryLinear.from_linear(nn.Linear(64, 64), act="int8")
    bitnet = ct.TernaryLinear.from_linear(nn.Linear(64, 64, bias=False), act="int8_bitnet")
    dense = ct.Linear.from_linear(nn.Linear(64, 64).to(torch.bfloat16))
    # what pack_linear_ makes, spelt so that older trees run it too (A/B of the call path)
    packed_nn = nn.Linear(64, 64, bias=False).to(torch.bfloat16)
    packed_nn.weight = nn.Parameter(ct.Linear.from_linear(packed_nn).weight, requires_grad=False)
    torch_nn = nn.Linear(64, 64, bias=False).to(torch.bfloat16)
    moe = ct.FusedMoE.from_experts(torch.randn(4, 64, 32) / 8, torch.randn(4, 32, 32) / 8, topk=2)
    xm, logits = torch.randn(1, 32, dtype=torch.bfloat16), torch.randn(1, 4)
    bf16_2d = bf16_3d.reshape(1, 64)
    ops = torch.ops.cpukern
    return {
        "TernaryLinear act=int8, x float32 (1, 64)": lambda: ternary(f32),
        "TernaryLinear act=int8_bitnet, x bf16 (1, 1, 64)": lambda: bitnet(bf16_3d),
        "Linear (cpukern module), x bf16 (1, 64)": lambda: dense(bf16_2d),
        "nn.Linear with a packed weight, x bf16 (1, 1, 64)": lambda: packed_nn(bf16_3d),
        "FusedMoE E=4 top-2 (routing in torch), x bf16 (1, 32)": lambda: moe(xm, logits),
        # what a compiled graph calls per layer: the op through torch's dispatcher, on the blob
        "op ternary_gemv_prepared (compiled graphs), x float32 (1, 64)":
            lambda: ops.ternary_gemv_prepared.default(bitnet.weight.blob, f32, 64, "int8_bitnet"),
        "op linear_prepared (compiled graphs), x bf16 (1, 64)":
            lambda: ops.linear_prepared.default(bf16_2d, dense.weight.blob, 64, dense.bias),
        "torch's own bf16 nn.Linear, x bf16 (1, 1, 64) (reference)": lambda: torch_nn(bf16_3d),
        **router_cases(),
    }


def router_cases() -> dict:
    """The MoE routers of the models at their own sizes, one token: transformers' module (bf16
    F.linear, softmax and top-k in torch) against MoERouter (one cpukern call). Their weights
    (0.3-0.5 MB) stay in the caches, so this is the call and the kernel, hot."""
    from types import SimpleNamespace

    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssTopKRouter
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter
    qwen = Qwen3MoeTopKRouter(SimpleNamespace(num_experts_per_tok=8, num_experts=128,
                                              norm_topk_prob=True, hidden_size=2048))
    oss = GptOssTopKRouter(SimpleNamespace(num_experts_per_tok=4, num_local_experts=32,
                                           hidden_size=2880))
    out = {}
    for name, stock, rule in (("Qwen3-MoE E=128 H=2048 top-8", qwen, "softmax_topk"),
                              ("gpt-oss E=32 H=2880 top-4", oss, "topk_softmax")):
        stock = stock.to(torch.bfloat16)
        nn.init.normal_(stock.weight, std=0.02)
        x = torch.randn(1, stock.hidden_dim, dtype=torch.bfloat16)
        out[f"router {name}, x bf16 (1, H): transformers' module"] = lambda s=stock, x=x: s(x)
        if hasattr(ct, "MoERouter"):  # older trees (A/B) have no such row
            ours = ct.MoERouter.from_weight(stock.weight, stock.top_k,
                                            bias=getattr(stock, "bias", None), rule=rule)
            out[f"router {name}, x bf16 (1, H): MoERouter"] = lambda m=ours, x=x: m(x)
    return out


def bitnet_projections(threads: int) -> None:
    import numpy as np

    from cpukern import ternary
    from cpukern.torch.forward import packed_linears
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)

    def layer(m: int, k: int) -> nn.Module:
        codes = rng.integers(-1, 2, size=(m, k)).astype(np.int8)
        packed = torch.from_numpy(ternary.pack(codes).view(np.int32))
        return ct.TernaryLinear.from_packed(packed, k, torch.full((m,), 0.5), None,
                                            act="int8_bitnet")

    h, kv, inter, layers = 2560, 640, 6912, 30
    x = torch.randn(1, 1, h, dtype=torch.bfloat16)
    for name, sizes in (("q, k, v", (h, kv, kv)), ("gate, up", (inter, inter))):
        groups = [[layer(m, h) for m in sizes] for _ in range(layers)]

        def sweep(one_call: bool) -> float:
            start = time.perf_counter()
            for g in groups:
                if one_call:
                    packed_linears(x, g)
                else:
                    for lin in g:
                        lin(x)
            return (time.perf_counter() - start) / layers * 1e6

        with torch.no_grad():
            times = {False: [], True: []}
            for _ in range(7):
                for one_call in (False, True):
                    times[one_call].append(sweep(one_call))
        apart, one = (float(np.median(times[c][1:])) for c in (False, True))
        print(f"| {threads} | {name} | {apart:.1f} | {one:.1f} | {apart / one:.2f}x |")


# (name, query heads, KV heads, head size, sinks)
ATTENTION_SHAPES = (("BitNet b1.58 2B-4T", 20, 5, 128, False),
                    ("Qwen3-30B-A3B", 32, 4, 128, False),
                    ("gpt-oss-20b", 64, 8, 64, True))


def attention_rows(threads: int, lengths: list, rounds: int) -> None:
    import cpukern.torch.attention as A
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    for name, hq, hkv, d, sinks in ATTENTION_SHAPES:
        for length in lengths:
            q = torch.randn(1, hq, 1, d, generator=g).to(torch.bfloat16)
            k = torch.randn(1, hkv, length, d, generator=g).to(torch.bfloat16)
            v = torch.randn(1, hkv, length, d, generator=g).to(torch.bfloat16)
            mask = torch.ones(1, 1, 1, length, dtype=torch.bool)
            s = torch.randn(hq, generator=g) if sinks else None
            op = best_us(lambda: A.decode_attention(q, k, v, mask, d ** -0.5, s), rounds, 200)
            ref = best_us(lambda: A._decode_attention_torch(q, k, v, mask, d ** -0.5, s, "zero"),
                          rounds, 200)
            print(f"| {threads} | {name} | {hq} / {hkv} x {d} | {length} | {ref:.1f} | "
                  f"{op:.1f} | {ref / op:.2f}x |")


def best_us(call, rounds: int, calls: int) -> float:
    with torch.no_grad():
        for _ in range(calls // 10 + 1):
            call()
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(calls):
                call()
            best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--bitnet-projections", action="store_true")
    ap.add_argument("--attention", action="store_true")
    ap.add_argument("--lengths", default="256,1024", help="cached tokens (--attention)")
    ap.add_argument("--threads", default="1,2",
                    help="thread counts (--bitnet-projections, --attention)")
    args = ap.parse_args()
    if args.attention:
        print("| threads | model | query / KV heads x size | cached tokens | torch float32 ops, "
              "us | cpukern op, us | ratio |")
        print("|---|---|---|---|---|---|---|")
        for t in args.threads.split(","):
            attention_rows(int(t), [int(n) for n in args.lengths.split(",")], args.rounds)
        return
    if args.bitnet_projections:
        print("| threads | projections | separate calls, us a layer | one call | ratio |")
        print("|---|---|---|---|---|")
        for t in args.threads.split(","):
            bitnet_projections(int(t))
        return
    torch.set_num_threads(1)
    print(f"| call (1 thread) | us a call (best of {args.rounds} x {args.calls}) |")
    print("|---|---|")
    for name, call in cases().items():
        print(f"| {name} | {best_us(call, args.rounds, args.calls):.1f} |")


if __name__ == "__main__":
    main()
