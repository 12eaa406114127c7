"""The libraries of a ternary-family op's BUILD (//kernels/ternary, //kernels/widely_linear)."""

load("//toolchains:defs.bzl", "cpukern_cc_library")

def ukernel_op(name, ukernels, simde, srcs, hdrs = []):
    """The targets of //kernels/<name>, from its micro-kernel files per ISA key.

    ukernel_hdrs: the ukernel interface (ukernel.h), the kernel list and its declarations,
    the public API header (<name>.h) and `hdrs`.
    ukernels_<isa>: one library per key of `ukernels` (isa -> sources; toolchains/defs.bzl
    compiles it with that ISA's flags, and it is empty on the other architecture).
    <name>: the op (driver, registry, ...: `srcs`) over every ukernels_<isa>.
    ukernels_simde_avx512: the AVX-512 sources `simde` against SIMDe (symbols
    ..._simde_avx512), for tests on any host (their rows: the kernel list's simde lines,
    tests/cc/<name>:list_rows); not linked into <name>.
    fp32_ukernel_libs / native_ukernel_libs: the object archives for
    tests/static/check_no_multiply.py, with and without the SIMDe build (on AArch64 SIMDe's
    emulation of AVX-512 permutes multiplies; it is test-only code that no row runs).
    """
    native.exports_files(["BUILD", "ukernels/ukernels.inc"])
    cpukern_cc_library(
        name = "ukernel_hdrs",
        hdrs = [
            name + ".h",
            "kernel_rows.h",
            "ukernel.h",
            "ukernels/ukernels.h",
            "ukernels/ukernels.inc",
        ] + hdrs,
        deps = ["//kernels/common"],
    )
    libs = []
    for isa, files in ukernels.items():
        cpukern_cc_library(name = "ukernels_" + isa, srcs = files, isa = isa, deps = [":ukernel_hdrs"])
        libs.append(":ukernels_" + isa)
    cpukern_cc_library(
        name = name,
        srcs = srcs,
        hdrs = [name + ".h", "ukernel.h"],
        deps = [":ukernel_hdrs", "//kernels/common"] + libs,
    )
    cpukern_cc_library(
        name = "ukernels_simde_avx512",
        srcs = {f: None for f in simde}.keys(),  # without repeats (shared headers)
        isa = "simde_avx512",
        deps = [":ukernel_hdrs"],
    )
    native.filegroup(name = "fp32_ukernel_libs", srcs = libs + [":ukernels_simde_avx512"])
    # Every source file (tests/static:check_kernels_no_python reads them).
    native.filegroup(name = "sources", srcs = native.glob(["**/*.cc", "**/*.h", "**/*.inc"]))
    native.filegroup(name = "native_ukernel_libs", srcs = libs)
