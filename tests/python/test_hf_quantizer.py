"""The cpukern transformers quantizer (``AutoModelForCausalLM.from_pretrained(path,
quantization_config=CpukernConfig())``) on tiny random checkpoints against stock transformers,
on every variant this CPU runs; and the cases a hostile user tried against the hand-written
loader it replaced: a stored lm_head beside tie_word_embeddings, expert ids past int32, options
and modules checked before anything is swapped, misshaped tensors, bad config.json values,
lossy packing only when asked for."""

import copy
import json
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'cpukern[torch]')")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install 'cpukern[hf]')")

import cpukern  # noqa: E402
import cpukern.torch as ct  # noqa: E402
from cpukern import moe  # noqa: E402
from cpukern.torch import CpukernConfig  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from test_hf_models import (BOUND, PROMPT, _common, check_against_stock, decode,  # noqa: E402
                             gpt_oss_checkpoint, packed_only, stock, dense_packed, cpukern_layers)
# test_hf_models' fixtures: its checkpoints, and eager torch on one thread (autouse)
from test_hf_models import checkpoints, eager_one_thread  # noqa: E402,F401
from variants import variant_params  # noqa: E402


def load(path, **options):
    return transformers.AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, quantization_config=CpukernConfig(**options))


def gpt_oss_bf16_checkpoint(path, seed=0, exact_mxfp4=False, **config):
    """A bf16 gpt-oss checkpoint (no quantization config) as save_pretrained writes it; with
    exact_mxfp4 the experts hold values MXFP4 represents exactly. config: further
    GptOssConfig fields (swiglu_limit=...)."""
    torch.manual_seed(seed)
    cfg = transformers.GptOssConfig(**_common(intermediate_size=64, num_local_experts=4,
                                              num_experts_per_tok=2, sliding_window=4),
                                    dtype="bfloat16", **config)
    model = transformers.GptOssForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "bias" in name or "sinks" in name:
                p.mul_(0.5).add_(0.1)
            if exact_mxfp4 and name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                w = p.transpose(1, 2).contiguous()  # blocks run along the input dimension
                p.copy_(torch.as_tensor(moe.dequantize(*moe.quantize(w))).transpose(1, 2))
    model.save_pretrained(path)


@pytest.fixture(scope="module")
def bf16_gpt_oss(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt_oss_bf16")
    out = {}
    for exact in (False, True):
        gpt_oss_bf16_checkpoint(str(root / str(exact)), exact_mxfp4=exact)
        out[exact] = str(root / str(exact))
    return out


def _cases(kind, op):
    return [pytest.param(kind, v.values[0], id=f"{kind}-{v.id}", marks=v.marks)
            for v in variant_params(op)]


QUANTIZER_CASES = _cases("qwen3_moe", "fused_moe") + _cases("gpt_oss_bf16", "fused_moe")


@pytest.mark.parametrize("kind,variant", QUANTIZER_CASES)
def test_quantizer_matches_stock(checkpoints, bf16_gpt_oss, kind, variant):
    """Checkpoints without a quantization config of their own, loaded by transformers'
    from_pretrained with CpukernConfig: experts and dense layers on cpukern, logits within
    the bound of test_hf_models against stock transformers."""
    path = checkpoints["qwen3_moe"] if kind == "qwen3_moe" else bf16_gpt_oss[False]
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    model = load(path, variant=variant)
    n = ref.config.num_hidden_layers
    # experts and router, 4 attention projections a layer, the LM head
    assert len(model.cpukern_report.replaced) == 2 * n + 4 * n + 1, str(model.cpukern_report)
    # the experts hold only packed weights: no bf16 expert tensor is left anywhere in them
    experts = model.model.layers[0].mlp.experts
    assert isinstance(experts.moe.w13, ct.PackedWeightsTensor) and packed_only(experts.moe)
    assert not [k for k, v in experts.state_dict().items()
                if v.is_floating_point() and not k.endswith("bias")]
    assert dense_packed(model.lm_head)
    if kind == "gpt_oss_bf16":  # random bf16 experts stay bf16 by default
        assert "kept bf16" in str(model.cpukern_report)
    # inference only: no parameter requires grad, so a plain call needs no torch.no_grad()
    assert model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape[-1] == ref.config.vocab_size
    check_against_stock(kind, ref, model, BOUND[("qwen3_moe", "bf16")])


# --- save_pretrained / reload --------------------------------------------------------------

def _loaded(checkpoints, kind, **options):
    if kind == "qwen3_moe":
        return load(checkpoints[kind], **options)
    return ct.from_pretrained(checkpoints[kind], **options)  # stored with their own configs


def _packed_tensors(model):
    return {k: v for k, v in model.state_dict().items() if isinstance(v, ct.PackedWeightsTensor)}


@pytest.mark.parametrize("kind", ["bitnet", "gpt_oss", "qwen3_moe"])
def test_save_and_reload_bitwise(checkpoints, tmp_path, kind):
    """save_pretrained writes the packed weights and the quantization_config; loading it back
    (transformers' own from_pretrained, no option given) packs nothing again: the same bytes,
    the same logits, bit for bit."""
    model = _loaded(checkpoints, kind)
    logits, _, states = decode(model, steps=4, hidden=True)
    model.save_pretrained(str(tmp_path / "saved"))
    saved = json.load(open(tmp_path / "saved" / "config.json"))["quantization_config"]
    assert saved["quant_method"] == "cpukern" and saved["prepared_modules"]
    again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "saved"))
    assert all(w == "loaded prepared" for _, _, w in again.cpukern_report.replaced)
    # cpukern.torch.from_pretrained loads it the same way
    wrapped = ct.from_pretrained(str(tmp_path / "saved"))
    # A LM head left to torch (BitNet's fp32 one) is compared on its inputs only: torch's fp32
    # GEMV rounds differently with the weight's address (the same weights 24 and 0 bytes past a
    # 64-byte boundary gave different last bits).
    torch_head = not dense_packed(model.lm_head)
    logits_wrapped, _, states_wrapped = decode(wrapped, steps=1, hidden=True)
    assert torch.equal(states_wrapped, states[:2])
    assert torch_head or torch.equal(logits_wrapped, logits[:2])
    with pytest.raises(ValueError, match="^format"):
        ct.from_pretrained(str(tmp_path / "saved"), format="bf16")
    assert len(again.cpukern_report.replaced) == len(model.cpukern_report.replaced)
    before, after = _packed_tensors(model), _packed_tensors(again)
    assert before and before.keys() == after.keys()
    assert all(torch.equal(before[k].blob, after[k].blob) for k in before)
    assert all(packed_only(m) for m in cpukern_layers(again))
    assert cpukern_layers(again) and torch_head == (type(again.lm_head.weight) is not ct.PackedWeightsTensor)
    logits_again, _, states_again = decode(again, steps=4, hidden=True)
    assert torch.equal(states_again, states)
    assert torch_head or torch.equal(logits_again, logits)


_RELOAD = textwrap.dedent("""
    import sys
    import torch, transformers
    torch.set_num_threads(1)
    torch._dynamo.config.disable = True  # stock BitLinear's quantiser: eager
    from cpukern.torch import CpukernConfig  # noqa: F401 - registers the quantizer
    from test_hf_models import BOUND, check_against_stock, stock
    bitnet, saved = sys.argv[1:]
    model = transformers.AutoModelForCausalLM.from_pretrained(saved + "/bitnet")
    q = model.model.layers[0].self_attn.q_proj.weight
    print("TERNARY", q.weights.variant)
    check_against_stock("bitnet", stock(bitnet), model, BOUND[("bitnet", "int8_bitnet")])
    try:
        transformers.AutoModelForCausalLM.from_pretrained(saved + "/qwen3_moe")
    except ValueError as e:
        print("REFUSED", e)
""")


def test_reload_for_another_variant(checkpoints, tmp_path):
    """Packed weights saved here, loaded where their variant does not run (a subprocess with
    its CPU features hidden by CPUKERN_DISABLE_FEATURES): ternary layers are packed again from
    their own layout and stay within the bound; MoE and dense packings cannot be unpacked, so
    loading refuses them with a ValueError naming the tensor (never run wrong)."""
    hide = sorted({f for op in ("ternary_gemv", "fused_moe", "linear")
                   for v in cpukern.kernels(op) if v["selected"] for f in v["requires"]})
    if not hide:
        pytest.skip("the reference variants are selected here: no variant to hide")
    saved = tmp_path / "saved"
    bitnet = _loaded(checkpoints, "bitnet")
    bitnet.save_pretrained(str(saved / "bitnet"))
    variant = bitnet.model.layers[0].self_attn.q_proj.weight.weights.variant
    qwen = _loaded(checkpoints, "qwen3_moe")
    qwen.save_pretrained(str(saved / "qwen3_moe"))
    env = dict(os.environ, CPUKERN_DISABLE_FEATURES=",".join(hide),
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    out = subprocess.run([sys.executable, "-c", _RELOAD, checkpoints["bitnet"], str(saved)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["TERNARY"] not in (variant, ""), out.stdout  # packed again for another variant
    refused = re.match(r"(\S+): packed for a variant this CPU cannot run", lines.get("REFUSED", ""))
    assert refused and refused.group(1) in _packed_tensors(qwen), out.stdout + out.stderr


def test_reload_refuses_a_corrupted_blob(checkpoints, tmp_path):
    model = _loaded(checkpoints, "qwen3_moe")
    model.save_pretrained(str(tmp_path / "saved"))
    path = str(tmp_path / "saved" / "model.safetensors")
    sd = load_file(path)
    key = "model.layers.1.mlp.experts.moe.w2"
    sd[key][-1] ^= 0x5A  # one payload byte: the checksum differs
    save_file(sd, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=key):
        transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "saved"))


def test_quantizer_needs_its_config_alone(checkpoints):
    """A checkpoint stored with another quantizer's config: transformers refuses a second one;
    cpukern.torch.from_pretrained passes the stored one on and packs the stored MXFP4 blocks."""
    with pytest.raises(ValueError, match="BitNetQuantConfig"):
        load(checkpoints["bitnet"])
    model = ct.from_pretrained(checkpoints["gpt_oss"])
    assert model.config.quantization_config.checkpoint_quantization["quant_method"] == "mxfp4"
    experts = model.model.layers[0].mlp.experts.moe
    assert experts.w13.weights.format == "mxfp4" and packed_only(experts)


# --- lossy packing only when asked for ----------------------------------------------------

def test_bf16_gpt_oss_stays_bf16_unless_asked(bf16_gpt_oss):
    ref = transformers.AutoModelForCausalLM.from_pretrained(bf16_gpt_oss[False]).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no lossy choice made: no warning
        report = ct.patch(copy.deepcopy(ref))
    experts = [w for n, _, w in report.replaced if n.endswith("experts")]
    assert experts and all("FusedMoE bf16" in w for w in experts), str(report)
    with pytest.warns(UserWarning, match="rounded to MXFP4"):
        lossy = ct.patch(copy.deepcopy(ref), format="mxfp4")
    assert all("FusedMoE mxfp4" in w for n, _, w in lossy.replaced if n.endswith("experts"))
    # Exactly-MXFP4 bf16 experts are packed without loss, and the report says so.
    exact = transformers.AutoModelForCausalLM.from_pretrained(bf16_gpt_oss[True]).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = copy.deepcopy(exact)
        report = ct.patch(model)
    assert "exactly MXFP4" in str(report)
    assert model.model.layers[0].mlp.experts.moe.w13.weights.format == "mxfp4"
    check_against_stock("gpt_oss", exact, model, BOUND[("gpt_oss", "mxfp4")])


# --- swiglu constants cpukern's kernel does not compute ----------------------------------

def _experts_match(model, ref, limit):
    """Every layer's experts are transformers' GptOssExperts with ref's weights and limit, and
    compute what ref's do, bit for bit, on inputs large enough for the limit to clamp."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    torch.manual_seed(3)
    x = torch.randn(6, ref.config.hidden_size).to(torch.bfloat16) * 300
    ids = torch.randint(0, ref.config.num_local_experts, (6, 2))
    weights = torch.full((6, 2), 0.5, dtype=torch.bfloat16)
    for i in range(ref.config.num_hidden_layers):
        got, want = model.model.layers[i].mlp.experts, ref.model.layers[i].mlp.experts
        assert type(got) is GptOssExperts and got.limit == limit == want.limit
        for p in ("gate_up_proj", "down_proj", "gate_up_proj_bias", "down_proj_bias"):
            assert torch.equal(getattr(got, p), getattr(want, p)), p
        y = got(x, ids, weights)
        assert torch.equal(y, want(x, ids, weights))
        default = copy.deepcopy(want)
        default.limit = 7.0
        assert not torch.equal(y, default(x, ids, weights)), "the limit should clamp here"


def _left_for_swiglu(report, n, limit):
    left = [why for name, _, why in report.left if name.endswith("mlp.experts")]
    assert len(left) == n and all(f"swiglu_limit={limit}" in why for why in left), str(report)
    return left


def test_gpt_oss_mxfp4_other_swiglu_limit(tmp_path):
    """An MXFP4 checkpoint whose swiglu_limit cpukern's kernel does not compute: its experts
    run as transformers' own GptOssExperts on the dequantised weights (what stock transformers
    computes), with a warning and the reason in the report; the rest is cpukern's. Saved and
    loaded again, it stays so."""
    path = str(tmp_path / "limit3")
    gpt_oss_checkpoint(path, swiglu_limit=3.0)
    ref = stock(path)
    with pytest.warns(UserWarning, match=r"swiglu_limit=3\.0.*dequantised to bf16"):
        model = ct.from_pretrained(path)
    n = ref.config.num_hidden_layers
    assert all("dequantised" in why for why in _left_for_swiglu(model.cpukern_report, n, 3.0))
    assert dense_packed(model.lm_head)
    _experts_match(model, ref, 3.0)
    check_against_stock("gpt_oss", ref, model, BOUND[("gpt_oss", "mxfp4")])
    with pytest.warns(UserWarning, match=r"swiglu_limit=3\.0"):
        in_torch = ct.from_pretrained(path, dense=None)  # every layer transformers' own
    with torch.no_grad():  # the prompt (no one-token attention): stock's logits, bit for bit
        ids = torch.tensor([PROMPT])
        assert torch.equal(in_torch(input_ids=ids).logits, ref(input_ids=ids).logits)
    logits = decode(model, steps=2)[0]
    model.save_pretrained(str(tmp_path / "saved"))
    again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "saved"))
    _experts_match(again, ref, 3.0)
    assert torch.equal(decode(again, steps=2)[0], logits)


@pytest.mark.parametrize("drop", ["down_proj_blocks", "gate_up_proj_scales", "down_proj_bias"])
def test_gpt_oss_mxfp4_checkpoint_missing_an_expert_tensor_is_refused(tmp_path, drop):
    """An MXFP4 checkpoint without one of its experts' tensors is a ValueError naming it, at
    load: the experts would otherwise run on uninitialised memory (transformers only notes the
    tensor as newly initialised, and its initialiser does not know the load-time module)."""
    path = str(tmp_path / "missing")
    gpt_oss_checkpoint(path)
    file = os.path.join(path, "model.safetensors")
    sd = load_file(file)
    key = next(k for k in sd if k.endswith("experts." + drop))
    del sd[key]
    save_file(sd, file, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=rf"stores no tensor '{key}'"):
        ct.from_pretrained(path)


def test_gpt_oss_bf16_other_swiglu_limit(tmp_path):
    """bf16 experts with a swiglu_limit cpukern does not compute stay transformers' own (patch
    and the quantizer), with the reason in the report."""
    path = str(tmp_path / "limit3")
    gpt_oss_bf16_checkpoint(path, swiglu_limit=3.0)
    ref = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    n = ref.config.num_hidden_layers
    patched = copy.deepcopy(ref)
    _left_for_swiglu(ct.patch(patched), n, 3.0)
    model = load(path)
    _left_for_swiglu(model.cpukern_report, n, 3.0)
    for m in (patched, model):
        _experts_match(m, ref, 3.0)
        check_against_stock("gpt_oss", ref, m, BOUND[("gpt_oss", "mxfp4")])


def test_lossy_options_warn(checkpoints):
    with pytest.warns(UserWarning, match="int8"):
        ct.from_pretrained(checkpoints["qwen3_moe"], format="int8")
    with pytest.warns(UserWarning, match="W8A8"):
        ct.from_pretrained(checkpoints["qwen3_moe"], dense="int8")
    with pytest.warns(UserWarning, match="mxfp4_a8"):
        ct.from_pretrained(checkpoints["gpt_oss"], format="mxfp4_a8")


# --- the stored lm_head --------------------------------------------------------------------

def _tied_copy(src, path):
    """A copy of checkpoint src in path whose config.json says tie_word_embeddings; returns
    its tensors (to change and save back)."""
    shutil.copytree(src, path)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg["tie_word_embeddings"] = True
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return load_file(os.path.join(path, "model.safetensors"))

def test_stored_lm_head_is_used(checkpoints, tmp_path):
    """config.json says tie_word_embeddings, the checkpoint stores its own, different
    lm_head: stock transformers keeps the stored head, and so does cpukern."""
    path = str(tmp_path / "untied")
    sd = _tied_copy(checkpoints["qwen3_moe"], path)
    sd["lm_head.weight"] = torch.randn_like(sd["lm_head.weight"].float()).to(torch.bfloat16) * 0.3
    save_file(sd, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    assert torch.equal(ref.lm_head.weight, sd["lm_head.weight"])  # stock keeps the stored head
    for model in (load(path), ct.from_pretrained(path)):
        check_against_stock("qwen3_moe", ref, model, BOUND[("qwen3_moe", "bf16")])


# --- expert ids ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [2**32 + 1, -1, 4, 2**63 - 1])
def test_expert_ids_are_range_checked(bad):
    """MoEExperts (the HF experts stand-in) refuses ids outside [0, E) in any integer dtype
    before narrowing them to int32 (2**32 + 1 would otherwise run expert 1)."""
    torch.manual_seed(0)
    w13 = torch.randn(4, 64, 32).to(torch.bfloat16)
    w2 = torch.randn(4, 32, 32).to(torch.bfloat16)
    experts = ct.hf.MoEExperts(ct.FusedMoE.from_experts(w13, w2, topk=2))
    x, weights = torch.randn(3, 32), torch.full((3, 2), 0.5)
    ids = torch.tensor([[0, 1], [2, 3], [1, 2]])
    good = experts(x, ids, weights)
    ids[1, 0] = bad
    with pytest.raises(ValueError, match=r"expert ids must be in \[0, 4\)"):
        experts(x, ids, weights)
    compiled = torch.compile(experts, backend="aot_eager", fullgraph=True)
    with torch._dynamo.config.patch(disable=False), \
            pytest.raises(ValueError, match=r"expert ids must be in \[0, 4\)"):
        compiled(x, ids, weights)
    with pytest.raises(TypeError, match="^top_k_index"):
        experts(x, ids.float(), weights)
    int32_ids = torch.tensor([[0, 1], [2, 3], [1, 2]], dtype=torch.int32)
    assert torch.equal(experts(x, int32_ids, weights), good)


# --- patch: all or nothing -----------------------------------------------------------------

def _classes(model):
    return [type(m) for m in model.modules()]


@pytest.mark.parametrize("kind", ["bitnet", "qwen3_moe", "gpt_oss"])
def test_patch_checks_everything_before_swapping(checkpoints, kind):
    ref = stock(checkpoints[kind])
    model = copy.deepcopy(ref)
    before = _classes(model)
    with pytest.raises(ValueError, match="^variant: 'no_such_variant'"):
        ct.patch(model, variant="no_such_variant")
    with pytest.raises(TypeError, match="^variant"):
        ct.patch(model, variant=3)
    with pytest.raises(ValueError, match="^dense"):
        ct.patch(model, dense="fp8")
    with pytest.raises(ValueError, match="^format"):
        ct.patch(model, format="int4")
    with pytest.raises(ValueError, match="^threads"):
        ct.patch(model, threads=-1)
    assert _classes(model) == before
    if kind == "bitnet":  # a bad module late in the model: nothing before it was swapped either
        model.model.layers[-1].mlp.down_proj.weight_scale.fill_(0.0)
        threads_were_set = cpukern.num_threads_is_set()
        with pytest.raises(ValueError, match="layers.1.mlp.down_proj.weight_scale"):
            ct.patch(model, threads=3)
        assert _classes(model) == before
        assert cpukern.num_threads_is_set() == threads_were_set  # nothing set either


def test_unknown_variant_refused_for_bf16_bitnet():
    """A bf16 BitNet without a quantization config (only dense layers for cpukern) refuses an
    variant no op has, instead of running its dense layers on automatic selection."""
    cfg = transformers.BitNetConfig(**_common(intermediate_size=96))
    model = transformers.BitNetForCausalLM(cfg).to(torch.bfloat16)
    before = _classes(model)
    with pytest.raises(ValueError, match="^variant"):
        ct.patch(model, variant="avx9000")
    assert _classes(model) == before


# --- checkpoints stock transformers refuses ------------------------------------------------

def _edited(src, dst, config=None, tensors=None):
    shutil.copytree(src, dst)
    if config:
        with open(os.path.join(dst, "config.json")) as f:
            cfg = json.load(f)
        config(cfg)
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(cfg, f)
    if tensors:
        sd = load_file(os.path.join(dst, "model.safetensors"))
        tensors(sd)
        save_file(sd, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst


def _extra_packed_row(sd):
    k = "model.layers.0.self_attn.q_proj.weight"
    sd[k] = torch.cat([sd[k], sd[k][:1]])


def _per_row_scale(sd):
    k = "model.layers.0.self_attn.q_proj.weight_scale"
    sd[k] = sd[k].repeat(64)


def _int32_norm(sd):
    sd["model.norm.weight"] = sd["model.norm.weight"].to(torch.int32)


def _bool_weight(sd):
    k = "model.layers.0.self_attn.q_proj.weight"
    sd[k] = sd[k] > 0


def _wider_expert(sd):
    k = "model.layers.1.mlp.experts.3.up_proj.weight"
    sd[k] = torch.zeros(sd[k].shape[0] + 8, sd[k].shape[1], dtype=sd[k].dtype)


def _float_blocks(sd):
    k = "model.layers.0.mlp.experts.down_proj_blocks"
    sd[k] = sd[k].float()


MISSHAPED = [
    ("bitnet", _extra_packed_row, "model.layers.0.self_attn.q_proj.weight"),
    ("bitnet", _per_row_scale, "model.layers.0.self_attn.q_proj.weight_scale"),
    ("bitnet", _int32_norm, "model.norm.weight"),
    ("qwen3_moe", _bool_weight, "model.layers.0.self_attn.q_proj.weight"),
    ("qwen3_moe", _int32_norm, "model.norm.weight"),
    ("qwen3_moe", _wider_expert, "model.layers.1.mlp.experts.3.up_proj.weight"),
    ("gpt_oss", _float_blocks, "model.layers.0.mlp.experts.down_proj_blocks"),
]


@pytest.mark.parametrize("kind,edit,tensor", MISSHAPED,
                         ids=[f"{k}-{e.__name__[1:]}" for k, e, _ in MISSHAPED])
def test_misshaped_tensors_refused(checkpoints, tmp_path, kind, edit, tensor):
    path = _edited(checkpoints[kind], str(tmp_path / "bad"), tensors=edit)
    with pytest.raises(ValueError, match=f"model.safetensors: tensor '{tensor}'"):
        ct.from_pretrained(path)
    if kind == "qwen3_moe":
        with pytest.raises(ValueError, match=f"model.safetensors: tensor '{tensor}'"):
            load(path)


BAD_CONFIGS = [
    ("list", lambda c: c.update(hidden_size=[64]), "hidden_size"),
    ("string", lambda c: c.update(hidden_size="64"), "hidden_size"),
    ("negative", lambda c: c.update(moe_intermediate_size=-5), "moe_intermediate_size"),
    ("float", lambda c: c.update(num_experts=8.5), "num_experts"),
    ("layers", lambda c: c.update(num_hidden_layers=100000), "num_hidden_layers"),
    ("model_type", lambda c: c.update(model_type="llama"), "model_type"),
]


@pytest.mark.parametrize("edit,field", [pytest.param(e, f, id=i) for i, e, f in BAD_CONFIGS])
def test_bad_config_refused(checkpoints, tmp_path, edit, field):
    """ValueError naming the field, before a model of that shape is built (100,000 layers
    over a 2-layer checkpoint are refused from the checkpoint's header)."""
    path = _edited(checkpoints["qwen3_moe"], str(tmp_path / "bad"), config=edit)
    with pytest.raises(ValueError, match=field):
        ct.from_pretrained(path)


def test_deeply_nested_config_refused(checkpoints, tmp_path):
    path = _edited(checkpoints["qwen3_moe"], str(tmp_path / "bad"))
    with open(os.path.join(path, "config.json")) as f:
        text = f.read().rstrip()
    with open(os.path.join(path, "config.json"), "w") as f:
        f.write(text[:-1] + ', "x": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(ValueError, match="config.json"):
        ct.from_pretrained(path)


def test_config_options_checked():
    with pytest.raises(TypeError, match="^format"):
        CpukernConfig(format=4)
    assert CpukernConfig.from_dict(CpukernConfig(format="int8").to_dict()).format == "int8"
    # The forced registry row is `variant` (issue 46), also in the saved quantization_config;
    # the old name isa is refused, never swallowed by **kwargs.
    saved = CpukernConfig(variant="reference").to_dict()
    assert saved["variant"] == "reference" and "isa" not in saved, saved
    assert CpukernConfig.from_dict(saved).variant == "reference"
    with pytest.raises(TypeError, match="'isa'.*'variant'"):
        CpukernConfig(isa="reference")
    with pytest.raises(TypeError, match="isa"):
        ct.from_pretrained("no_such_dir", isa="reference")


# --- the checkpoint's mapped pages -----------------------------------------------------------

def _need_pagemap():
    """Skips (with the reason) where /proc/self/pagemap cannot be read."""
    if not sys.platform.startswith("linux"):
        pytest.skip(f"resident pages are read from Linux's /proc/self/pagemap ({sys.platform})")
    try:
        with open("/proc/self/pagemap", "rb", buffering=0) as f:
            f.read(8)
    except OSError as e:
        pytest.skip(f"/proc/self/pagemap is not readable here ({e})")


def _resident_pages(lo, hi):
    """Whether each page of [lo, hi) (page-aligned addresses) is mapped into this process
    (/proc/self/pagemap's present bit)."""
    with open("/proc/self/pagemap", "rb", buffering=0) as f:
        f.seek(lo // mmap.PAGESIZE * 8)
        flags = np.frombuffer(f.read((hi - lo) // mmap.PAGESIZE * 8), dtype=np.uint64)
    return (flags >> np.uint64(63)) != 0


# A read fault on a file mapping also maps the pages around it that the page cache holds, in
# the aligned window of fault_around_bytes (64 KiB by default) around the fault: reading a small
# tensor stored next to a dropped one maps some of the dropped one's pages back, cheaply. The
# tests look at the pages further than that from a tensor's ends.
_FAULT_AROUND = 64 << 10


def _inner_pages(path, which):
    """name -> (lo, hi): the pages of each stored tensor for whose name which(name) is true, in
    the aligned windows of _FAULT_AROUND that hold neither end (tensors with none left out), at
    the addresses of this process's one mapping of the safetensors file."""
    maps = [line.split() for line in open("/proc/self/maps")]
    found = [m for m in maps if len(m) >= 6 and m[5] == os.path.realpath(path)]
    assert len(found) == 1, f"expected one mapping of {path}, found {len(found)}"
    start, offset = int(found[0][0].split("-")[0], 16), int(found[0][2], 16)
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    out = {}
    for name, v in header.items():
        if name != "__metadata__" and which(name):
            a, b = (start - offset + 8 + n + o for o in v["data_offsets"])
            lo = (a + _FAULT_AROUND) // _FAULT_AROUND * _FAULT_AROUND
            hi = (b - _FAULT_AROUND) // _FAULT_AROUND * _FAULT_AROUND
            if hi > lo:
                out[name] = (lo, hi)
    assert out, "no inner page to look at"
    return out


@pytest.mark.parametrize("kind", ["gpt_oss", "qwen3_moe"])
def test_checkpoint_pages_dropped_once_copied(tmp_path, kind):
    """Loading through the quantizer leaves the pages of the experts' checkpoint tensors
    unmapped in the process once they are copied (gpt-oss: MXFP4 blocks packed into cpukern's
    layout; Qwen3-MoE: per-expert weights merged by transformers' converter), so RSS holds one
    copy of the weights, not the copy plus the file; the mapping itself stays (the embedding
    still reads from it). Experts of 256 KiB per tensor (gpt-oss gate_up: 512 KiB)."""
    _need_pagemap()
    path = str(tmp_path / kind)
    if kind == "gpt_oss":
        gpt_oss_checkpoint(path, intermediate_size=1024)
        model = ct.from_pretrained(path)
        which = lambda name: name.endswith("_blocks")  # noqa: E731
    else:
        torch.manual_seed(0)
        cfg = transformers.Qwen3MoeConfig(**_common(
            intermediate_size=96, moe_intermediate_size=2048, num_experts=4,
            num_experts_per_tok=2), dtype="bfloat16")
        transformers.Qwen3MoeForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)
        model = load(path)
        which = lambda name: ".experts." in name and name.endswith(".weight")  # noqa: E731
    for name, (lo, hi) in _inner_pages(os.path.join(path, "model.safetensors"), which).items():
        resident = _resident_pages(lo, hi)
        assert not resident.any(), (name, resident)
    assert packed_only(model.model.layers[0].mlp.experts.moe)
    assert model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape[-1] == 128


def test_dropping_mapped_pages_loses_nothing(tmp_path):
    """drop_mapped_pages drops only pages the file gives back unchanged: tensors read from a
    mapped safetensors file (as transformers maps it) read the same values afterwards, a
    tensor written in place keeps what was written, and the pages of tensors in `keep`, or
    of anonymous memory, stay."""
    from cpukern.torch._pages import drop_mapped_pages
    from safetensors import safe_open
    _need_pagemap()
    a = torch.arange(200000, dtype=torch.int32)
    b = torch.arange(50000, dtype=torch.int32) * 3
    c = torch.arange(50000, dtype=torch.int32) * 5
    save_file({"a": a, "b": b, "c": c}, str(tmp_path / "m.safetensors"))
    f = safe_open(str(tmp_path / "m.safetensors"), framework="pt", device="cpu")
    ta, tb, tc = (f.get_slice(k)[...] for k in "abc")
    assert int(ta.sum()) == int(a.sum()) and int(tb.sum()) == int(b.sum())  # resident now
    tc.add_(1)  # private copies of c's pages (written, not the file's)
    anon = a.clone()

    def whole_pages(t):
        p = mmap.PAGESIZE
        lo = -(-t.data_ptr() // p) * p
        return lo, (t.data_ptr() + t.nbytes) // p * p

    dropped = drop_mapped_pages([ta, tc, anon], keep=[tb])
    assert dropped >= whole_pages(ta)[1] - whole_pages(ta)[0] > 0
    assert not _resident_pages(*whole_pages(ta)).any()
    assert _resident_pages(*whole_pages(tb)).all() and _resident_pages(*whole_pages(tc)).all()
    assert _resident_pages(*whole_pages(anon)).all()
    assert torch.equal(ta, a) and torch.equal(tb, b) and torch.equal(tc, c + 1)
    assert torch.equal(anon, a)
    assert drop_mapped_pages([anon], keep=[]) == 0  # not file-mapped: nothing to drop


# --- the int8 LM head ------------------------------------------------------------------------

def _head_inputs_outputs(model):
    """The LM head's inputs (bf16, (T, K)) and outputs (float64, (T, V)) for PROMPT."""
    seen = {}
    hook = model.get_output_embeddings().register_forward_hook(
        lambda mod, args, out: seen.update(x=args[0].detach(), y=out.detach()))
    with torch.no_grad():
        model(input_ids=torch.tensor([PROMPT]))
    hook.remove()
    x, y = seen["x"], seen["y"]
    return (x.reshape(-1, x.shape[-1]).to(torch.bfloat16),
            y.reshape(-1, y.shape[-1]).to(torch.float64))


def _check_int8_head_bound(model, w):
    """The int8 LM head within docs/guarantees.md's bound of the exact product of its bf16
    inputs and the bf16 head weights w (V, K), per logit; and further from it than bf16 would
    be somewhere (the test can tell the two apart)."""
    head = model.get_output_embeddings()
    assert dense_packed(head, "int8")
    x, y = _head_inputs_outputs(model)
    xd, wd = x.to(torch.float64), w.to(torch.float64)
    k = xd.shape[1]
    ref = xd @ wd.T
    sa = xd.abs().amax(dim=1, keepdim=True) / 127  # (T, 1)
    sw = wd.abs().amax(dim=1) / 127  # (V,)
    x1 = xd.abs().sum(dim=1, keepdim=True)
    bound = (2.0**-8 * ref.abs() + 0.52 * (sw * x1 + sa * wd.abs().sum(dim=1)) + 0.3 * k * sa * sw
             + 2.0**-22 * (xd.abs() @ wd.abs().T) + 2.0**-126 * (k + x1))
    err = (y - ref).abs()
    assert bool((err <= bound).all()), float((err / bound).max())
    assert float((err - 2.0**-8 * ref.abs()).max()) > 0  # not the bf16 head's result


def test_int8_lm_head_within_its_bound(checkpoints):
    """lm_head="int8": the LM head alone becomes W8A8 (the other dense layers stay bf16),
    warns as a lossy choice, and its logits stay within the documented bound."""
    path = checkpoints["qwen3_moe"]
    w = load_file(os.path.join(path, "model.safetensors"))["lm_head.weight"]
    with pytest.warns(UserWarning, match="W8A8 LM head"):
        model = load(path, lm_head="int8")
    assert model.model.layers[0].self_attn.q_proj.weight.weights.format == "bf16"
    _check_int8_head_bound(model, w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load(path).lm_head.weight.weights.format == "bf16"  # the default: bf16, no warning
    assert ct.from_pretrained(path, lm_head="int8").lm_head.weight.weights.format == "int8"
    both = load(path, dense="int8", lm_head="bf16")  # lm_head overrides dense for the head
    assert both.lm_head.weight.weights.format == "bf16"
    assert both.model.layers[0].self_attn.q_proj.weight.weights.format == "int8"
    with pytest.raises(ValueError, match="^lm_head"):
        load(path, lm_head="int4")
    with pytest.raises(TypeError, match="^lm_head"):
        CpukernConfig(lm_head=8)


def test_int8_lm_head_tied_keeps_bf16_embedding(checkpoints, tmp_path):
    """A tied LM head in int8 packs its own copy: the embedding the lookups read stays the
    stored bf16 tensor, bit for bit, and the logits stay within the bound; patch() takes the
    same keyword."""
    path = str(tmp_path / "tied")
    sd = _tied_copy(checkpoints["qwen3_moe"], path)
    del sd["lm_head.weight"]
    save_file(sd, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    emb = sd["model.embed_tokens.weight"]
    with pytest.warns(UserWarning, match="W8A8 LM head"):
        model = load(path, lm_head="int8")
    got = model.get_input_embeddings().weight
    assert got.dtype == torch.bfloat16 and torch.equal(got, emb)
    _check_int8_head_bound(model, emb)
    plain = transformers.AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, dtype=torch.bfloat16).eval()
    with pytest.warns(UserWarning, match="W8A8 LM head"):
        ct.patch(plain, lm_head="int8")
    assert torch.equal(plain.get_input_embeddings().weight, emb)
    _check_int8_head_bound(plain, emb)


def test_tied_lm_head_saves_and_reloads_packed(checkpoints, tmp_path):
    """A tied LM head keeps its nn.Linear class with its own packed weight, and the embedding
    its stored bf16 tensor; saved and loaded again (transformers ties weights on loading) the
    head is still the packed one, the embedding still the stored one, the logits bit for bit."""
    path = str(tmp_path / "tied")
    sd = _tied_copy(checkpoints["qwen3_moe"], path)
    del sd["lm_head.weight"]
    save_file(sd, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    emb = sd["model.embed_tokens.weight"]
    model = load(path)
    ids = torch.tensor([[1, 2, 3, 4]])
    logits = model(input_ids=ids).logits
    model.save_pretrained(str(tmp_path / "saved"))
    for again in (transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "saved")),
                  ct.from_pretrained(str(tmp_path / "saved"))):
        assert dense_packed(again.lm_head)
        assert torch.equal(again.lm_head.weight.blob, model.lm_head.weight.blob)
        got = again.get_input_embeddings().weight
        assert got.dtype == torch.bfloat16 and torch.equal(got, emb)
        assert torch.equal(again(input_ids=ids).logits, logits)
