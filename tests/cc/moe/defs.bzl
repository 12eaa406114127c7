"""The MoE table tests: each runs over the kernel list's rows, and again over the SIMDe rows."""

load("//toolchains:defs.bzl", "cpukern_cc_test")

_DEPS = [
    "//kernels/moe",
    "//kernels/moe:ukernel_hdrs",
    "//tests/cc/moe:list_rows",
    "//tests/cc/moe:simde_rows",
    "//tests/cc/common:variant_params",
]

def moe_variant_tests(name, srcs, **kwargs):
    """<name>_test over the kernel list's rows (shipped and catalogue-only, :list_rows), and
    <name>_simde_test over its simde lines (:simde_rows: the avx512_bf16, amx, avx512_vnni and
    avx512 rows' micro-kernels and the VNNI int8 tiles compiled against SIMDe), on x86-64
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

def archive_check(name, script, ukernel_libs, cpu, inputs = []):
    """sh_test `name`: `script` run on `inputs` (labels, passed first by path) and then on the
    object archives of the //kernels/moe libraries ukernels_<lib> for each lib of
    `ukernel_libs` (what the compiler emitted for that ISA); `cpu`: the architecture the
    libraries are built for."""
    archives = []
    for lib in ukernel_libs:
        native.filegroup(
            name = name + "_" + lib + "_archive",
            srcs = ["//kernels/moe:ukernels_" + lib],
            output_group = "archive",
        )
        archives.append(":" + name + "_" + lib + "_archive")
    native.sh_test(
        name = name,
        srcs = [script],
        args = ["$(rootpath %s)" % label for label in inputs + archives],
        data = inputs + archives,
        target_compatible_with = ["@platforms//cpu:" + cpu],
    )
