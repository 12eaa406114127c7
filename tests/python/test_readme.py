"""Every ```python block of README.md and docs/**/*.md runs as written against the built package
(the big shapes shrunk; files the snippets name are written here first). A block is known by
its page and the heading above it."""
import pathlib
import re

import numpy as np
import pytest

# The runfiles copy (tests/python/BUILD data: //:README.md and //docs:all_md), two levels above
# this file.
ROOT = pathlib.Path(__file__).parent.parent.parent


def pages():
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert docs, f"no docs/**/*.md under {ROOT}"
    return ["README.md"] + docs


def blocks():
    """[(page, heading, source)] of every ```python block, in page order. Headings are the
    markdown ones outside fenced blocks (a `# comment` inside a sh block is not a heading)."""
    found = []
    for page in pages():
        heading, fence, body = None, None, None
        for line in (ROOT / page).read_text().split("\n"):
            if fence is None:
                if line.startswith("```"):
                    fence = line
                    body = [] if line.strip() == "```python" else None
                elif re.match(r"#+ ", line):
                    heading = re.sub(r"^#+ ", "", line).strip()
            elif line.startswith("```"):
                if body is not None:
                    found.append((page, heading, "\n".join(body) + "\n"))
                fence, body = None, None
            elif body is not None:
                body.append(line)
        assert fence is None, f"{page}: unclosed code block {fence!r}"
    return found


def test_adding_a_kernel_example_is_a_row_of_the_kernel_list():
    """docs/architecture.md's example MoE rows are rows of the MoE kernel list as written
    there, every column included."""
    doc = (ROOT / "docs/architecture.md").read_text()
    examples = re.findall(r"`(CPUKERN_(?:VARIANT|CATALOGUE_ONLY)\([^`]*moe_gemm[^`]*\))`", doc)
    assert examples, "no example MoE row in docs/architecture.md"
    inc = (ROOT / "kernels/moe/ukernels/ukernels.inc").read_text()
    rows = {re.sub(r"\s+", " ", r)
            for r in re.findall(r"^CPUKERN_(?:VARIANT|CATALOGUE_ONLY)\([^)]*\)", inc, re.M)}
    for e in examples:
        assert re.sub(r"\s+", " ", e) in rows, f"not a row of ukernels.inc: {e}"


def test_architecture_tree_names_every_folder():
    """docs/architecture.md's "Layout of the tree" names every folder of the checkout and every
    folder one level below them (as `name/`)."""
    src = (ROOT / "README.md").resolve().parent  # runfiles link into the checkout
    if not (src / "kernels" / "common").is_dir():
        pytest.skip(f"README.md's runfile is a copy ({src}), not a link into the checkout")
    doc = (ROOT / "docs/architecture.md").read_text()
    tree = re.search(r"## Layout of the tree\n\n```\n(.*?)```", doc, re.S).group(1)

    def folders(d):
        return sorted(p.name for p in d.iterdir() if p.is_dir() and p.name != "__pycache__" and
                      (not p.name.startswith((".", "bazel-")) or p.name in (".github", ".ci")))

    missing = [f"{t}/" for t in folders(src) if not re.search(rf"(^|\s){re.escape(t)}/", tree, re.M)]
    missing += [f"{t}/{s}/" for t in folders(src) for s in folders(src / t)
                if not re.search(rf"(^|[\s(/]){re.escape(s)}/", tree, re.M)]
    assert not missing, f"docs/architecture.md's tree does not name {missing}"


def block(page, heading):
    found = [src for p, h, src in blocks() if p == page and h.startswith(heading)]
    assert len(found) == 1, (page, heading, len(found))
    return found[0]


def shrink(src, sizes):
    for big, small in sizes.items():
        src = re.sub(rf"\b{big}\b", str(small), src)
    return src


def test_every_python_block_is_covered():
    assert sorted((p, h) for p, h, _ in blocks()) == sorted([
        ("README.md", "Python API"),
        ("README.md", "Run a model"),
        ("docs/formats/checkpoints.md", "Importing ternary checkpoints (`cpukern.convert`)"),
        ("docs/formats/mxfp4.md", "MXFP4 MoE experts (gpt-oss's format)"),
        ("docs/formats/mxfp4.md", "W4A8: int8 activations (opt-in)"),
        ("docs/formats/int8.md", "int8 MoE experts (W8A8)"),
        ("docs/formats/prepared_weights.md", "Prepared weights as bytes (`to_bytes` / `from_buffer`)"),
        ("docs/formats/prepared_weights.md", "Packing straight into the buffer (`out=`)"),
        ("docs/formats/prepared_weights.md",
         "PyTorch: packed weights as one tensor (`PackedWeightsTensor`)"),
        ("docs/pytorch.md", "PyTorch (`cpukern.torch`)"),
        ("docs/pytorch.md", "Hugging Face models (`CpukernConfig`, `patch`)"),
    ])


def test_python_api_block():
    src = shrink(block("README.md", "Python API"), {4096: 128, 14336: 1024})
    *body, last = src.rstrip("\n").split("\n\n")   # the last paragraph shows the error
    g = {}
    exec("\n\n".join(body), g)
    with pytest.raises(ValueError, match="expected K = 1024 columns"):
        exec(last, g)


def test_mxfp4_block(tmp_path, monkeypatch):
    st = pytest.importorskip("safetensors.numpy", reason="safetensors is not installed here")
    import ml_dtypes
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    E, H, I = 4, 64, 32
    mx = lambda shape, k: (rng.integers(0, 256, shape + (k // 32, 16), dtype=np.uint8),
                           rng.integers(118, 128, shape + (k // 32,), dtype=np.uint8))
    bf = lambda *s: rng.standard_normal(s).astype(ml_dtypes.bfloat16)
    pre = "model.layers.0.mlp.experts."
    (b13, s13), (b2, s2) = mx((E, 2 * I), H), mx((E, H), I)
    st.save_file({pre + "gate_up_proj_blocks": b13, pre + "gate_up_proj_scales": s13,
                  pre + "gate_up_proj_bias": bf(E, 2 * I), pre + "down_proj_blocks": b2,
                  pre + "down_proj_scales": s2, pre + "down_proj_bias": bf(E, H)},
                 "model-00001.safetensors")
    g = {}  # the block defines every name it uses
    exec(block("docs/formats/mxfp4.md", "MXFP4"), g)
    assert g["y"].shape == (g["T"], g["H"])
    assert sorted(g["layer"]) == ["activation", "w13", "w13_bias", "w2", "w2_bias"]


def test_w4a8_block():
    g = {}  # the block defines every name it uses
    exec(block("docs/formats/mxfp4.md", "W4A8"), g)
    assert g["y"].shape == (g["T"], g["H"]) and g["w2"].format == "mxfp4_a8"


def test_int8_block():
    g = {}  # the block defines every name it uses
    exec(block("docs/formats/int8.md", "int8 MoE experts"), g)
    assert g["y"].shape == (g["T"], g["H"])
    assert g["w_f32"].dtype == np.float32


def test_convert_block(tmp_path, monkeypatch):
    gguf = pytest.importorskip("gguf", reason="the gguf package is not installed here (host-only)")
    pytest.importorskip("torch", reason="torch is not installed here")
    monkeypatch.chdir(tmp_path)
    w = gguf.GGUFWriter("model.gguf", arch="llama")
    qt = gguf.GGMLQuantizationType.TQ2_0
    q = gguf.quants.quantize(np.random.default_rng(1).standard_normal((32, 512)).astype(np.float32), qt)
    w.add_tensor("blk.0.ffn_up.weight", q, raw_shape=q.shape, raw_dtype=qt)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    g = {}
    exec(block("docs/formats/checkpoints.md", "Importing ternary checkpoints"), g)
    assert g["fc"].in_features == 512 and g["fc"].out_features == 32


def test_prepared_bytes_block(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the block writes layer0.npy
    g = {}
    exec(block("docs/formats/prepared_weights.md", "Prepared weights as bytes"), g)
    assert g["w2"].is_view and g["y"].shape == (256,)


def test_prepare_into_block():
    g = {}
    exec(block("docs/formats/prepared_weights.md", "Packing straight into the buffer"), g)
    assert g["w"].int8_ready and len(g["blobs"]) == 1


def test_prepared_torch_block(tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="torch is not installed here")
    monkeypatch.chdir(tmp_path)  # the block writes layer.safetensors
    g = {}
    exec(shrink(block("docs/formats/prepared_weights.md", "PyTorch: packed weights"),
                {4096: 256}), g)
    assert tuple(g["y"].shape) == (4, 256)


def test_hf_block():
    pytest.importorskip("torch", reason="torch is not installed here")
    pytest.importorskip("transformers", reason="transformers is not installed here")
    g = {}
    exec(block("docs/pytorch.md", "Hugging Face models"), g)
    # 2 experts modules, 2 routers and the 9 bf16 nn.Linear layers (4 projections a layer,
    # lm_head)
    assert len(g["report"].replaced) == 13 and tuple(g["ids"].shape) == (1, 11)


def test_run_a_model_block(tmp_path):
    """README's way to load, on a tiny bf16 Qwen3-MoE checkpoint written here."""
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed here")
    cfg = transformers.Qwen3MoeConfig(vocab_size=64, hidden_size=64, intermediate_size=64,
                                      moe_intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                      num_experts=4, num_experts_per_tok=2)
    transformers.Qwen3MoeForCausalLM(cfg).to(torch.bfloat16).save_pretrained(tmp_path)
    src = block("README.md", "Run a model")
    assert '"path/to/checkpoint"' in src
    g = {}
    exec(src.replace('"path/to/checkpoint"', repr(str(tmp_path))), g)
    assert "FusedMoE bf16" in str(g["model"].cpukern_report)


def test_pytorch_block():
    pytest.importorskip("torch", reason="torch is not installed here")
    g = {}
    exec(shrink(block("docs/pytorch.md", "PyTorch"), {2560: 256, 6912: 512}), g)
    assert tuple(g["y"].shape) == (4, 512)
