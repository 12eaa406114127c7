"""cpukern.attention.decode (numpy and torch arrays; every leg): every variant this CPU runs
against a float64 model on random and edge shapes, masks, sinks, views of a longer cache,
rows with no key left, thread-count invariance, and arguments refused by name."""

import ml_dtypes
import numpy as np
import pytest

import cpukern
from cpukern import attention

BF16 = ml_dtypes.bfloat16
VARIANTS = [v["name"] for v in cpukern.kernels("decode_attention") if v["supported"]]


def model(q, k, v, mask=None, sinks=None, scale=None, nan_if_empty=False):
    """float64: q (B, Hq, D), k/v (B, Hkv, L, D), mask (B|1, Hq|1, L) bool or float."""
    b, hq, d = q.shape
    hkv, length = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    out = np.zeros((b, hq, d))
    for i in range(b):
        for h in range(hq):
            kv = h // (hq // hkv)
            s = k[i, kv].astype(np.float64) @ q[i, h].astype(np.float64) * scale
            if mask is not None:
                m = mask[i if mask.shape[0] > 1 else 0, h if mask.shape[1] > 1 else 0]
                s = np.where(m, s, -np.inf) if m.dtype == bool else s + m.astype(np.float64)
            sink = -np.inf if sinks is None else float(sinks[h])
            top = max(s.max(initial=-np.inf), sink)
            if top == -np.inf:
                out[i, h] = np.nan if nan_if_empty and sinks is None else 0.0
                continue
            p = np.exp(s - top)
            out[i, h] = p @ v[i, kv].astype(np.float64) / (p.sum() + np.exp(sink - top))
    return out


def check(got, want, v, dtype):
    tol = 1e-5 * np.abs(v.astype(np.float32)).max(initial=1.0)
    got = got.astype(np.float64)
    bound = tol + (np.abs(want) / 256 if dtype == BF16 else np.zeros_like(want))
    assert np.all(np.isnan(got) == np.isnan(want))
    ok = ~np.isnan(want)
    assert np.all(np.abs(got[ok] - want[ok]) <= bound[ok]), np.abs(got[ok] - want[ok]).max()


def arrays(rng, b, hq, hkv, length, d, dtype, cache=None):
    cache = cache or length
    q = rng.standard_normal((b, hq, d)).astype(np.float32).astype(dtype)
    k = rng.standard_normal((b, hkv, cache, d)).astype(np.float32).astype(dtype)[:, :, :length]
    v = rng.standard_normal((b, hkv, cache, d)).astype(np.float32).astype(dtype)[:, :, :length]
    return q, k, v


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("b,hq,hkv,length,d", [(1, 1, 1, 1, 1), (1, 20, 5, 300, 128),
                                               (2, 8, 2, 257, 17), (3, 6, 6, 16, 64),
                                               (1, 64, 8, 513, 64), (2, 5, 1, 0, 8)])
def test_matches_model(variant, dtype, b, hq, hkv, length, d):
    rng = np.random.default_rng(b * 1000 + length)
    q, k, v = arrays(rng, b, hq, hkv, length, d, dtype, cache=length + 9)
    got = attention.decode(q, k, v, variant=variant)
    assert got.shape == (b, hq, d) and got.dtype == dtype
    check(got, model(q, k, v), v, dtype)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("mshape", [(1, 1), (2, 1), (1, 8), (2, 8)])
def test_masks_and_sinks(variant, kind, mshape):
    rng = np.random.default_rng(5)
    q, k, v = arrays(rng, 2, 8, 2, 300, 32, BF16)
    keep = rng.random(mshape + (300,)) > 0.3
    mask = keep if kind == "bool" else np.where(keep, rng.standard_normal(keep.shape), -np.inf
                                                ).astype(np.float32)
    sinks = rng.standard_normal(8).astype(np.float32)
    for s in (None, sinks):
        got = attention.decode(q, k, v, mask=mask, sinks=s, scale=0.3, variant=variant)
        check(got, model(q, k, v, mask, s, 0.3), v, BF16)


@pytest.mark.parametrize("fully_masked", ["zero", "nan"])
def test_no_key_left(fully_masked):
    q, k, v = arrays(np.random.default_rng(1), 1, 4, 2, 40, 16, np.float32)
    mask = np.zeros((1, 1, 40), dtype=bool)
    got = attention.decode(q, k, v, mask=mask, fully_masked=fully_masked)
    assert np.isnan(got).all() if fully_masked == "nan" else (got == 0).all()
    sinks = np.ones(4, dtype=np.float32)
    assert (attention.decode(q, k, v, mask=mask, sinks=sinks, fully_masked=fully_masked) == 0).all()


def test_same_bits_for_any_thread_count():
    q, k, v = arrays(np.random.default_rng(2), 2, 12, 3, 1000, 128, BF16)
    one = attention.decode(q, k, v, threads=1)
    for threads in (2, 3):
        assert one.tobytes() == attention.decode(q, k, v, threads=threads).tobytes()


def test_torch_tensors_and_out():
    torch = pytest.importorskip("torch", reason="torch is not installed on this leg")
    q = torch.randn(1, 8, 64).to(torch.bfloat16)
    k = torch.randn(1, 2, 400, 64).to(torch.bfloat16)[:, :, :300]
    v = torch.randn(1, 2, 400, 64).to(torch.bfloat16)[:, :, :300]
    out = torch.empty(1, 8, 64, dtype=torch.bfloat16)
    assert attention.decode(q, k, v, out=out) is out
    want = model(q.float().numpy(), k.float().numpy(), v.float().numpy())
    check(out.float().numpy(), want, v.float().numpy(), BF16)


def test_refused_arguments():
    q, k, v = arrays(np.random.default_rng(3), 1, 4, 2, 10, 8, np.float32)
    with pytest.raises(ValueError, match="key"):
        attention.decode(q, k[:, :1].repeat(3, axis=1), v[:, :1].repeat(3, axis=1))
    with pytest.raises(TypeError, match="key"):
        attention.decode(q, k.astype(BF16), v)
    with pytest.raises(ValueError, match="value"):
        attention.decode(q, k, v[:, :, :5])
    with pytest.raises(ValueError, match="key"):
        attention.decode(q, k[..., :4], v[..., :4])
    with pytest.raises(ValueError, match="key"):  # D not contiguous
        big = np.zeros((1, 2, 10, 16), np.float32)
        attention.decode(q, big[..., ::2], big[..., ::2])
    with pytest.raises(ValueError, match="mask"):
        attention.decode(q, k, v, mask=np.ones((1, 3, 10), bool))
    with pytest.raises(TypeError, match="mask"):
        attention.decode(q, k, v, mask=np.ones((1, 1, 10), np.int32))
    with pytest.raises(ValueError, match="sinks"):
        attention.decode(q, k, v, sinks=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="fully_masked"):
        attention.decode(q, k, v, fully_masked="inf")
    with pytest.raises(ValueError, match="variant"):
        attention.decode(q, k, v, variant="no_such_variant")
    with pytest.raises(ValueError, match="threads"):
        attention.decode(q, k, v, threads=-1)
    with pytest.raises(ValueError, match="out"):
        attention.decode(q, k, v, out=np.zeros((1, 4, 9), np.float32))
    with pytest.raises(ValueError, match="out"):  # out inside an input
        attention.decode(q, k, v, out=q)
    buf = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="mask"):
        attention.decode(q, k, v, mask=buf[:10].reshape(1, 1, 10), out=buf[:32].reshape(1, 4, 8))
