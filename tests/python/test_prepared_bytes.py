"""Prepared weights as bytes (to_bytes / from_buffer, state_dict tensors, pickling): buffers
whose header was edited are refused, with or without verify; every weight format pickles and
deep-copies to equal results; buffers of another kind, and bad arguments of to_bytes /
from_buffer / serialized_size, are refused naming the argument."""

from __future__ import annotations

import copy
import pickle
import struct

import ml_dtypes
import numpy as np
import pytest

import cpukern
from bad_input_table import case_ids, check_bad_input
from contract import small_ternary
from cpukern import moe, ternary, widely_linear
from variants import variant_params

BF16 = ml_dtypes.bfloat16
RNG = np.random.default_rng(27)


def _torch():
    return pytest.importorskip("torch", reason="torch is not installed here")


SECTION_TABLE = 296  # offset of the blob header's section table (kernels/common/prepared_blob.h)


def _blobs(variant_t, variant_wl):
    w = RNG.integers(-1, 2, (16, 64)).astype(np.int8)
    yield ternary.to_bytes(ternary.prepare(ternary.pack(w), 64, RNG.random(16).astype(np.float32),
                                           variant=variant_t))
    planes, scales = widely_linear.quantize(RNG.standard_normal((8, 32)).astype(np.float32), 2)
    yield ternary.to_bytes(widely_linear.prepare(planes, scales, 16, variant=variant_wl))


@pytest.mark.parametrize("variant", variant_params("ternary_gemv"))
def test_moved_section_and_flipped_names_are_refused(variant):
    """Section 1 (the scales) moved 64 bytes back into the layout is refused with or without
    verify (accepted, gemv would read the layout as scales); a flipped bit in the variant or
    micro-kernel name is refused under verify (never re-prepared for another variant)."""
    wl = [v["name"] for v in cpukern.kernels("widely_linear")]
    for blob in _blobs(variant, variant if variant in wl else wl[0]):
        moved = blob.copy()
        off = struct.unpack_from("<Q", moved, SECTION_TABLE + 16)[0]
        struct.pack_into("<Q", moved, SECTION_TABLE + 16, off - 64)
        for verify in (True, False):
            with pytest.raises(ValueError, match="^buffer: "):
                ternary.from_buffer(moved, verify=verify)
        for pos in (32, 33, 64, 70):  # the variant and micro-kernel names
            flipped = blob.copy()
            flipped[pos] ^= 1
            with pytest.raises(ValueError, match="^buffer: "):
                ternary.from_buffer(flipped, verify=True)


def test_moved_section_in_a_state_dict_is_refused():
    """A state_dict's packed weight (as a PackedWeightsTensor or as the plain uint8 blob a
    safetensors file holds) with a moved section: refused naming the key, nothing loaded."""
    torch = _torch()
    from cpukern.torch import TernaryLinear, WidelyLinear
    for mod, make in ((TernaryLinear.from_linear(torch.nn.Linear(64, 16)), lambda: TernaryLinear(64, 16)),
                      (WidelyLinear.from_linear(torch.nn.Linear(64, 40)), lambda: WidelyLinear(64, 40))):
        sd = mod.state_dict()
        t = sd["weight"].blob.clone().numpy()
        off = struct.unpack_from("<Q", t, SECTION_TABLE + 16)[0]
        struct.pack_into("<Q", t, SECTION_TABLE + 16, off - 64)
        target = make()
        with pytest.raises(ValueError, match="^weight: "):
            target.load_state_dict(sd | {"weight": torch.from_numpy(t)})
        assert target.weight.is_empty
        target.load_state_dict(sd)  # the intact one loads
        x = torch.randn(3, 64)
        assert torch.equal(target(x), mod(x))


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4", "int8"])
def test_packed_experts_pickle_and_deepcopy(fmt):
    w = RNG.standard_normal((2, 8, 64)).astype(BF16)
    if fmt == "bf16":
        p = moe.prepare(w)
    else:
        a, b = moe.quantize(w, format=fmt)
        p = moe.prepare(a, format=fmt, scales=b)
    for q in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p), copy.copy(p)):
        assert isinstance(q, cpukern.PackedWeights) and q.format == fmt and q.shape == p.shape
        np.testing.assert_array_equal(moe.to_bytes(q), moe.to_bytes(p))


# --- bad input: (id, exception, argument named, case); see bad_input_table.py ---------------------

BAD_INPUT = [
    # from_buffer: a buffer of another kind, or no prepared weights at all
    ("moe_from_buffer/ternary_blob", ValueError, "buffer", lambda c: moe.from_buffer(ternary.to_bytes(c.TW))),
    ("ternary_from_buffer/moe_blob", ValueError, "buffer", lambda c: ternary.from_buffer(moe.to_bytes(c.p2))),
    ("ternary_from_buffer/not_a_blob", ValueError, "buffer",
     lambda c: (lambda b: (b.fill(0), ternary.from_buffer(b)))(ternary.aligned_empty(512))),
]


@pytest.mark.parametrize("case_id", case_ids(BAD_INPUT))
def test_bad_input(case_id):
    check_bad_input(__name__, case_id)


def one_line(e):
    msg = str(e.value)
    assert "\n" not in msg and "incompatible function arguments" not in msg, msg
    return msg


def test_argument_errors_are_one_line():
    tw, _ = small_ternary()
    ro = ternary.aligned_empty(ternary.serialized_size(tw))
    ro.flags.writeable = False
    with pytest.raises(TypeError) as e:
        ternary.to_bytes(tw, out=ro)
    assert one_line(e).startswith("out: expected a writeable array")
    p = moe.prepare(RNG.standard_normal((2, 8, 32)).astype(BF16))
    ro = ternary.aligned_empty(moe.serialized_size(p))
    ro.flags.writeable = False
    with pytest.raises(TypeError) as e:
        moe.to_bytes(p, out=ro)
    assert one_line(e).startswith("out: expected a writeable array")
    with pytest.raises(TypeError) as e:
        moe.serialized_size(np.zeros(4))
    assert one_line(e).startswith("experts: expected PackedWeights")
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
