"""Calls from many Python threads at once (the GIL is released while kernels run) give exactly
the results of serial calls: 8 threads x 200 calls mixed across every op, variant and thread
count, including preparing / packing weights concurrently."""

from __future__ import annotations

import os
import threading

import ml_dtypes
import numpy as np

import cpukern
from cpukern import moe, ternary, widely_linear
from variants import supported

UNDER_QEMU = bool(os.environ.get("CPUKERN_QEMU_CPU"))
THREADS = 8
CALLS = 25 if UNDER_QEMU else 200
BF16 = ml_dtypes.bfloat16


def _bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 1: np.uint8}[a.itemsize]).copy()


def _make_jobs():
    """(name, zero-argument call) pairs over small shapes; every call is pure."""
    rng = np.random.default_rng(2024)
    jobs = []
    for i, (m, k) in enumerate([(7, 33), (40, 100), (64, 256), (1, 1)]):
        w = rng.integers(-1, 2, size=(m, k)).astype(np.int8)
        packed = ternary.pack(w)
        s = rng.uniform(0.5, 2, m).astype(np.float32)
        for variant in supported("ternary_gemv"):
            tw = ternary.prepare(packed, k, s, variant=variant)
            x1 = rng.standard_normal(k).astype(np.float32)
            xb = rng.standard_normal((3, k)).astype(np.float32)
            for t in (None, 1, 3):
                jobs.append((f"gemv{i}/{variant}/fp32/t{t}", lambda tw=tw, x=x1, t=t: ternary.gemv(tw, x, threads=t)))
                jobs.append((f"gemv{i}/{variant}/int8/t{t}", lambda tw=tw, x=xb, t=t: ternary.gemv(tw, x, act="int8", threads=t)))
            jobs.append((f"prepare+gemv{i}/{variant}", lambda p=packed, k=k, s=s, variant=variant, x=x1:
                         ternary.gemv(ternary.prepare(p, k, s, variant=variant), x)))
        jobs.append((f"unpack{i}", lambda p=packed, k=k: ternary.unpack(p, k)))
        jobs.append((f"pack{i}", lambda w=w: ternary.pack(w)))
    for i, (n2, m2, stages) in enumerate([(8, 64, 2), (34, 50, 1)]):
        a = rng.standard_normal((n2, m2)).astype(np.float32)
        planes, scales = widely_linear.quantize(a, stages)
        for variant in supported("widely_linear"):
            layer = widely_linear.prepare(planes, scales, m2 // 2, variant=variant)
            x = rng.standard_normal((2, m2)).astype(np.float32)
            for t in (None, 2):
                jobs.append((f"wl{i}/{variant}/t{t}", lambda l=layer, x=x, t=t: widely_linear.apply(l, x, threads=t)))
            jobs.append((f"wl{i}/{variant}/unfused", lambda l=layer, x=x: widely_linear.apply(l, x, fused=False)))
        jobs.append((f"phase_quantize{i}", lambda a=a, s=stages: widely_linear.quantize(a, s)[0]))
    for i, (e, h, inter, t_count, topk) in enumerate([(4, 32, 16, 5, 2), (8, 24, 40, 9, 3)]):
        w13 = (rng.standard_normal((e, 2 * inter, h)) / np.sqrt(h)).astype(BF16)
        w2 = (rng.standard_normal((e, h, inter)) / np.sqrt(inter)).astype(BF16)
        x = rng.standard_normal((t_count, h)).astype(BF16)
        logits = rng.standard_normal((t_count, e)).astype(np.float32)
        tw, ids = moe.route(logits, topk)
        jobs.append((f"route{i}", lambda l=logits, k=topk: moe.route(l, k)[0]))
        for variant in supported("fused_moe"):
            p13, p2 = moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant)
            for act in ("silu", "swigluoai"):
                for t in (None, 2):
                    jobs.append((f"moe{i}/{variant}/{act}/t{t}",
                                 lambda p13=p13, p2=p2, x=x, tw=tw, ids=ids, act=act, t=t:
                                 moe.fused_moe(x, p13, p2, tw, ids, activation=act, threads=t)))
            jobs.append((f"prepare+moe{i}/{variant}", lambda w13=w13, w2=w2, x=x, tw=tw, ids=ids, variant=variant:
                         moe.fused_moe(x, moe.prepare(w13, variant=variant), moe.prepare(w2, variant=variant), tw, ids)))
    return jobs


def test_threads_calling_at_once_equal_serial_calls():
    jobs = _make_jobs()
    expected = [_bits(call()) for _, call in jobs]
    # A deterministic, different mix per thread.
    plans = [np.random.default_rng(100 + i).integers(0, len(jobs), CALLS) for i in range(THREADS)]
    errors = []
    barrier = threading.Barrier(THREADS)

    def worker(plan):
        try:
            barrier.wait()
            for j in plan:
                got = _bits(jobs[j][1]())
                if got.shape != expected[j].shape or not np.array_equal(got, expected[j]):
                    errors.append(f"{jobs[j][0]}: differs from the serial call")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads), "a thread did not finish (deadlock?)"
    assert not errors, f"{len(errors)} mismatches, first: {errors[:5]}"


def test_set_num_threads_while_other_threads_compute():
    """Changing the default thread count concurrently never changes results."""
    rng = np.random.default_rng(3)
    w = rng.integers(-1, 2, size=(96, 512)).astype(np.int8)
    tw = ternary.prepare(ternary.pack(w), 512)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    want = _bits(ternary.gemv(tw, x))
    errors = []
    stop = threading.Event()

    def flipper():
        i = 0
        while not stop.is_set():
            cpukern.set_num_threads(1 + i % 4)
            i += 1
        cpukern.set_num_threads(0)

    def worker():
        for _ in range(CALLS // 2):
            if not np.array_equal(_bits(ternary.gemv(tw, x)), want):
                errors.append("differs")

    f = threading.Thread(target=flipper)
    f.start()
    ws = [threading.Thread(target=worker) for _ in range(4)]
    for t in ws:
        t.start()
    for t in ws:
        t.join(600)
    stop.set()
    f.join(60)
    assert not errors


def test_serialising_while_another_thread_makes_the_first_int8_call():
    """to_bytes and pickling race the first act="int8" gemv on the same fresh weights (which
    packs the int8 layout and so changes what to_bytes includes): every export is one
    consistent snapshot that loads and computes what the weights compute (issue 47, item 4:
    the size was taken before the layout appeared, a spurious ValueError about out's shape)."""
    import pickle

    rng = np.random.default_rng(47)
    m, k = 512, 1024
    packed = ternary.pack(rng.integers(-1, 2, size=(m, k)).astype(np.int8))
    x = rng.standard_normal((2, k)).astype(np.float32)
    rounds = 3 if UNDER_QEMU else 30
    for variant in supported("ternary_gemv"):
        want = ternary.gemv(ternary.prepare(packed, k, variant=variant), x, act="int8")
        for _ in range(rounds):
            w = ternary.prepare(packed, k, variant=variant)
            start = threading.Barrier(2)
            errors = []

            def first_int8_call():
                start.wait()
                try:
                    ternary.gemv(w, x, act="int8")
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(e)

            t = threading.Thread(target=first_int8_call)
            t.start()
            start.wait()
            exports = []
            while t.is_alive() or len(exports) < 3:  # exports straddle the packing's end
                exports.append(ternary.to_bytes(w) if len(exports) % 2 else pickle.dumps(w))
            t.join()
            assert not errors, errors
            for e in exports:
                loaded = pickle.loads(e) if isinstance(e, bytes) else ternary.from_buffer(e, verify=True)
                np.testing.assert_array_equal(ternary.gemv(loaded, x, act="int8"), want)
