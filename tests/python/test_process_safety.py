"""cpukern inside real host processes: forked children (os.fork, multiprocessing "fork") get a
working thread pool, and daemon threads still inside a kernel when the interpreter exits do not
abort the process."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time

import ml_dtypes
import numpy as np
import pytest

from cpukern import moe, ternary, widely_linear
from variants import UNDER_QEMU

BF16 = ml_dtypes.bfloat16


def _ops():
    """One call of every op, taking `threads`; the expected results (single thread)."""
    rng = np.random.default_rng(5)
    w = rng.integers(-1, 2, size=(96, 200)).astype(np.int8)
    tw = ternary.prepare(ternary.pack(w), 200)
    x = rng.standard_normal((3, 200)).astype(np.float32)
    planes, scales = widely_linear.quantize(rng.standard_normal((32, 64)).astype(np.float32), 2)
    layer = widely_linear.prepare(planes, scales, 32)
    xw = rng.standard_normal((2, 64)).astype(np.float32)
    e, h, inter, t = 4, 32, 48, 6
    w13 = moe.prepare((rng.standard_normal((e, 2 * inter, h)) / 8).astype(BF16))
    w2 = moe.prepare((rng.standard_normal((e, h, inter)) / 8).astype(BF16))
    xm = rng.standard_normal((t, h)).astype(BF16)
    weights, ids = moe.route(rng.standard_normal((t, e)).astype(np.float32), 2)
    calls = {
        "gemv": lambda n: ternary.gemv(tw, x, threads=n),
        "gemv_int8": lambda n: ternary.gemv(tw, x, act="int8", threads=n),
        "widely_linear": lambda n: widely_linear.apply(layer, xw, threads=n),
        "fused_moe": lambda n: moe.fused_moe(xm, w13, w2, weights, ids, threads=n),
    }
    expected = {name: np.asarray(call(1)).copy() for name, call in calls.items()}
    return calls, expected


CALLS, EXPECTED = _ops()


def _child_runs_every_op(threads):
    for name, call in CALLS.items():
        if not np.array_equal(np.asarray(call(threads)), EXPECTED[name]):
            return f"{name} differs in the child"
    return ""


def _wait(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


QEMU_FORK = pytest.mark.skipif(
    UNDER_QEMU, reason="qemu-user 7.2 aborts in the forked child of a multi-threaded guest (its "
    "own assertion in cpu_exec); fork safety is tested on the host leg")


@QEMU_FORK
def test_forked_children_run_every_op_with_more_threads_than_the_parent_used():
    rounds = 20
    for r in range(rounds):
        parent_threads, child_threads = (2, 4) if r % 2 == 0 else (4, 2)
        for call in CALLS.values():
            call(parent_threads)
        pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            code = 1
            try:
                code = 0 if not _child_runs_every_op(child_threads) else 3
            finally:
                os._exit(code)
        code = _wait(pid, 120)
        assert code is not None, f"round {r}: the child hung (fork deadlock)"
        assert code == 0, f"round {r}: the child failed (exit {code})"


def _pool_task(threads):
    return _child_runs_every_op(threads)


@QEMU_FORK
def test_multiprocessing_fork_pool():
    for call in CALLS.values():
        call(2)
    ctx = multiprocessing.get_context("fork")
    for _ in range(3):
        with ctx.Pool(2) as pool:
            result = pool.map_async(_pool_task, [1, 2, 3, 4])
            errors = result.get(timeout=300)
        assert errors == [""] * 4


EXIT_SCRIPT = textwrap.dedent("""
    import threading, time
    import numpy as np, ml_dtypes
    from cpukern import moe, ternary
    rng = np.random.default_rng(0)
    tw = ternary.prepare(ternary.pack(rng.integers(-1, 2, size=(2048, 2048)).astype(np.int8)), 2048)
    x = rng.standard_normal((1, 2048)).astype(np.float32)
    e, h, i, t = 8, 256, 256, 16
    w13 = moe.prepare(rng.standard_normal((e, 2 * i, h)).astype(ml_dtypes.bfloat16))
    w2 = moe.prepare(rng.standard_normal((e, h, i)).astype(ml_dtypes.bfloat16))
    xm = rng.standard_normal((t, h)).astype(ml_dtypes.bfloat16)
    wts, ids = moe.route(rng.standard_normal((t, e)).astype(np.float32), 2)
    def gemv_loop():
        while True:
            ternary.gemv(tw, x, threads=2)
    def moe_loop():
        while True:
            moe.fused_moe(xm, w13, w2, wts, ids, threads=2)
    for f in (gemv_loop, moe_loop):
        threading.Thread(target=f, daemon=True).start()
    time.sleep(0.2)
    print("main thread exits")
""")


@pytest.mark.skipif(UNDER_QEMU, reason="qemu-user cannot start a guest subprocess without "
                    "binfmt_misc; covered on the host leg")
def test_daemon_threads_inside_kernels_at_interpreter_exit():
    for _ in range(5):
        r = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True,
                           timeout=120, env=os.environ)
        assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-500:]}"
        assert "terminate called" not in r.stderr and "leaked" not in r.stderr, r.stderr[-500:]
        assert "main thread exits" in r.stdout


# A daemon thread inside a binding while the interpreter exits.
BINDING_EXIT_SCRIPT = textwrap.dedent("""
    import gc, sys, threading, time
    import numpy as np
    from cpukern import ternary
    mode = sys.argv[1]
    rng = np.random.default_rng(0)
    if mode == "torch":
        import torch
        m = k = 64
        x = torch.randn(4, k)
        hooked = ("__dlpack__",)
    else:  # numpy, large enough to be stoppable by Ctrl-C (the SIGINT check)
        m = k = 2048
        x = rng.standard_normal((16, k)).astype(np.float32)
        hooked = ("main_thread", "ident")
    w = ternary.prepare(ternary.pack(rng.integers(-1, 2, (m, k)).astype(np.int8)), k)
    entered, done = threading.Event(), threading.Event()

    def hook(frame, event, arg):
        # Python code running inside a binding: let the interpreter finalise meanwhile
        if event == "call" and frame.f_code.co_name in hooked:
            sys.setprofile(None)
            entered.set()
            time.sleep(0.3)

    def worker():
        sys.setprofile(hook)
        ternary.gemv(w, x)
        sys.setprofile(None)
        done.set()
        threading.Event().wait()

    class SlowFinalizer:  # keeps the interpreter finalising until the worker wakes up
        def __del__(self, _sleep=time.sleep):
            _sleep(1.0)

    gc.disable()
    cycle = SlowFinalizer()
    cycle.self = cycle  # collected (its __del__ run) by the collection at finalisation
    del cycle
    threading.Thread(target=worker, daemon=True).start()
    while not (entered.is_set() or done.is_set()):
        time.sleep(0.001)
    print("python code ran inside the binding" if entered.is_set() else "clean")
""")


@pytest.mark.skipif(UNDER_QEMU, reason="qemu-user cannot start guest subprocesses")
@pytest.mark.parametrize("mode", ["numpy", "torch"])
def test_interpreter_exit_during_a_binding_call_does_not_abort(tmp_path, mode):
    """A daemon thread inside a binding when the interpreter exits: no Python code runs inside
    a binding (torch tensors went through Tensor.__dlpack__, the SIGINT check through
    threading.main_thread()), so the thread is never ended there (that was 'terminate called
    without an active exception', rc 134)."""
    if mode == "torch":
        pytest.importorskip("torch", reason="torch is not installed here")
    script = tmp_path / "exit.py"
    script.write_text(BINDING_EXIT_SCRIPT)
    r = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, CPUKERN_VERBOSE="0"))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "clean" in r.stdout, r.stdout
