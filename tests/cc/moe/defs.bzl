"""The MoE table tests: each runs over the kernel list's rows, and again over the SIMDe rows."""

load("//toolchains:defs.bzl", "cpukern_cc_test")

_DEPS = [
    "//kernels/moe",
    "//kernels/moe:simde",
    "//kernels/moe:ukernel_hdrs",
    "//tests/cc/common:variant_params",
]

def moe_variant_tests(name, srcs, **kwargs):
    """<name>_test over the registry's rows, and <name>_simde_test over the SIMDe rows (the
    avx512_bf16 row's micro-kernels and the VNNI int8 tiles compiled against SIMDe), on x86-64
    hosts only: SIMDe's AVX-512 emulation under qemu-user is too slow for these tables."""
    cpukern_cc_test(name = name + "_test", srcs = srcs, deps = _DEPS, **kwargs)
    cpukern_cc_test(
        name = name + "_simde_test",
        srcs = srcs,
        copts = ["-DCPUKERN_TEST_SIMDE=1"],
        target_compatible_with = ["@platforms//cpu:x86_64"],
        deps = _DEPS,
        **kwargs
    )
