"""The bad-input table runner shared by the contract-test files.

A table is a module-level list BAD_INPUT of (id, exception, argument named, case), case a function
of a Ctx. Kinds of bad argument: dtype, ndim, shape relation, value range, out= shape / dtype /
read-only / overlap, threads, variant / activation / act names, non-contiguous, foreign types, huge
sizes. Each case must raise the listed exception type (ValueError / TypeError / MemoryError)
with a one-line message that starts with the argument's name ("arg: expected ..., got ..."),
before any kernel runs: an `out=` array given to a failing call is left untouched.

Each case runs in its own process, forked from a fresh interpreter (multiprocessing's
forkserver), so that a crash (SIGSEGV, SIGILL, abort) fails that case instead of killing the
test runner. Under qemu-user (the aarch64 legs) a Python process cannot start a guest
interpreter, so the cases run in-process there (the reason is printed).
"""

from __future__ import annotations

import importlib
import multiprocessing
import sys
import traceback
import warnings

import ml_dtypes
import numpy as np
import pytest

import cpukern
from cpukern import moe, ternary, widely_linear
from variants import UNDER_QEMU

BF16 = ml_dtypes.bfloat16


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
        self.W13 = rng.standard_normal((e, 2 * i, h)).astype(BF16)
        self.W2 = rng.standard_normal((e, h, i)).astype(BF16)
        self.p13, self.p2 = moe.prepare(self.W13), moe.prepare(self.W2)
        self.xb = rng.standard_normal((t, h)).astype(BF16)
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


def read_only(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def non_contiguous(a):
    """A non-contiguous view with the same dtype (every other element of the last axis)."""
    b = np.repeat(a, 2, axis=-1)
    return b[..., ::2]


def case_ids(table):
    ids = [case[0] for case in table]
    assert len(set(ids)) == len(ids), "duplicate case id"
    return ids


def run_case(module: str, case_id: str):
    """Runs one case of `module`'s BAD_INPUT; returns (exception class name or None, message,
    untouched out= arrays?, traceback)."""
    fn = {case[0]: case for case in importlib.import_module(module).BAD_INPUT}[case_id][3]
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


def _child(module, case_id, conn):
    conn.send(run_case(module, case_id))
    conn.close()


# --- the runner -------------------------------------------------------------------------------

_CONTEXT = None


def _mp_context():
    """The forkserver, with every table module collected so far preloaded (a child then only
    looks its case up)."""
    global _CONTEXT
    if _CONTEXT is None:
        ctx = multiprocessing.get_context("forkserver")
        tables = [name for name, m in list(sys.modules.items()) if "BAD_INPUT" in getattr(m, "__dict__", {})]
        ctx.set_forkserver_preload(["numpy", "ml_dtypes", "cpukern", __name__, *tables])
        _CONTEXT = ctx
    return _CONTEXT


def isolated(module: str, case_id: str, first: bool):
    """run_case in a fresh process: a crash becomes a test failure naming the signal."""
    if UNDER_QEMU:
        reason = ("qemu-user cannot start a guest interpreter (no binfmt_misc): bad-input cases run "
                  "in-process on this leg, without crash isolation")
        print(f"[{case_id}] {reason}")
        if first:
            warnings.warn(reason)
        return run_case(module, case_id)
    ctx = _mp_context()
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(module, case_id, child))
    p.start()
    child.close()
    result = parent.recv() if parent.poll(120) else None
    p.join(30)
    if result is None:
        pytest.fail(f"{case_id}: the process died with exit code {p.exitcode} "
                    f"({'signal ' + str(-p.exitcode) if p.exitcode and p.exitcode < 0 else 'no result'})")
    return result


def check_bad_input(module: str, case_id: str):
    """The test of one case of `module`'s BAD_INPUT (call it with the test module's __name__)."""
    table = importlib.import_module(module).BAD_INPUT
    _, exc, arg, _ = {case[0]: case for case in table}[case_id]
    got, msg, untouched, tb = isolated(module, case_id, first=case_id == table[0][0])
    assert got is not None, f"{case_id}: no exception (expected {exc.__name__} naming {arg!r})"
    assert got == exc.__name__, f"{case_id}: expected {exc.__name__}, got {got}: {msg}\n{tb}"
    assert "\n" not in msg, f"{case_id}: the message is not one line: {msg!r}"
    assert msg.startswith(f"{arg}: "), f"{case_id}: the message does not start with '{arg}: ': {msg!r}"
    assert untouched, f"{case_id}: out= was written before the error"
