"""The packed-weight ops and loading packed weights: the *_prepared ops (eager on a
PackedWeightsTensor and on its plain uint8 blob, opcheck, torch.compile, torch.export, bad
input), what load_state_dict checks (corrupted or mismatched blobs: ValueError naming the
state_dict key, nothing replaced), plain blobs as safetensors holds them, weights packed for
a CPU that cannot run them (ternary and widely-linear packed again on load; MoE and dense
refused naming the key), and the vLLM flows (replace_parameter with a PackedWeightsTensor,
the vLLM-order op on packed experts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed here (e.g. the aarch64 QEMU legs): PyTorch tests skipped")

import cpukern  # noqa: E402
import cpukern.torch as ct  # noqa: E402
from cpukern import moe, ternary  # noqa: E402
from cpukern.torch import FusedMoE, Linear, TernaryLinear, WidelyLinear  # noqa: E402
from cpukern.torch import ops as ct_ops  # noqa: E402
from cpukern.torch.packed import PackedWeightsTensor  # noqa: E402
from packed_helpers import PackCounter, packed_buffers  # noqa: E402
from variants import UNDER_QEMU, variant_params  # noqa: E402

KIND_OP = {"ternary": "ternary_gemv", "ternary_int8": "ternary_gemv", "widely": "widely_linear",
           "dense": "linear", "dense_int8": "linear", "moe_bf16": "fused_moe",
           "moe_mxfp4": "fused_moe"}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    ct.clear_cache()


@pytest.fixture
def dynamo():
    torch._dynamo.reset()  # the modules share forward code objects: keep clear of the recompile limit
    yield
    torch._dynamo.reset()


def kind_variant_params(kinds, skip_portable=False):
    """(kind, variant) for every kind and every variant of its op (skipped where this CPU cannot
    run it); skip_portable: without the variants that need no CPU feature."""
    out = []
    for kind in kinds:
        op = KIND_OP[kind]
        portable = {v["name"] for v in cpukern.kernels(op) if not v["requires"]}
        for p in variant_params(op):
            if skip_portable and p.values[0] in portable:
                continue
            out.append(pytest.param(kind, p.values[0], id=f"{kind}-{p.id}", marks=p.marks))
    return out


def _sources(seed=0):
    """The float weights every module here is packed from."""
    g = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(64, 40)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(40, 64, generator=g))
        lin.bias.copy_(torch.randn(40, generator=g))
    w13 = (torch.randn(4, 64, 64, generator=g) / 8).to(torch.bfloat16)
    w2 = (torch.randn(4, 64, 32, generator=g) / 8).to(torch.bfloat16)
    return lin, w13, w2


def _build(kind, variant="", seed=0):
    lin, w13, w2 = _sources(seed)
    gx = torch.Generator().manual_seed(99)
    x = torch.randn(3, 64, generator=gx)
    if kind.startswith("ternary"):
        act = "int8" if kind == "ternary_int8" else "fp32"
        return TernaryLinear.from_linear(lin, act=act, variant=variant), (x,)
    if kind == "widely":
        return WidelyLinear.from_linear(lin, variant=variant), (x,)
    if kind.startswith("dense"):
        fmt = "int8" if kind == "dense_int8" else "bf16"
        return Linear.from_linear(lin, format=fmt, variant=variant), (x,)
    args = (x.to(torch.bfloat16), torch.randn(3, 4, generator=gx))
    if kind == "moe_bf16":
        return FusedMoE.from_experts(w13, w2, torch.randn(4, 64) / 10, torch.randn(4, 64) / 10,
                                     activation="swigluoai", variant=variant), args
    b13, s13 = moe.quantize(w13)
    b2, s2 = moe.quantize(w2)
    return FusedMoE.from_mxfp4(b13, s13, b2, s2, topk=2, variant=variant), args


# --- the *_prepared ops ----------------------------------------------------------------------

def _op_on(mod, weight, args):
    """The module's op called on `weight` (its PackedWeightsTensor or the blob), without bias
    for the ternary and widely-linear layers (added outside their ops)."""
    if isinstance(mod, FusedMoE):
        tw, ids = mod.route(args[1])
        return torch.ops.cpukern.fused_moe_prepared(args[0], weight[0], weight[1], tw, ids,
                                                    mod.activation, mod.w13_bias, mod.w2_bias)
    x = args[0]
    if isinstance(mod, Linear):
        return torch.ops.cpukern.linear_prepared(x.to(torch.bfloat16), weight, mod.out_features,
                                                 mod.bias).to(x.dtype)
    op = (torch.ops.cpukern.ternary_gemv_prepared if isinstance(mod, TernaryLinear)
          else torch.ops.cpukern.widely_linear_prepared)
    extra = (mod.act,) if isinstance(mod, TernaryLinear) else ()
    return op(weight, x, mod.out_features, *extra) + mod.bias


@pytest.mark.parametrize("kind,variant", kind_variant_params(["ternary", "ternary_int8", "widely",
                                                          "dense", "moe_bf16"]))
def test_prepared_ops_on_the_tensor_and_on_its_blob_compute_the_module(kind, variant):
    mod, args = _build(kind, variant)
    want = mod(*args)
    if isinstance(mod, FusedMoE):
        tensors, blobs = (mod.w13, mod.w2), (mod.w13.blob.clone(), mod.w2.blob.clone())
    else:
        tensors, blobs = mod.weight, mod.weight.blob.clone()  # a clone: no cached object on it
    assert torch.equal(_op_on(mod, tensors, args), want)
    assert torch.equal(_op_on(mod, blobs, args), want)


@pytest.mark.parametrize("op", ["ternary_gemv_prepared", "widely_linear_prepared",
                                "linear_prepared", "fused_moe_prepared"])
def test_prepared_ops_opcheck(op):
    if op == "ternary_gemv_prepared":
        t, (x,) = _build("ternary")
        args = (t.weight.blob, x, 40, "fp32")
    elif op == "widely_linear_prepared":
        w, (x,) = _build("widely")
        args = (w.weight.blob, x, 40)
    elif op == "linear_prepared":
        d, (x,) = _build("dense")
        args = (x.to(torch.bfloat16), d.weight.blob, 40, d.bias)
    else:
        m, (x, logits) = _build("moe_bf16")
        tw, ids = m.route(logits)
        args = (x, m.w13.blob, m.w2.blob, tw, ids, "swigluoai", m.w13_bias, m.w2_bias)
    torch.library.opcheck(getattr(torch.ops.cpukern, op).default, args)


def test_a_block_of_packed_layers_compiles_and_exports(dynamo):
    t, _ = _build("ternary")
    w = WidelyLinear.from_linear(torch.nn.Linear(40, 40))
    d, _ = _build("dense")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.t, self.w, self.d = t, w, d

        def forward(self, x):
            return self.d(torch.cat([self.w(torch.relu(self.t(x))), x[..., :24]], -1))

    block = Block()
    x = torch.randn(3, 64)
    want = block(x)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), want)
    ep = torch.export.export(block, (x,))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"cpukern.ternary_gemv_prepared.default", "cpukern.widely_linear_prepared.default",
            "cpukern.linear_prepared.default"} <= targets, targets
    assert torch.equal(ep.module()(x), want)


@pytest.mark.parametrize("form", ["PackedWeightsTensor", "blob"])
def test_prepared_op_bad_input_names_the_argument(form):
    t, _ = _build("ternary")
    x = torch.randn(2, 64)
    prepared = t.weight if form == "PackedWeightsTensor" else t.weight.blob.clone()
    with pytest.raises(ValueError, match=r"^prepared: holds 40 output rows, the op was given 41"):
        torch.ops.cpukern.ternary_gemv_prepared(prepared, x, 41)
    with pytest.raises(ValueError, match=r"^x: expected K = 64"):
        torch.ops.cpukern.ternary_gemv_prepared(prepared, torch.randn(2, 65), 40)
    w, _ = _build("widely")
    with pytest.raises(ValueError, match=r"^prepared: expected prepared weights of ternary"):
        torch.ops.cpukern.ternary_gemv_prepared(
            w.weight if form == "PackedWeightsTensor" else w.weight.blob.clone(), x, 40)
    if form == "PackedWeightsTensor":
        assert torch.equal(torch.ops.cpukern.ternary_gemv_prepared(prepared, x, 40),
                           torch.ops.cpukern.ternary_gemv_prepared(prepared.blob.clone(), x, 40))
        return
    t8, _ = _build("ternary_int8")  # its blob carries the int8 layout
    y8 = torch.ops.cpukern.ternary_gemv_prepared(t8.weight.blob.clone(), x, 40, "int8")
    assert torch.equal(y8 + t8.bias, t8(x))
    with pytest.raises(TypeError, match=r"^prepared: "):
        torch.ops.cpukern.ternary_gemv_prepared(prepared.view(torch.int8), x, 40)
    lin, _, _ = _sources()
    packed, scale = ternary.quantize(lin.weight.detach())
    other = ct_ops.prepare_ternary_tensor(packed, 64, scale, variant="reference")
    assert torch.equal(torch.ops.cpukern.ternary_gemv_prepared(other, x, 40),
                       ternary.gemv(ternary.prepare(packed, 64, scale, variant="reference"), x))


def _bad_tensor_args(x):
    """Tensors the ops must refuse naming the argument: (tensor, exception, message start)."""
    return [(x.to(torch.float16), TypeError, "expected"),
            (x.clone().requires_grad_(x.is_floating_point()), TypeError, "expected a tensor that does not require grad"),
            (x.to(torch.int16), TypeError, "expected"),
            (x.t() if x.dim() == 2 and x.shape[0] > 1 else x.expand(2, *x.shape)[1:].transpose(0, -1), (TypeError, ValueError), "")]


@pytest.mark.parametrize("kind", ["ternary_int8", "dense", "moe_bf16"])
def test_prepared_ops_on_packed_tensors_check_each_tensor_argument(kind):
    """The ops' calls on a PackedWeightsTensor (the modules' path) refuse a tensor of another
    dtype, one that requires grad, 16-bit integers read as bf16 or a non-contiguous tensor,
    naming the argument, and never run on them; a lazily negated view runs on its values (the
    dispatcher resolves it before the op)."""
    mod, args = _build(kind)
    if isinstance(mod, FusedMoE):
        tw, ids = mod.route(args[1])
        good = dict(x=args[0], topk_weights=tw, topk_ids=ids, w13_bias=mod.w13_bias)

        def call(**kw):
            a = dict(good, **kw)
            return torch.ops.cpukern.fused_moe_prepared(a["x"], mod.w13, mod.w2, a["topk_weights"],
                                                        a["topk_ids"], mod.activation,
                                                        a["w13_bias"], mod.w2_bias)
        names = ["x", "topk_weights", "w13_bias"]
    elif isinstance(mod, Linear):
        good = dict(x=args[0].to(torch.bfloat16), bias=mod.bias)

        def call(**kw):
            a = dict(good, **kw)
            return torch.ops.cpukern.linear_prepared(a["x"], mod.weight, mod.out_features, a["bias"])
        names = ["x", "bias"]
    else:
        good = dict(x=args[0])

        def call(**kw):
            return torch.ops.cpukern.ternary_gemv_prepared(mod.weight, kw.get("x", good["x"]),
                                                           mod.out_features, mod.act)
        names = ["x"]
    want = call()
    for name in names:
        for bad, exc, start in _bad_tensor_args(good[name]):
            if bad.dtype == good[name].dtype and bad.is_contiguous() and not bad.requires_grad \
                    and not bad.is_neg() and bad.device.type == "cpu":
                continue  # not bad for this argument (a 1-element transpose is contiguous)
            with pytest.raises(exc, match=rf"^{name}: {start}"):
                call(**{name: bad})
    assert torch.equal(call(), want)
    neg = {name: good[name]._neg_view() for name in names[:1]}
    assert torch.equal(call(**neg), call(**{k: v.resolve_neg() for k, v in neg.items()}))


@pytest.mark.parametrize("case", ["int8_layout", "foreign_variant"])
def test_prepared_op_on_a_plain_blob_packs_nothing(case):
    """The op packs nothing per call: a blob it cannot run as it is (no int8 layout for
    act="int8"; a layout of another CPU, here a header naming a variant no build has) is an
    error naming `prepared`, not an O(weights) packing on every call."""
    t, (x,) = _build("ternary")
    blob = t.weight.blob.clone()
    if case == "int8_layout":
        if ternary.from_buffer(blob.numpy()).int8_ready:
            pytest.skip("this variant's int8 kernel reads the fp32 layout")
        with pytest.raises(ValueError, match=r"^prepared: has no int8 layout"):
            torch.ops.cpukern.ternary_gemv_prepared(blob, x, 40, "int8")
        return
    blob[32:64] = 0
    blob[32:39] = torch.tensor(list(b"avx1024"), dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"^prepared: .*'avx1024'.* this CPU cannot run"):
        torch.ops.cpukern.ternary_gemv_prepared(blob, x, 40)


# --- what load_state_dict checks -------------------------------------------------------------

def _flip(byte):
    def mutate(sd, key):
        bad = sd[key].blob.clone()
        bad[byte] ^= 4
        sd[key] = bad  # a plain blob, as safetensors holds it
    return mutate


def _put(make):
    def mutate(sd, key):
        sd[key] = make()
    return mutate


# (kind of the target, key to spoil, how, the message after "0.<key>: "[, the error: ValueError])
BAD_BLOBS = {
    "checksum": ("ternary", "weight", _flip(1000), r"checksum mismatch"),
    "truncated": ("ternary", "weight", lambda sd, k: sd.__setitem__(k, sd[k].blob[:-64].clone()),
                  r"header says"),
    "not_a_blob": ("ternary", "weight", _put(lambda: torch.zeros(16, dtype=torch.uint8)),
                   r"expected a prepared-weight buffer"),
    "float_tensor": ("ternary", "weight", _put(lambda: torch.zeros(40, 64)),
                     r"expected a 1-D uint8 tensor", TypeError),
    "other_shape": ("ternary", "weight",
                    _put(lambda: TernaryLinear.from_linear(torch.nn.Linear(64, 20)).weight),
                    r"packed weights of shape \(20, 64\) \(group_size 0\) do not fit"),
    "other_groups": ("ternary", "weight", _put(lambda: TernaryLinear.from_packed(
        ternary.pack(torch.ones(40, 64, dtype=torch.int8)), 64, torch.ones(40, 2),
        group_size=32).weight), r"packed weights of shape \(40, 64\) \(group_size 32\) do not fit"),
    "other_op": ("ternary", "weight", _put(lambda: _build("widely")[0].weight.blob.clone()),
                 r"holds packed weights of op 'widely_linear'"),
    "stages": ("widely", "weight", _put(lambda: WidelyLinear.from_linear(
        torch.nn.Linear(64, 40), stages=1).weight), r"a packed layer of shape \(40, 64\) with 1 "
        r"stages does not fit"),
    "dense_format": ("dense", "weight", _put(lambda: _build("dense_int8")[0].weight),
                     r"packed as int8, this layer is bf16"),
    "dense_shape": ("dense", "weight", _put(lambda: Linear.from_linear(torch.nn.Linear(64, 8)).weight),
                    r"packed weight of shape \(1, 8, 64\) does not fit"),
    "moe_checksum": ("moe_bf16", "w2", _flip(2000), r"checksum mismatch"),
    "moe_swapped": ("moe_bf16", "w2", lambda sd, k: sd.__setitem__(k, sd["0.w13"]),
                    r"packed experts of shape \(4, 64, 64\) do not fit this layer \(4, 64, 32\)"),
    "moe_act": ("moe_mxfp4", "w13", _put(lambda: _w4a8().w13),
                r"packed as mxfp4_a8, this layer runs act='fp32'"),
    "moe_ternary": ("moe_bf16", "w2", _put(lambda: _build("ternary")[0].weight.blob.clone()),
                    r"holds packed weights of op 'ternary'"),
}


def _w4a8():
    _, w13, w2 = _sources()
    b13, s13 = moe.quantize(w13)
    b2, s2 = moe.quantize(w2)
    return FusedMoE.from_mxfp4(b13, s13, b2, s2, topk=2, act="int8")


@pytest.mark.parametrize("case", list(BAD_BLOBS))
def test_bad_blob_in_a_state_dict_names_the_key_and_replaces_nothing(case):
    kind, name, mutate, message, *exc = BAD_BLOBS[case]
    mod, args = _build(kind)
    outer = torch.nn.Sequential(mod)  # the key carries the module's prefix
    want = mod(*args)
    sd = _build(kind, seed=1)[0].state_dict()  # other weights, which a good load would take
    sd = {"0." + k: v for k, v in sd.items()}
    mutate(sd, "0." + name)
    before = {n: (t, t.blob) for n, t in packed_buffers(mod).items()}
    with pytest.raises(exc[0] if exc else ValueError, match=rf"^0\.{name}: {message}"):
        outer.load_state_dict(sd)
    for n, (t, blob) in before.items():  # every packed weight, the good ones included
        assert getattr(mod, n) is t and t.blob is blob, n
    assert torch.equal(mod(*args), want)


@pytest.mark.parametrize("kind", ["ternary", "ternary_int8", "widely", "dense", "moe_bf16",
                                  "moe_mxfp4"])
def test_plain_blobs_in_a_state_dict_load_like_safetensors(kind, tmp_path):
    """A safetensors file holds each packed weight as its plain 1-D uint8 blob: loading it
    wraps and checks the blob, and the module computes what the saved one did."""
    st = pytest.importorskip("safetensors.torch")
    mod, args = _build(kind)
    want = mod(*args)
    plain = {k: (v.blob if isinstance(v, PackedWeightsTensor) else v)
             for k, v in mod.state_dict().items()}
    st.save_file(plain, str(tmp_path / "m.safetensors"))
    loaded = st.load_file(str(tmp_path / "m.safetensors"))
    assert all(type(v) is torch.Tensor for v in loaded.values())
    target, _ = _build(kind, seed=1)
    target.load_state_dict(loaded)
    for name, t in packed_buffers(target).items():
        assert type(t) is PackedWeightsTensor and t.kind == getattr(mod, name).kind, name
        assert t.act == getattr(mod, name).act, name
    assert torch.equal(target(*args), want)


# --- weights packed for a CPU that cannot run them -------------------------------------------

_OTHER_CPU_CHILD = r"""
import json, sys
import torch
import cpukern
from cpukern.torch import FusedMoE, Linear, PackedWeightsTensor, TernaryLinear, WidelyLinear

cases = torch.load(sys.argv[1], weights_only=False)
out = {}
for case in cases:
    kind, variant = case["kind"], case["variant"]
    lin, w13, w2, args = case["lin"], case["w13"], case["w2"], case["args"]
    r = out[f"{kind}-{variant}"] = {
        "runs": [v["name"] for v in cpukern.kernels(case["op"]) if v["supported"]]}
    if kind.startswith("ternary"):
        native = TernaryLinear.from_linear(lin, act=case["act"])
    elif kind == "widely":
        native = WidelyLinear.from_linear(lin)
    elif kind == "dense":
        native = Linear.from_linear(lin)
    else:
        native = FusedMoE.from_experts(w13, w2, case["b13"], case["b2"], activation="swigluoai")
    want = native(*args)
    for how in ("plain", "saved"):
        res = r[how] = {}
        try:
            if how == "plain":
                sd = case["plain"]
            else:
                sd = torch.load(case["saved"], weights_only=False)
        except ValueError as e:
            res["load_error"] = str(e)
            continue
        base = kind.split("_")[0]
        target = {"ternary": lambda: TernaryLinear(64, 40, act=case["act"]),
                  "widely": lambda: WidelyLinear(64, 40),
                  "dense": lambda: Linear(64, 40),
                  "moe": lambda: FusedMoE(4, 64, 32, activation="swigluoai", bias=True)}[base]()
        if base in ("dense", "moe"):  # refused: the target keeps what it held
            target.load_state_dict(native.state_dict())
        blobs = [b.blob for b in target.buffers() if isinstance(b, PackedWeightsTensor)]
        try:
            target.load_state_dict(sd)
        except ValueError as e:
            res["error"] = str(e)
            packed = [b for b in target.buffers() if isinstance(b, PackedWeightsTensor)]
            res["unchanged"] = (len(packed) == len(blobs)
                                and all(b.blob is old for b, old in zip(packed, blobs))
                                and (all(b.is_empty for b in packed) if base in ("ternary", "widely")
                                     else torch.equal(target(*args), want)))
            continue
        w = target.weight.weights
        again = cpukern.from_buffer(target.weight.blob)  # what the blob (and a save) holds now
        res.update(variant=w.variant, view=bool(w.is_view), blob_variant=again.variant,
                   equal=bool(torch.equal(target(*args), want)))
print(json.dumps(out))
"""

OTHER_CPU_KINDS = ["ternary", "ternary_int8", "widely", "dense", "moe_bf16"]


@pytest.fixture(scope="module")
def other_cpu(tmp_path_factory):
    """Modules packed here for every variant that needs a CPU feature, loaded in a Python that
    hides all those features (CPUKERN_DISABLE_FEATURES), so that only the portable variants
    run there: {"<kind>-<variant>": what the load did}."""
    if UNDER_QEMU:
        pytest.skip("qemu-user cannot start a guest subprocess")
    tmp = tmp_path_factory.mktemp("other_cpu")
    hide = sorted({f for op in set(KIND_OP.values()) for v in cpukern.kernels(op)
                   for f in v["requires"]})
    cases = []
    for kind in OTHER_CPU_KINDS:
        op = KIND_OP[kind]
        for v in cpukern.kernels(op):
            if not v["supported"] or not v["requires"]:
                continue
            mod, args = _build(kind, v["name"])
            lin, w13, w2 = _sources()
            saved = tmp / f"{kind}-{v['name']}.pt"
            torch.save(mod.state_dict(), saved)
            plain = {k: (t.blob.clone() if isinstance(t, PackedWeightsTensor) else t)
                     for k, t in mod.state_dict().items()}
            b13, b2 = (getattr(mod, "w13_bias", None), getattr(mod, "w2_bias", None))
            cases.append({"kind": kind, "variant": v["name"], "op": op, "lin": lin, "w13": w13,
                          "w2": w2, "b13": b13, "b2": b2, "args": args, "plain": plain,
                          "saved": str(saved), "act": getattr(mod, "act", "fp32")})
    path = tmp / "cases.pt"
    torch.save(cases, path)
    env = dict(os.environ, CPUKERN_DISABLE_FEATURES=",".join(hide))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_OTHER_CPU_CHILD), str(path)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _other_cpu_result(other_cpu, kind, variant):
    r = other_cpu[f"{kind}-{variant}"]
    assert variant not in r["runs"], f"{variant} still runs with every feature hidden"
    return r


def _packed_again(res, runs):
    assert "error" not in res and "load_error" not in res, res
    assert res["variant"] in runs, res  # packed again for that CPU
    # one copy: the new packing is the module's blob (the other CPU's bytes are dropped)
    assert res["view"] and res["blob_variant"] == res["variant"], res
    assert res["equal"], res  # bitwise what that CPU packs from the float weights


@pytest.mark.parametrize("kind,variant", kind_variant_params(["ternary", "ternary_int8"],
                                                         skip_portable=True))
def test_ternary_weights_of_another_cpu_are_packed_again_on_load(other_cpu, kind, variant):
    r = _other_cpu_result(other_cpu, kind, variant)
    for how in ("plain", "saved"):  # a safetensors-like blob, and torch.save's tensor
        _packed_again(r[how], r["runs"])


@pytest.mark.parametrize("kind,variant", kind_variant_params(["widely"], skip_portable=True))
def test_widely_linear_weights_of_another_cpu_are_packed_again_or_refused(other_cpu, kind, variant):
    """Only the public layout (t2p16x4) can be unpacked and packed again; the others are
    refused naming the key, and the module keeps what it held."""
    r = _other_cpu_result(other_cpu, kind, variant)
    layout = bytes(_build(kind, variant)[0].weight.blob[160:192].tolist()).rstrip(b"\0")
    if layout == b"t2p16x4":
        _packed_again(r["plain"], r["runs"])
        return
    res = r["plain"]
    assert res.get("error", "").startswith("weight: packed for a variant this CPU cannot run"), res
    assert res["unchanged"], res


@pytest.mark.parametrize("kind,variant", kind_variant_params(["dense", "moe_bf16"], skip_portable=True))
def test_dense_and_moe_weights_of_another_cpu_are_refused_naming_the_key(other_cpu, kind, variant):
    """MoE and dense packings cannot be unpacked: a load names the key and replaces nothing."""
    r = _other_cpu_result(other_cpu, kind, variant)
    key = "weight" if kind == "dense" else "w13"
    res = r["plain"]
    assert res.get("error", "").startswith(f"{key}: packed for a variant this CPU cannot run"), res
    assert res["unchanged"], res
    # torch.save's PackedWeightsTensor is checked when torch.load rebuilds it
    res = r["saved"]
    assert "cannot run" in res.get("load_error", res.get("error", "")), res
    assert res.get("unchanged", True), res


# --- vLLM ------------------------------------------------------------------------------------

def _replace_parameter(mod, name):
    """vLLM's replace_parameter: a new Parameter object over the same data."""
    old = getattr(mod, name)
    delattr(mod, name)
    mod.register_parameter(name, torch.nn.Parameter(old.detach(), requires_grad=False))
    return old


@pytest.mark.parametrize("kind", list(KIND_OP))
def test_vllm_replace_parameter_keeps_the_packed_weights(kind, monkeypatch, dynamo):
    mod, args = _build(kind)
    want = mod(*args)
    other = _build(kind, seed=1)[0]
    counter = PackCounter(monkeypatch)
    for name in list(mod._PACKED):
        old = _replace_parameter(mod, name)
        new = getattr(mod, name)
        assert isinstance(new, PackedWeightsTensor) and isinstance(new, torch.nn.Parameter)
        assert new is not old and new.blob is old.blob and new.weights is old.weights
    assert torch.equal(mod(*args), want)
    assert counter.calls == []
    assert torch.equal(torch.compile(mod, fullgraph=True, backend="aot_eager")(*args), want)
    fresh = other
    fresh.load_state_dict(mod.state_dict())  # parameters or buffers: the same state_dict
    assert torch.equal(fresh(*args), want)
    other2 = _build(kind, seed=2)[0]
    mod.load_state_dict(other2.state_dict())  # and a Parameter takes a later load
    assert torch.equal(mod(*args), other2(*args)) and not torch.equal(mod(*args), want)


def test_vllm_order_prepared_moe_op_runs_prepacked_and_module_experts(monkeypatch):
    from cpukern.torch import vllm

    _, w13, w2 = _sources()
    mod = FusedMoE.from_experts(w13, w2, activation="swigluoai")
    x, logits = _build("moe_bf16")[1]
    tw, ids = mod.route(logits)
    want = mod.experts(x, tw, ids)
    p13, p2 = vllm.prepack_moe_tensor(w13), vllm.prepack_moe_tensor(w2)
    counter = PackCounter(monkeypatch)
    for a, b in ((p13, p2), (mod.w13, mod.w2)):  # plain blobs, and the module's packed tensors
        out = torch.empty_like(x)
        torch.ops.cpukern.cpu_fused_moe_prepared(out, x, a, b, None, None, tw, ids, False,
                                                 "swigluoai")
        assert torch.equal(out, want)
    assert counter.calls == [] and ct.cache_info()["misses"] == 0


def test_packed_experts_buffer_fuzz_raises_or_returns():
    """Flipped header / payload bytes and one-byte-value payloads (MXFP4 nibbles and scale
    bytes 255 included): import and fused_moe raise ValueError or return."""
    rng = torch.Generator().manual_seed(3)
    for kind in ("moe_bf16", "moe_mxfp4"):
        mod, (x, logits) = _build(kind)
        tw, ids = mod.route(logits)
        outcomes = set()
        for trial in range(40):
            w13 = mod.w13.blob.clone()
            if trial < 4:
                w13[448:] = (0xFF, 0x00, 0x7F, 0x88)[trial]
            else:
                n = int(torch.randint(1, 5, (1,), generator=rng))
                hi = 448 if trial % 2 else w13.numel()
                at = torch.randint(0, hi, (n,), generator=rng)
                w13[at] ^= (1 << torch.randint(0, 8, (n,), generator=rng)).to(torch.uint8)
            try:
                p13 = moe.from_buffer(w13)
                p2 = moe.from_buffer(mod.w2.blob)
                if p13.shape[1] != 2 * mod.intermediate or p13.shape[2] != mod.hidden:
                    raise ValueError("shape")
                moe.fused_moe(x, p13, p2, tw, ids, activation=mod.activation)
                outcomes.add("ran")
            except ValueError:
                outcomes.add("raised")
        assert outcomes == {"ran", "raised"}, (kind, outcomes)
