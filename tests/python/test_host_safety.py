"""cpukern inside real host processes (issue 13): caller-owned index arrays read once, read-only
out= for every array kind, non-regular weight files, memory given back after large calls,
int8 edge cases (long rows, tiny activations), empty batches, configuration typos."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import warnings

import ml_dtypes
import numpy as np
import pytest

import cpukern
from cpukern import moe, ternary, widely_linear
from variants import UNDER_QEMU, supported

BF16 = ml_dtypes.bfloat16

try:
    import torch
except ImportError:  # the QEMU legs have no torch
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed here")
needs_subprocess = pytest.mark.skipif(
    UNDER_QEMU, reason="under QEMU: qemu-user cannot start guest subprocesses")


def _run(code: str, timeout: float = 240, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


def _moe_weights(e, h, inter, seed=0, isa=None):
    rng = np.random.default_rng(seed)
    w13 = moe.prepack((rng.standard_normal((e, 2 * inter, h)) / 8).astype(BF16), isa=isa)
    w2 = moe.prepack((rng.standard_normal((e, h, inter)) / 8).astype(BF16), isa=isa)
    return w13, w2


# --- 3: index arrays are read once ------------------------------------------------------------

@needs_subprocess
def test_fused_moe_topk_ids_changed_during_the_call_never_crash():
    """Another thread flips topk_ids between valid ids and huge ones while fused_moe runs: each
    call either refuses the ids (ValueError) or computes with one consistent copy of them."""
    out = _run("""
        import threading, numpy as np, ml_dtypes
        from cpukern import moe
        rng = np.random.default_rng(0)
        e, h, i, t, k = 8, 32, 32, 20000, 2
        w13 = moe.prepack((rng.standard_normal((e, 2 * i, h)) / 8).astype(ml_dtypes.bfloat16))
        w2 = moe.prepack((rng.standard_normal((e, h, i)) / 8).astype(ml_dtypes.bfloat16))
        x = rng.standard_normal((t, h)).astype(ml_dtypes.bfloat16)
        tw = np.full((t, k), 0.5, np.float32)
        ids = rng.integers(0, e, (t, k)).astype(np.int32)
        good = ids.copy()
        stop = False
        def flip():
            bad = np.full_like(ids, 1 << 30)
            while not stop:
                ids[:] = bad
                ids[:] = good
        th = threading.Thread(target=flip)
        th.start()
        refused = ran = 0
        try:
            for _ in range(300):
                try:
                    moe.fused_moe(x, w13, w2, tw, ids, threads=2)
                    ran += 1
                except ValueError as err:
                    assert "topk_ids" in str(err), err
                    refused += 1
        finally:
            stop = True
            th.join()
        print("OK", ran, refused)
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("OK"), out.stdout + out.stderr


@needs_subprocess
def test_ternary_prepare_codes_changed_during_the_call_never_crash():
    """prepare validates the packed codes and packs the validated copy: a thread writing the
    invalid code 0b11 into the caller's array during prepare cannot reach the kernels."""
    out = _run("""
        import threading, numpy as np
        from cpukern import ternary
        rng = np.random.default_rng(1)
        m, k = 512, 4096
        w = rng.integers(-1, 2, (m, k)).astype(np.int8)
        packed = ternary.pack(w)
        good = packed.copy()
        bad = np.full_like(packed, 0xFFFFFFFF)
        x = rng.standard_normal(k).astype(np.float32)
        stop = False
        def flip():
            while not stop:
                packed[:] = bad
                packed[:] = good
        th = threading.Thread(target=flip)
        th.start()
        try:
            for _ in range(40):
                try:
                    tw = ternary.prepare(packed, k)
                except ValueError as err:
                    assert "invalid code" in str(err), err
                    continue
                y = ternary.gemv(tw, x)
                assert np.isfinite(y).all()
        finally:
            stop = True
            th.join()
        print("OK")
    """)
    assert out.returncode == 0, out.stdout + out.stderr


# --- 4: out= on read-only memory --------------------------------------------------------------

@needs_torch
def test_torch_out_over_read_only_memory_is_a_type_error(tmp_path):
    path = tmp_path / "w.safetensors"
    rng = np.random.default_rng(2)
    w = rng.integers(-1, 2, (8, 32)).astype(np.int8)
    ternary.save(path, {"w": ternary.pack(w), "y": np.zeros((8,), np.float32)}, k={"w": 32})
    ck = ternary.load(path)
    ro = ck["y"]
    assert not ro.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that the array is not writable
        out = torch.from_numpy(ro)
    tw = ternary.prepare(ternary.pack(w), 32)
    x = rng.standard_normal(32).astype(np.float32)
    with pytest.raises(TypeError, match="out: expected a writeable array"):
        ternary.gemv(tw, torch.from_numpy(x), out=out)
    with pytest.raises(TypeError, match="out: expected a writeable array"):
        ternary.gemv(tw, x, out=out)
    # the numpy array itself: the same error
    with pytest.raises(TypeError, match="out: expected a writeable array"):
        ternary.gemv(tw, x, out=ro)
    # memory torch allocated works (shared memory included); memory it only wraps
    # (from_numpy, frombuffer, DLPack) carries no read-only flag in torch and is refused
    for ok in (torch.empty(8), torch.zeros(16)[::2].clone(), torch.empty(8).share_memory_()):
        np.testing.assert_array_equal(ternary.gemv(tw, x, out=ok).numpy(), ternary.gemv(tw, x))
    with pytest.raises(TypeError, match="out: expected a writeable array.*torch.empty"):
        ternary.gemv(tw, x, out=torch.from_numpy(np.empty(8, np.float32)))


# --- 5: non-regular weight files --------------------------------------------------------------

@pytest.mark.parametrize("mmap", [True, False])
def test_load_refuses_a_character_device(mmap):
    with pytest.raises(ValueError, match="regular file"):
        ternary.load("/dev/zero", mmap=mmap)


@needs_subprocess
@pytest.mark.parametrize("mmap", [True, False])
def test_load_refuses_a_fifo_without_blocking(tmp_path, mmap):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = _run(f"""
        from cpukern import ternary
        try:
            ternary.load({str(fifo)!r}, mmap={mmap})
        except ValueError as e:
            print("refused:", e)
    """, timeout=60)
    assert "refused:" in out.stdout and "regular file" in out.stdout, out.stdout + out.stderr


def test_load_refuses_a_directory(tmp_path):
    with pytest.raises(ValueError, match="regular file"):
        ternary.load(tmp_path)


@needs_subprocess
def test_prepared_weights_survive_truncating_the_mapped_file(tmp_path):
    """prepare copies into its own layout: truncating the file after prepare leaves the prepared
    weights usable (the mapped arrays themselves would SIGBUS, as numpy/safetensors mappings do)."""
    path = tmp_path / "w.safetensors"
    out = _run(f"""
        import os, numpy as np
        from cpukern import ternary
        rng = np.random.default_rng(3)
        w = rng.integers(-1, 2, (64, 4096)).astype(np.int8)
        ternary.save({str(path)!r}, {{"w": ternary.pack(w), "s": np.ones(64, np.float32)}}, k={{"w": 4096}})
        ck = ternary.load({str(path)!r})
        tw = ternary.prepare(ck["w"], ck.k("w"), ck["s"])
        x = rng.standard_normal(4096).astype(np.float32)
        want = ternary.gemv(tw, x)
        os.truncate({str(path)!r}, 0)
        np.testing.assert_array_equal(ternary.gemv(tw, x), want)
        np.testing.assert_array_equal(ternary.gemv(tw, x, act="int8"), ternary.gemv(tw, x, act="int8"))
        print("OK")
    """)
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout + out.stderr


# --- 8 / 9: int8 edge cases -------------------------------------------------------------------

def test_int8_refuses_k_above_the_exact_int32_bound():
    """|acc| = |sum_k w q| <= 127 * K must fit int32: K <= (2**31 - 1) // 127 = 16909320. At the
    bound every variant is exact (all +1 or all -1 weights, x all +-1); one past it is refused."""
    kmax = (2**31 - 1) // 127
    x = np.ones(kmax, np.float32)
    for isa in supported("ternary_gemv"):
        for k in (kmax + 1, 17_000_000):
            tw = ternary.prepare(np.zeros((1, (k + 15) // 16), np.uint32), k, isa=isa)
            with pytest.raises(ValueError, match=f"act: int8 mode needs K <= {kmax}.*got K = {k}"):
                ternary.gemv(tw, np.ones(k, np.float32), act="int8")
        if UNDER_QEMU and isa != supported("ternary_gemv")[0]:
            continue  # one variant is enough under emulation (each takes seconds there)
        w = np.ones((2, kmax), np.int8)
        w[1] = -1
        tw = ternary.prepare(ternary.pack(w), kmax, isa=isa)
        dq = np.float32(1) / np.float32(127)
        for sign in (1, -1):
            y = ternary.gemv(tw, sign * x, act="int8")
            want = np.float32(sign * 127 * kmax) * dq * np.array([1, -1], np.float32)
            np.testing.assert_array_equal(y, want, err_msg=isa)


@pytest.mark.parametrize("amax", [0.0, 1e-45, 3e-42, 1e-38, 3.0e-37, 3.8e-37, 1e-36, 2.0**-100])
def test_int8_tiny_activations_hold_the_documented_bound(amax):
    rng = np.random.default_rng(4)
    m, k = 24, 300
    w = rng.integers(-1, 2, (m, k)).astype(np.int8)
    packed = ternary.pack(w)
    s = rng.uniform(0.5, 2, m).astype(np.float32)
    x = np.zeros((3, k), np.float32)
    x[1] = np.float32(amax) * rng.uniform(-1, 1, k).astype(np.float32)
    x[1, 7] = np.float32(amax)
    x[2, 3] = -np.float32(amax)
    exact = (w.astype(np.float64) @ x.astype(np.float64).T).T * s
    xmax = np.abs(x.astype(np.float64)).max(axis=1, keepdims=True)
    bound = np.abs(s) * xmax / 254 * np.abs(w).sum(axis=1) + 1e-5 * (np.abs(w) @ np.abs(x.T).astype(np.float64)).T * s
    bound += 2.0**-149  # a subnormal result is rounded to the subnormal spacing
    for isa in supported("ternary_gemv"):
        y = ternary.gemv(ternary.prepare(packed, k, s, isa=isa), x, act="int8")
        assert (y[0] == 0).all() and not np.signbit(y[0]).any(), (isa, y[0])
        assert (np.abs(y.astype(np.float64) - exact) <= bound).all(), (isa, amax)


# --- 11: empty batches ------------------------------------------------------------------------

def _kinds():
    kinds = [("numpy", lambda a: a)]
    if torch is not None:
        def to_torch(a):
            if a.dtype == BF16:
                return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
            return torch.from_numpy(a)
        kinds.append(("torch", to_torch))
    return kinds


@pytest.mark.parametrize("kind,T", _kinds())
def test_every_op_accepts_empty_batches(kind, T):
    rng = np.random.default_rng(5)
    w = rng.integers(-1, 2, (8, 32)).astype(np.int8)
    packed = ternary.pack(w)
    for isa in supported("ternary_gemv"):
        tw = ternary.prepare(T(packed), 32, isa=isa)
        for act in ("fp32", "int8"):
            y = ternary.gemv(tw, T(np.zeros((0, 32), np.float32)), act=act)
            assert tuple(y.shape) == (0, 8)
            y = ternary.gemv(tw, T(np.zeros((0, 32), np.float32)), act=act,
                             out=T(np.zeros((0, 8), np.float32)))
            assert tuple(y.shape) == (0, 8)
        # M = 0 and K = 0 weights
        y = ternary.gemv(ternary.prepare(T(np.zeros((0, 2), np.uint32)), 32, isa=isa),
                         T(np.ones((3, 32), np.float32)))
        assert tuple(y.shape) == (3, 0)
        y = ternary.gemv(ternary.prepare(T(np.zeros((4, 0), np.uint32)), 0, isa=isa),
                         T(np.ones((3, 0), np.float32)), act="int8")
        np.testing.assert_array_equal(np.asarray(y), np.zeros((3, 4), np.float32))
    assert tuple(ternary.pack(T(np.zeros((0, 32), np.int8))).shape) == (0, 2)
    assert tuple(ternary.pack(T(np.zeros((4, 0), np.int8))).shape) == (4, 0)
    assert tuple(ternary.unpack(T(np.zeros((0, 2), np.uint32)), 32).shape) == (0, 32)
    assert tuple(ternary.unpack(T(np.zeros((4, 0), np.uint32)), 0).shape) == (4, 0)
    p, s = ternary.quantize(T(np.zeros((0, 32), np.float32)))
    assert tuple(p.shape) == (0, 2) and tuple(s.shape) == (0,)
    planes, scales = widely_linear.quantize(rng.standard_normal((8, 16)).astype(np.float32))
    for isa in supported("widely_linear"):
        layer = widely_linear.prepare(T(planes), T(scales), 8, isa=isa)
        assert tuple(widely_linear.apply(layer, T(np.zeros((0, 16), np.float32))).shape) == (0, 8)
    assert tuple(widely_linear.apply(T(planes), T(np.zeros((0, 16), np.float32)), T(scales)).shape) == (0, 8)
    tw_, ids = moe.route(T(np.zeros((0, 4), np.float32)), 2)
    assert tuple(tw_.shape) == (0, 2) and tuple(ids.shape) == (0, 2)
    for isa in supported("fused_moe"):
        w13, w2 = _moe_weights(4, 32, 32, isa=isa)
        y = moe.fused_moe(T(np.zeros((0, 32), BF16)), w13, w2, T(np.zeros((0, 2), np.float32)),
                          T(np.zeros((0, 2), np.int32)))
        assert tuple(y.shape) == (0, 32)
        y = moe.fused_moe(T(np.zeros((0, 32), BF16)), w13, w2, T(np.zeros((0, 2), np.float32)),
                          T(np.zeros((0, 2), np.int32)), out=T(np.zeros((0, 32), BF16)))
        assert tuple(y.shape) == (0, 32)


@needs_torch
def test_torch_modules_accept_empty_batches():
    from cpukern.torch import FusedMoE, TernaryLinear, WidelyLinear

    lin = TernaryLinear.from_linear(torch.nn.Linear(32, 8))
    assert tuple(lin(torch.zeros(0, 32)).shape) == (0, 8)
    wl = WidelyLinear.from_linear(torch.nn.Linear(16, 8))
    assert tuple(wl(torch.zeros(0, 16)).shape) == (0, 8)
    m = FusedMoE.from_experts(torch.randn(4, 64, 32) / 8, torch.randn(4, 32, 32) / 8)
    assert tuple(m(torch.zeros(0, 32, dtype=torch.bfloat16), torch.zeros(0, 4)).shape) == (0, 32)


# --- 10: int64 ids ------------------------------------------------------------------------------

@needs_torch
def test_torch_int64_ids_are_range_checked_before_narrowing():
    from cpukern.torch import FusedMoE

    m = FusedMoE.from_experts(torch.randn(4, 64, 32) / 8, torch.randn(4, 32, 32) / 8, topk=1)
    x = torch.randn(3, 32).to(torch.bfloat16)
    w = torch.ones(3, 1)
    good = torch.tensor([[1], [2], [3]], dtype=torch.int64)
    want = m.experts(x, w, good.to(torch.int32))
    assert torch.equal(m.experts(x, w, good), want)
    for bad in (2**32 + 1, 2**31, -1, -(2**32) + 1, 4):
        ids = good.clone()
        ids[1, 0] = bad
        with pytest.raises(ValueError, match=f"topk_ids: .*{bad}"):
            m.experts(x, w, ids)
        with pytest.raises(ValueError, match=f"topk_ids: .*{bad}"):
            torch.ops.cpukern.fused_moe(x, m.w13, m.w2, w, ids)


# --- 12: memory comes back --------------------------------------------------------------------

@needs_subprocess
def test_memory_comes_back_after_a_large_fused_moe_call():
    out = _run("""
        import gc, numpy as np, ml_dtypes, cpukern
        from cpukern import moe
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096 / 2**20
        rng = np.random.default_rng(6)
        e, h, i = 8, 1024, 1024
        bf = ml_dtypes.bfloat16
        w13 = moe.prepack((rng.standard_normal((e, 2 * i, h)) / 32).astype(bf))
        w2 = moe.prepack((rng.standard_normal((e, h, i)) / 32).astype(bf))
        def inputs(t):
            x = rng.standard_normal((t, h)).astype(bf)
            tw, ids = moe.route(rng.standard_normal((t, e)).astype(np.float32), 2)
            return x, tw, ids, np.empty((t, h), bf)
        small, large, medium = inputs(8), inputs(4096), inputs(1024)
        for _ in range(2):
            moe.fused_moe(small[0], w13, w2, small[1], small[2], threads=2, out=small[3])
        gc.collect()
        base = rss()
        x, tw, ids, out = large   # about 64 MiB of scratch while it runs
        moe.fused_moe(x, w13, w2, tw, ids, threads=2, out=out)
        big = rss() - base
        x, tw, ids, out = medium  # about 16 MiB: kept for the next call
        moe.fused_moe(x, w13, w2, tw, ids, threads=2, out=out)
        cpukern.empty_cache()
        after_empty = rss() - base
        print("OK", round(big, 1), round(after_empty, 1))
    """)
    assert out.returncode == 0 and out.stdout.startswith("OK"), out.stdout + out.stderr
    _, big, after_empty = out.stdout.split()
    assert float(big) < 20, out.stdout           # at most the 16 MiB kept per thread (+ slack)
    assert float(after_empty) < 4, out.stdout


def test_empty_cache_is_public_and_safe_between_calls():
    cpukern.empty_cache()
    w13, w2 = _moe_weights(4, 32, 32)
    x = np.ones((5, 32), BF16)
    tw, ids = moe.route(np.zeros((5, 4), np.float32), 2)
    a = moe.fused_moe(x, w13, w2, tw, ids)
    cpukern.empty_cache()
    np.testing.assert_array_equal(moe.fused_moe(x, w13, w2, tw, ids), a)


# --- 14: configuration typos ------------------------------------------------------------------

def test_isa_names_with_nul_are_refused():
    packed = ternary.pack(np.ones((2, 16), np.int8))
    for call in (lambda isa: ternary.prepare(packed, 16, isa=isa),
                 lambda isa: moe.prepack(np.zeros((1, 2, 32), BF16), isa=isa)):
        with pytest.raises(ValueError, match=r"isa: .*'avx2\\x00junk'"):
            call("avx2\x00junk")


@needs_subprocess
def test_unknown_cpukern_isa_names_warn_naming_the_known_ones():
    out = _run("import cpukern, numpy as np; cpukern.ternary.pack(np.zeros((1, 1), np.int8))",
               env={"CPUKERN_ISA": "avx3,reference"})
    assert "CPUKERN_ISA" in out.stderr and "'avx3'" in out.stderr and "reference" in out.stderr, out.stderr
    assert "'reference'" not in out.stderr.split("known")[0], out.stderr
    out = _run("import cpukern", env={"CPUKERN_ISA": "reference,fused_moe=reference"})
    assert "CPUKERN_ISA" not in out.stderr, out.stderr


@needs_subprocess
def test_cpukern_isa_forcing_an_unusable_variant_of_an_op_fails_its_calls_not_the_import():
    code = """
        import cpukern, numpy as np
        assert not any(v["selected"] for v in cpukern.kernels("ternary_gemv"))
        assert any(v["selected"] for v in cpukern.kernels("fused_moe"))
        try:
            cpukern.ternary.prepare(cpukern.ternary.pack(np.ones((1, 16), np.int8)), 16)
        except ValueError as e:
            print("ERR", e)
    """
    out = _run(code, env={"CPUKERN_ISA": "ternary_gemv=bogus"})
    assert out.returncode == 0, out.stderr
    assert "'ternary_gemv=bogus' forces a variant ternary_gemv cannot use" in out.stderr, out.stderr
    assert "ERR isa: unknown variant 'bogus' for ternary_gemv" in out.stdout, out.stdout
    lacking = [v["name"] for v in cpukern.kernels("ternary_gemv") if not v["supported"]]
    if not lacking:
        pytest.skip("every ternary_gemv variant runs on this CPU: no unsupported one to force")
    out = _run(code, env={"CPUKERN_ISA": f"ternary_gemv={lacking[0]}"})
    assert out.returncode == 0, out.stderr
    assert f"ERR isa: variant '{lacking[0]}' of ternary_gemv needs CPU features" in out.stdout, out.stdout
