"""Bad input, table-driven: every public function, every kind of bad argument.

Each case must raise the listed exception type (ValueError / TypeError / MemoryError) with a
one-line message that starts with the argument's name ("arg: expected ..., got ..."), before any
kernel runs: an `out=` array given to a failing call is left untouched.

Each case runs in its own process, forked from a fresh interpreter (multiprocessing's
forkserver), so that a crash (SIGSEGV, SIGILL, abort) fails that case instead of killing the
test runner. Under qemu-user (the aarch64 legs) a Python process cannot start a guest
interpreter, so the cases run in-process there (the reason is printed).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import traceback
import warnings

import ml_dtypes
import numpy as np
import pytest

import cpukern
from cpukern import moe, ternary, widely_linear

UNDER_QEMU = bool(os.environ.get("CPUKERN_QEMU_CPU"))
BF = ml_dtypes.bfloat16
BIG = 1 << 47  # past the 2**46 limit on any extent
MiB = 1 << 20


# --- fixtures built inside the process that runs a case ---------------------------------------

class Ctx:
    """Small valid arguments for every op; cases spoil one argument at a time."""

    def __init__(self):
        rng = np.random.default_rng(5)
        self.W = rng.integers(-1, 2, size=(4, 40)).astype(np.int8)      # M = 4, K = 40
        self.P = ternary.pack(self.W)                                    # (4, 3) uint32
        self.TW = ternary.prepare(self.P, 40)
        self.X = rng.standard_normal(40).astype(np.float32)
        self.XB = rng.standard_normal((2, 40)).astype(np.float32)
        self.A = rng.standard_normal((8, 64)).astype(np.float32)        # n = 4, m = 32
        self.PL, self.SC = widely_linear.quantize(self.A, 2)            # (2, 4, 4, 2), (2, 4)
        self.L = widely_linear.prepare(self.PL, self.SC, 32)
        self.XW = rng.standard_normal(64).astype(np.float32)
        e, h, i, t = 4, 16, 8, 3
        self.E, self.H, self.I, self.T = e, h, i, t
        self.W13 = rng.standard_normal((e, 2 * i, h)).astype(BF)
        self.W2 = rng.standard_normal((e, h, i)).astype(BF)
        self.p13, self.p2 = moe.prepare(self.W13), moe.prepare(self.W2)
        self.xb = rng.standard_normal((t, h)).astype(BF)
        self.logits = rng.standard_normal((t, e)).astype(np.float32)
        self.tw, self.ti = moe.route(self.logits, 2)
        self.watched = []

    def watch(self, a):
        """An out= array for a call that must fail: filled with a pattern checked afterwards."""
        a = np.asarray(a)
        a.view(np.uint8)[...] = 0xA5
        self.watched.append(a)
        return a

    @staticmethod
    def tail(buf, dtype, shape):
        """An array of `shape` over the last bytes of `buf`: inside a prepared buffer's last
        section (ternary's scales, the packed experts)."""
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return buf[buf.size - n:].view(dtype).reshape(shape)

    def in_view(self, prepared, load, call):
        """call(view, out) with `view` = load(to_bytes(prepared)) and `out` inside its buffer."""
        buf = (moe if load is moe.from_buffer else ternary).to_bytes(prepared)
        return call(load(buf), buf)

    def moe_call(self, **kw):
        args = dict(x=self.xb, w13=self.p13, w2=self.p2, topk_weights=self.tw, topk_ids=self.ti)
        args.update(kw)
        return moe.fused_moe(args.pop("x"), args.pop("w13"), args.pop("w2"), args.pop("topk_weights"),
                             args.pop("topk_ids"), **args)


def _ro(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def _nc(a):
    """A non-contiguous view with the same dtype (every other element of the last axis)."""
    b = np.repeat(a, 2, axis=-1)
    return b[..., ::2]


# --- the table: (id, exception, argument named, case) ------------------------------------------
# Kinds: dtype, ndim, shape relation, value range, out= shape/dtype/read-only/overlap, threads,
# isa / activation / act names, non-contiguous, foreign types, huge sizes.

CASES = [
    # cpukern.kernels / set_num_threads
    ("kernels/unknown_op", ValueError, "op", lambda c: cpukern.kernels("conv2d")),
    ("kernels/op_type", TypeError, "op", lambda c: cpukern.kernels(["ternary_gemv"])),
    ("set_num_threads/negative", ValueError, "n", lambda c: cpukern.set_num_threads(-1)),
    ("set_num_threads/huge", ValueError, "n", lambda c: cpukern.set_num_threads(2**40)),
    ("set_num_threads/type", TypeError, "n", lambda c: cpukern.set_num_threads("4")),
    ("set_num_threads/float", TypeError, "n", lambda c: cpukern.set_num_threads(2.0)),


    ("moe_from_buffer/ternary_blob", ValueError, "buffer", lambda c: moe.from_buffer(ternary.to_bytes(c.TW))),
    ("ternary_from_buffer/moe_blob", ValueError, "buffer", lambda c: ternary.from_buffer(moe.to_bytes(c.p2))),
    ("ternary_from_buffer/not_a_blob", ValueError, "buffer",
     lambda c: (lambda b: (b.fill(0), ternary.from_buffer(b)))(ternary.aligned_empty(512))),

]
CASE_BY_ID = {case[0]: case for case in CASES}
assert len(CASE_BY_ID) == len(CASES), "duplicate case id"


def run_case(case_id: str):
    """Runs one case; returns (exception class name or None, message, untouched out= arrays?)."""
    _, _, _, fn = CASE_BY_ID[case_id]
    c = Ctx()
    try:
        fn(c)
    except Exception as e:  # noqa: BLE001 - the type is the result
        before = [a.view(np.uint8) for a in c.watched]
        untouched = all((b == 0xA5).all() for b in before)
        return type(e).__name__, str(e), untouched, traceback.format_exc(limit=3)
    finally:
        cpukern.set_num_threads(0)
    return None, "", True, ""


def _child(case_id, conn):
    conn.send(run_case(case_id))
    conn.close()


# --- the runner -------------------------------------------------------------------------------

_CONTEXT = None


def _mp_context():
    global _CONTEXT
    if _CONTEXT is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["numpy", "ml_dtypes", "cpukern", __name__])
        _CONTEXT = ctx
    return _CONTEXT


def isolated(case_id: str):
    """run_case in a fresh process: a crash becomes a test failure naming the signal."""
    if UNDER_QEMU:
        reason = ("qemu-user cannot start a guest interpreter (no binfmt_misc): bad-input cases run "
                  "in-process on this leg, without crash isolation")
        print(f"[{case_id}] {reason}")
        if case_id == CASES[0][0]:
            warnings.warn(reason)
        return run_case(case_id)
    ctx = _mp_context()
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(case_id, child))
    p.start()
    child.close()
    result = parent.recv() if parent.poll(120) else None
    p.join(30)
    if result is None:
        pytest.fail(f"{case_id}: the process died with exit code {p.exitcode} "
                    f"({'signal ' + str(-p.exitcode) if p.exitcode and p.exitcode < 0 else 'no result'})")
    return result


@pytest.mark.parametrize("case_id", [c[0] for c in CASES])
def test_bad_input(case_id):
    _, exc, arg, _ = CASE_BY_ID[case_id]
    got, msg, untouched, tb = isolated(case_id)
    assert got is not None, f"{case_id}: no exception (expected {exc.__name__} naming {arg!r})"
    assert got == exc.__name__, f"{case_id}: expected {exc.__name__}, got {got}: {msg}\n{tb}"
    assert "\n" not in msg, f"{case_id}: the message is not one line: {msg!r}"
    assert msg.startswith(f"{arg}: "), f"{case_id}: the message does not start with '{arg}: ': {msg!r}"
    assert untouched, f"{case_id}: out= was written before the error"


# --- forcing a variant this CPU cannot run: a ValueError, never SIGILL ---------------------------
# On a CPU that runs every variant, hide features (CPUKERN_DISABLE_FEATURES, read at start) in a
# fresh interpreter so that the best variants become unsupported.

_FORCE_CODE = r"""
import sys, numpy as np, ml_dtypes, cpukern
from cpukern import ternary, widely_linear, moe
op = sys.argv[1]
names = [v["name"] for v in cpukern.kernels(op) if not v["supported"]]
if not names:
    print("SKIP no unsupported variant"); sys.exit(0)
try:
    if op == "ternary_gemv":
        ternary.gemv(ternary.pack(np.ones((2, 16), np.int8)), np.ones(16, np.float32), isa=names[0])
    elif op == "widely_linear":
        pl, sc = widely_linear.quantize(np.ones((2, 2), np.float32), 1)
        widely_linear.prepare(pl, sc, 1, isa=names[0])
    else:
        moe.prepare(np.ones((1, 2, 2), ml_dtypes.bfloat16), isa=names[0])
except ValueError as e:
    print("OK", e); sys.exit(0)
print("NO ERROR for", names[0]); sys.exit(1)
"""


@pytest.mark.parametrize("op", ["ternary_gemv", "widely_linear", "fused_moe"])
def test_forcing_an_unsupported_variant_is_a_value_error(op):
    if UNDER_QEMU:
        pytest.skip("qemu-user cannot start a guest subprocess without binfmt_misc; "
                    "test_api covers the variants this emulated CPU lacks in-process")
    hide = "avx512f,avx512bw,avx512bf16,avx2,bmi2,bf16,i8mm"
    env = dict(os.environ, CPUKERN_DISABLE_FEATURES=hide)
    out = subprocess.run([sys.executable, "-c", _FORCE_CODE, op], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stdout}{out.stderr}"
    if out.stdout.startswith("SKIP"):
        pytest.skip(f"{op}: every variant still runs with {hide} hidden")
    assert out.stdout.startswith("OK isa: variant"), out.stdout


# --- bad input outside the table: modules, torch ops, one-line messages, int64 ids -----------

RNG = np.random.default_rng(27)


def _torch():
    return pytest.importorskip("torch", reason="torch is not installed here")


def one_line(e):
    msg = str(e.value)
    assert "\n" not in msg and "incompatible function arguments" not in msg, msg
    return msg


def small_ternary(m=8, k=32):
    w = RNG.integers(-1, 2, (m, k)).astype(np.int8)
    return ternary.prepare(ternary.pack(w), k), w


def test_module_constructors_check_their_arguments():
    _torch()
    from cpukern.torch import FusedMoE, TernaryLinear, WidelyLinear

    with pytest.raises(ValueError, match=r"topk: expected 1 <= topk <= num_experts = 4, got 5"):
        FusedMoE(4, 32, 32, topk=5)
    with pytest.raises(ValueError, match="topk: expected an integer in"):
        FusedMoE(4, 32, 32, topk=0)
    with pytest.raises(ValueError, match="num_experts"):
        FusedMoE(0, 32, 32)
    with pytest.raises(ValueError, match="activation"):
        FusedMoE(4, 32, 32, activation="relu")
    with pytest.raises(ValueError, match="in_features: expected an integer in"):
        TernaryLinear(-5, 4)
    with pytest.raises(ValueError, match="out_features"):
        TernaryLinear(16, 0)
    with pytest.raises(TypeError, match="in_features: expected an integer"):
        TernaryLinear(16.5, 4)
    with pytest.raises(ValueError, match="act"):
        TernaryLinear(16, 4, act="int4")
    with pytest.raises(ValueError, match="group_size"):
        TernaryLinear(16, 4, group_size=8)
    with pytest.raises(ValueError, match="stages"):
        WidelyLinear(16, 4, stages=0)
    assert FusedMoE(4, 32, 32, topk=4).topk == 4 and TernaryLinear(np.int64(16), 4).in_features == 16


def test_torch_ops_refuse_unknown_isa_names():
    torch = _torch()
    import cpukern.torch  # noqa: F401

    packed = torch.from_numpy(ternary.pack(RNG.integers(-1, 2, (8, 32)).astype(np.int8)).view(np.int32))
    x = torch.randn(32)
    for name in ("amx", "vec", "neon", "avx2x"):
        with pytest.raises(ValueError, match=r"isa: .*'" + name + r"'.*known: .*reference"):
            torch.ops.cpukern.ternary_gemv(packed, x, None, "fp32", name)
    torch.ops.cpukern.ternary_gemv(packed, x, None, "fp32", "auto")
    w13 = torch.randn(2, 64, 32).to(torch.bfloat16)
    w2 = torch.randn(2, 32, 32).to(torch.bfloat16)
    xb = torch.randn(1, 32).to(torch.bfloat16)
    args = (xb, w13, w2, torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.int32), "silu", None,
            None, False)
    from cpukern.torch.ops import VLLM_MOE_ISA_ALIASES
    aliases = VLLM_MOE_ISA_ALIASES[cpukern.cpu_info()["arch"]]
    variants = [v["name"] for v in cpukern.kernels("fused_moe")]
    for name in ("amx", "vec", "neon"):
        if name in aliases or name in variants:
            torch.ops.cpukern.fused_moe(*args, name)
        else:
            with pytest.raises(ValueError, match=r"isa: .*'" + name + "'"):
                torch.ops.cpukern.fused_moe(*args, name)


def test_argument_errors_are_one_line():
    tw, _ = small_ternary()
    ro = ternary.aligned_empty(ternary.serialized_size(tw))
    ro.flags.writeable = False
    with pytest.raises(TypeError) as e:
        ternary.to_bytes(tw, out=ro)
    assert one_line(e).startswith("out: expected a writeable array")
    p = moe.prepare(RNG.standard_normal((2, 8, 32)).astype(BF))
    ro = ternary.aligned_empty(moe.serialized_size(p))
    ro.flags.writeable = False
    with pytest.raises(TypeError) as e:
        moe.to_bytes(p, out=ro)
    assert one_line(e).startswith("out: expected a writeable array")
    with pytest.raises(TypeError) as e:
        moe.serialized_size(np.zeros(4))
    assert one_line(e).startswith("experts: expected PackedExperts")
    with pytest.raises(TypeError) as e:
        tw.to_bytes(int8="yes")
    assert one_line(e).startswith("int8: expected a bool")
    with pytest.raises(TypeError) as e:
        ternary.from_buffer(ternary.to_bytes(tw), name=5)
    assert one_line(e).startswith("name: expected a str")
    with pytest.raises(TypeError) as e:
        moe.from_buffer(moe.to_bytes(p), name=None)
    assert one_line(e).startswith("name: expected a str")
    with pytest.raises(ValueError) as e:
        ternary.to_bytes(tw, out=ternary.aligned_empty(64))
    assert one_line(e).startswith("out: expected shape")


def test_isa_names_with_nul_are_refused():
    packed = ternary.pack(np.ones((2, 16), np.int8))
    for call in (lambda isa: ternary.prepare(packed, 16, isa=isa),
                 lambda isa: moe.prepare(np.zeros((1, 2, 32), BF), isa=isa)):
        with pytest.raises(ValueError, match=r"isa: .*'avx2\\x00junk'"):
            call("avx2\x00junk")
