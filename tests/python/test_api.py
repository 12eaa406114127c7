"""The library-wide API: CPU info, kernel listing and selection, the thread count, their bad
input, and the environment variables read at import (CPUKERN_VARIANT, CPUKERN_HUGEPAGES,
CPUKERN_SPIN_US). Forcing a variant by name (variant=) and threads= per call: test_arguments.py."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import cpukern
from bad_input_table import case_ids, check_bad_input
from contract import needs_subprocess, needs_torch, run_python, torch

OPS = ("ternary_gemv", "widely_linear", "fused_moe", "linear", "decode_attention")


def test_cpu_info_reports_architecture_and_features():
    info = cpukern.cpu_info()
    assert info["arch"] in ("x86_64", "aarch64")
    assert isinstance(info["features"], list)
    assert info["num_cores"] >= 1
    if info["arch"] == "aarch64":
        assert "neon" in info["features"]


@pytest.mark.parametrize("op", OPS)
def test_kernels_lists_variants_with_exactly_one_selected(op):
    vs = cpukern.kernels(op)
    names = [v["name"] for v in vs]
    assert "reference" in names
    assert len(set(names)) == len(names)
    selected = [v for v in vs if v["selected"]]
    assert len(selected) == 1 and selected[0]["supported"]
    # The selected one is the highest-priority supported variant.
    best = max((v for v in vs if v["supported"]), key=lambda v: v["priority"])
    assert selected[0]["name"] == best["name"]
    for v in vs:
        assert v["ukernel"].startswith(("ternary_gemv", "widely_linear", "moe", "attention")), v


def test_kernels_rejects_unknown_op():
    with pytest.raises(ValueError, match="op: expected one of"):
        cpukern.kernels("conv2d")


def test_arm_dispatch_follows_bf16():
    info = cpukern.cpu_info()
    if info["arch"] != "aarch64":
        pytest.skip("aarch64 only: checks BFMMLA (+SMMLA) is selected exactly when FEAT_BF16 and "
                    "FEAT_I8MM are present, else SDOT with dotprod")
    selected = next(v["name"] for v in cpukern.kernels("fused_moe") if v["selected"])
    f = info["features"]
    assert selected == ("neon_bf16_bfmmla" if "bf16" in f and "i8mm" in f else
                        "neon_dotprod" if "dotprod" in f else "neon")


def test_environment_variable_forces_the_default():
    if os.environ.get("CPUKERN_QEMU_CPU"):
        pytest.skip("qemu-user cannot start a guest subprocess without binfmt_misc; covered on the host leg")
    code = ("import cpukern; print([v['name'] for v in cpukern.kernels('ternary_gemv') if v['selected']][0]);"
            "print([v['name'] for v in cpukern.kernels('fused_moe') if v['selected']][0])")
    env = dict(os.environ, CPUKERN_VARIANT="reference")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["reference", "reference"]
    env = dict(os.environ, CPUKERN_VARIANT="fused_moe=reference")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[1] == "reference"


def test_fused_moe_lists_amx_and_says_why_it_is_missing():
    if cpukern.cpu_info()["arch"] != "x86_64":
        pytest.skip("x86-64 only: the amx row exists on x86-64 builds")
    vs = {v["name"]: v for v in cpukern.kernels("fused_moe")}
    amx = vs["amx"]
    assert {"amx_tile", "amx_bf16", "amx_int8", "avx512bf16"} <= set(amx["requires"])
    assert amx["priority"] > vs["avx512_bf16"]["priority"]
    assert amx["supported"] == (not amx["missing"])
    assert (amx["why"] == "") == amx["supported"], amx
    for name in amx["missing"]:
        assert name in amx["why"], amx
    if os.environ.get("CPUKERN_QEMU_CPU"):
        return  # qemu-user cannot start a guest subprocess
    code = "import cpukern; print([v['why'] for v in cpukern.kernels('fused_moe') if v['name'] == 'amx'][0])"
    env = dict(os.environ, CPUKERN_DISABLE_FEATURES="amx")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    if "amx_tile" in cpukern.cpu_info()["features"]:
        assert "hidden by CPUKERN_DISABLE_FEATURES" in out.stdout, out.stdout
    assert "amx_tile" in out.stdout, out.stdout


def test_set_num_threads():
    default = None if cpukern.num_threads_is_set() else cpukern.get_num_threads()
    try:
        cpukern.set_num_threads(3)
        assert cpukern.get_num_threads() == 3 and cpukern.num_threads_is_set()
    finally:
        cpukern.set_num_threads(0)
    # 0 restores the default: all the cores this process may use (affinity, cgroup quota)
    assert not cpukern.num_threads_is_set()
    assert 1 <= cpukern.get_num_threads() <= cpukern.cpu_info()["num_cores"]
    if default is not None:
        assert cpukern.get_num_threads() == default


def test_limits_come_from_the_extension():
    lim = cpukern._ext.limits
    assert lim == {"max_elements": 2**46, "max_threads": 4096, "max_pool_threads": 256}
    assert (cpukern.MAX_ELEMS, cpukern.MAX_THREADS, cpukern.MAX_POOL_THREADS) == (
        lim["max_elements"], lim["max_threads"], lim["max_pool_threads"])


BAD_INPUT = [
    # cpukern.kernels / set_num_threads
    ("kernels/unknown_op", ValueError, "op", lambda c: cpukern.kernels("conv2d")),
    ("kernels/op_type", TypeError, "op", lambda c: cpukern.kernels(["ternary_gemv"])),
    ("set_num_threads/negative", ValueError, "n", lambda c: cpukern.set_num_threads(-1)),
    ("set_num_threads/huge", ValueError, "n", lambda c: cpukern.set_num_threads(2**40)),
    ("set_num_threads/type", TypeError, "n", lambda c: cpukern.set_num_threads("4")),
    ("set_num_threads/float", TypeError, "n", lambda c: cpukern.set_num_threads(2.0)),
]


@pytest.mark.parametrize("case_id", case_ids(BAD_INPUT))
def test_bad_input(case_id):
    check_bad_input(__name__, case_id)


def _nested(*rows):
    return torch.nested.nested_tensor([torch.as_tensor(r) for r in rows])


# Every op's array argument given a nested (jagged) tensor, which has no single shape.
_NESTED_CASES = {
    "ternary.gemv/x": lambda: cpukern.ternary.gemv(
        cpukern.ternary.prepare(cpukern.ternary.pack(np.ones((4, 16), np.int8)), 16),
        _nested(np.ones(16, np.float32), np.ones(8, np.float32))),
    "ternary.pack/w": lambda: cpukern.ternary.pack(_nested(np.ones(16, np.int8), np.ones(3, np.int8))),
    "widely_linear.apply/x": lambda: cpukern.widely_linear.apply(
        cpukern.widely_linear.prepare(*cpukern.widely_linear.quantize(np.ones((4, 4), np.float32)), 2),
        _nested(np.ones(4, np.float32), np.ones(2, np.float32))),
    "linear.linear/x": lambda: cpukern.linear.linear(
        _nested(np.ones(8, np.float32), np.ones(4, np.float32)).to(torch.bfloat16),
        cpukern.linear.prepare(np.ones((4, 8), ml_dtypes.bfloat16))),
}


@needs_torch
@pytest.mark.parametrize("case", sorted(_NESTED_CASES))
def test_nested_tensors_are_a_value_error_naming_the_argument(case):
    """A nested tensor has no single shape (its .shape raises RuntimeError): ValueError naming
    the argument (issue 47, item 10), never torch's RuntimeError."""
    with pytest.raises(ValueError, match=rf"^{case.split('/')[1]}: expected a tensor of one shape, got a nested"):
        _NESTED_CASES[case]()


def test_set_num_threads_limits():
    try:
        cpukern.set_num_threads(cpukern.MAX_THREADS)
        assert cpukern.get_num_threads() in (cpukern.MAX_THREADS, cpukern.MAX_POOL_THREADS)
        limit = cpukern.MAX_THREADS
        for bad in (-1, limit + 1):
            with pytest.raises(ValueError, match=rf"^n: expected 0 \(the default\) or 1\.\.{limit}, got {bad}$"):
                cpukern.set_num_threads(bad)
    finally:
        cpukern.set_num_threads(0)


# --- environment variables read at import ------------------------------------------------------


@needs_subprocess
def test_unknown_cpukern_variant_names_warn_naming_the_known_ones():
    out = run_python("import cpukern, numpy as np; cpukern.ternary.pack(np.zeros((1, 1), np.int8))",
               env={"CPUKERN_VARIANT": "avx3,reference"})
    assert "CPUKERN_VARIANT" in out.stderr and "'avx3'" in out.stderr and "reference" in out.stderr, out.stderr
    assert "'reference'" not in out.stderr.split("known")[0], out.stderr
    out = run_python("import cpukern", env={"CPUKERN_VARIANT": "reference,fused_moe=reference"})
    assert "CPUKERN_VARIANT" not in out.stderr, out.stderr


@needs_subprocess
def test_cpukern_variant_forcing_an_unusable_variant_of_an_op_fails_its_calls_not_the_import():
    code = """
        import cpukern, numpy as np
        assert not any(v["selected"] for v in cpukern.kernels("ternary_gemv"))
        assert any(v["selected"] for v in cpukern.kernels("fused_moe"))
        try:
            cpukern.ternary.prepare(cpukern.ternary.pack(np.ones((1, 16), np.int8)), 16)
        except ValueError as e:
            print("ERR", e)
    """
    out = run_python(code, env={"CPUKERN_VARIANT": "ternary_gemv=bogus"})
    assert out.returncode == 0, out.stderr
    assert "'ternary_gemv=bogus' forces a variant ternary_gemv cannot use" in out.stderr, out.stderr
    assert "ERR variant: unknown variant 'bogus' for ternary_gemv" in out.stdout, out.stdout
    lacking = [v["name"] for v in cpukern.kernels("ternary_gemv") if not v["supported"]]
    if not lacking:
        pytest.skip("every ternary_gemv variant runs on this CPU: no unsupported one to force")
    out = run_python(code, env={"CPUKERN_VARIANT": f"ternary_gemv={lacking[0]}"})
    assert out.returncode == 0, out.stderr
    assert f"ERR variant: variant '{lacking[0]}' of ternary_gemv needs CPU features" in out.stdout, out.stdout


# Every op's calls, each raising for a forced name it cannot use.
_CALL_OF_OP = {
    "ternary_gemv": "cpukern.ternary.prepare(cpukern.ternary.pack(np.ones((1, 16), np.int8)), 16)",
    "widely_linear": "cpukern.widely_linear.prepare(*cpukern.widely_linear.quantize("
                     "np.ones((4, 4), np.float32)), 2)",
    "fused_moe": "cpukern.moe.prepare(np.ones((1, 4, 8), ml_dtypes.bfloat16))",
    "linear": "cpukern.linear.prepare(np.ones((4, 8), ml_dtypes.bfloat16))",
}


@needs_subprocess
@pytest.mark.parametrize("op", sorted(_CALL_OF_OP))
@pytest.mark.parametrize("name", [""])
def test_cpukern_variant_op_entry_naming_no_variant_warns_and_fails_that_ops_calls(op, name):
    """"op=" (an empty name) is an unknown name like any other: a warning at import and a
    ValueError from the op's calls, never ignored (issue 47, item 9)."""
    code = f"""
        import cpukern, numpy as np, ml_dtypes
        assert not any(v["selected"] for v in cpukern.kernels({op!r}))
        try:
            {_CALL_OF_OP[op]}
        except ValueError as e:
            print("ERR", e)
    """
    out = run_python(code, env={"CPUKERN_VARIANT": f"{op}={name}"})
    assert out.returncode == 0, out.stderr
    assert f"CPUKERN_VARIANT: '{op}={name}' forces a variant {op} cannot use" in out.stderr, out.stderr
    assert f"ERR variant: unknown variant '{name}' for {op}" in out.stdout, out.stdout


@needs_subprocess
def test_the_old_variable_cpukern_isa_is_not_read_and_warns_once_at_import():
    """CPUKERN_ISA, CPUKERN_VARIANT's old name (issue 46), forces nothing; set, it is one
    RuntimeWarning at import naming CPUKERN_VARIANT, so a user who sets it is not ignored
    silently."""
    code = """
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import cpukern
            import cpukern.moe
        old = [w for w in caught if "CPUKERN_ISA" in str(w.message)]
        assert len(old) == 1, [str(w.message) for w in caught]
        assert old[0].category is RuntimeWarning and "CPUKERN_VARIANT" in str(old[0].message)
        print([v["name"] for v in cpukern.kernels("ternary_gemv") if v["selected"]][0])
    """
    out = run_python(code, env={"CPUKERN_ISA": "reference"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [v["name"] for v in cpukern.kernels("ternary_gemv")
                                  if v["selected"]], out.stdout
    out = run_python("import cpukern")
    assert "CPUKERN_ISA" not in out.stderr or os.environ.get("CPUKERN_ISA"), out.stderr


@needs_subprocess
@pytest.mark.parametrize("value,effective,warns", [
    ("off", "0", False), ("No", "0", False), ("false", "0", False), ("0", "0", False),
    ("on", "1", False), ("1", "1", False), ("maybe", "1", True)])
def test_hugepages_env_takes_documented_values(value, effective, warns):
    code = ("import warnings, os\nwarnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as w:\n    import cpukern\n"
            "print(os.environ['CPUKERN_HUGEPAGES'], any('CPUKERN_HUGEPAGES' in str(x.message) for x in w))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, CPUKERN_HUGEPAGES=value))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [effective, str(warns)], r.stdout


@needs_subprocess
@pytest.mark.parametrize("value,warns", [("0", False), (" 50 ", False), ("200", False),
                                         ("-1", True), ("1e3", True), ("fast", True)])
def test_spin_env_results_and_warning(value, warns):
    """The pool polls (or not) by CPUKERN_SPIN_US: the same bits either way; a bad value warns."""
    code = ("import warnings\nwarnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as w:\n    import cpukern\n"
            "import numpy as np, time\nfrom cpukern import ternary\n"
            "rng = np.random.default_rng(0)\n"
            "wt = ternary.prepare(ternary.pack(rng.integers(-1, 2, (300, 700)).astype(np.int8)), 700)\n"
            "x = rng.standard_normal(700).astype(np.float32)\n"
            "ys = []\n"
            "for i in range(30):\n"
            "    ys.append(ternary.gemv(wt, x, act='int8', threads=2).tobytes())\n"
            "    time.sleep(0.001 * (i % 2))\n"
            "ref = ternary.gemv(wt, x, act='int8', threads=1).tobytes()\n"
            "print(all(y == ref for y in ys), any('CPUKERN_SPIN_US' in str(x.message) for x in w))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, CPUKERN_SPIN_US=value))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", str(warns)], r.stdout


# --- the datatype vocabulary: one name per concept ----------------------------------------------

def test_one_act_vocabulary_for_every_op():
    from cpukern import moe, ternary

    assert moe.ACTS == ("fp32", "int8") and ternary.ACTS == ("fp32", "int8", "int8_bitnet")
    assert set(moe.ACTS) <= set(ternary.ACTS)


def test_format_token_names_weights_and_act():
    from cpukern import _dtypes, moe

    w = np.random.default_rng(3).standard_normal((2, 8, 64)).astype(ml_dtypes.bfloat16)
    blocks, scales = moe.quantize(w)
    for act in ("fp32", "int8"):
        p = moe.prepare(blocks, format="mxfp4", scales=scales, act=act)
        assert p.format == _dtypes.token("mxfp4", act)
        assert _dtypes.split_token(p.format) == ("mxfp4", act)


# Second names cpukern had before its first release (issue 46): each is gone.
REMOVED_NAMES = [
    ("ternary", "TernaryWeights"), ("ternary", "WidelyLinearWeights"),
    ("ternary", "phase_quantize"), ("ternary", "widely_linear_dense"),
    ("ternary", "prepare_widely_linear"), ("ternary", "widely_linear"),
    ("ternary", "_aligned"), ("ternary", "_from_pickle"),
    ("widely_linear", "WidelyLinearWeights"),
    ("moe", "PackedExperts"), ("moe", "prepack"), ("moe", "linear"), ("moe", "_from_pickle"),
    ("_dtypes", "ACT_ALIASES"),
]


@pytest.mark.parametrize("module,name", REMOVED_NAMES, ids=[f"{m}.{n}" for m, n in REMOVED_NAMES])
def test_removed_names_are_gone(module, name):
    import importlib

    mod = importlib.import_module(f"cpukern.{module}")
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
        getattr(mod, name)
    with pytest.raises(ImportError, match=name):
        exec(f"from cpukern.{module} import {name}", {})
    assert name not in getattr(mod, "__all__", ())


def _act_float_case(case):
    """A call with act="float" and the names `act` accepts there."""
    from cpukern import linear, moe, ternary

    rng = np.random.default_rng(4)
    bf = lambda *shape: rng.standard_normal(shape).astype(ml_dtypes.bfloat16)  # noqa: E731
    if case == "ternary.gemv":
        tw = ternary.prepare(ternary.pack(rng.integers(-1, 2, (8, 32)).astype(np.int8)), 32)
        return lambda: ternary.gemv(tw, np.ones(32, np.float32), act="float"), ternary.ACTS
    if case == "moe.prepare":
        return lambda: moe.prepare(bf(2, 8, 64), act="float"), moe.ACTS
    if case == "moe.prepare/mxfp4":
        blocks, scales = moe.quantize(bf(2, 8, 64))
        return lambda: moe.prepare(blocks, format="mxfp4", scales=scales, act="float"), moe.ACTS
    if case == "linear.prepare":
        return lambda: linear.prepare(bf(8, 64), act="float"), moe.ACTS
    import cpukern.torch as ct

    if case == "torch.TernaryLinear":
        return lambda: ct.TernaryLinear(32, 8, act="float"), ternary.ACTS
    assert case == "torch.FusedMoE.from_mxfp4"
    (b13, s13), (b2, s2) = (map(torch.from_numpy, moe.quantize(bf(2, o, 32))) for o in (64, 32))
    return lambda: ct.FusedMoE.from_mxfp4(b13, s13, b2, s2, topk=1, act="float"), moe.ACTS


@pytest.mark.parametrize("case", [
    "ternary.gemv", "moe.prepare", "moe.prepare/mxfp4", "linear.prepare",
    pytest.param("torch.TernaryLinear", marks=needs_torch),
    pytest.param("torch.FusedMoE.from_mxfp4", marks=needs_torch)])
def test_act_float_is_refused_naming_the_accepted_names(case):
    call, accepted = _act_float_case(case)
    with pytest.raises(ValueError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith("act: expected ") and msg.endswith("got 'float'"), msg
    assert all(repr(a) in msg for a in accepted), msg


def test_act_names_are_strings():
    from cpukern import ternary

    tw = ternary.prepare(ternary.pack(np.ones((8, 32), np.int8)), 32)
    with pytest.raises(TypeError, match="^act: "):
        ternary.gemv(tw, np.ones(32, np.float32), act=None)
