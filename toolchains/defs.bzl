"""Compile flags and the cc_library wrapper every kernel library uses.

Each ISA-specific library carries only its own flags, so one binary runs on any CPU of its
architecture and dispatch decides at run time which code may execute.
"""

COPTS = [
    "-std=c++17",
    "-O3",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-fno-math-errno",
    # No -ffast-math: NaN and Inf must propagate as IEEE arithmetic does.
]

# The ISA table: one key per feature set, the same keys as kernels/common/isa.h (whose
# constants are the features a registry row using that library requires); checked by
# //tests/static:check_isa_table.
_AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mfma"]

ISA_COPTS = {
    "portable": [],
    # x86-64
    "avx2": ["-mavx2", "-mfma"],
    "avx2_bmi2": ["-mavx2", "-mfma", "-mbmi2"],
    "avx_vnni": ["-mavx2", "-mfma", "-mavxvnni"],
    "avx512f": ["-mavx512f"],
    "avx512": _AVX512,
    "avx512_bmi2": _AVX512 + ["-mbmi2"],
    "avx512_vnni": _AVX512 + ["-mavx512vnni"],
    "avx512_bf16": _AVX512 + ["-mavx512bf16", "-mavx512vnni"],  # every AVX512_BF16 CPU has VNNI
    "amx": _AVX512 + ["-mavx512bf16", "-mavx512vnni", "-mamx-tile", "-mamx-bf16", "-mamx-int8"],
    # AArch64 (NEON is baseline armv8-a).
    "neon": [],
    "neon_dotprod": ["-march=armv8.2-a+dotprod"],
    "neon_bf16": ["-march=armv8.2-a+bf16+i8mm"],  # with I8MM: see isa.h
    "neon_i8mm": ["-march=armv8.2-a+i8mm+dotprod"],
    # Test-only: the AVX-512 kernels' sources compiled against SIMDe's portable _mm512_*
    # (any host; no registry row requires it).
    "simde_avx512": ["-DCPUKERN_SIMDE=1", "-Wno-unused-function", "-Wno-psabi"],
}

_ISA_ARCH = {
    "avx2": "x86_64",
    "avx2_bmi2": "x86_64",
    "avx_vnni": "x86_64",
    "avx512f": "x86_64",
    "avx512": "x86_64",
    "avx512_bmi2": "x86_64",
    "avx512_vnni": "x86_64",
    "avx512_bf16": "x86_64",
    "amx": "x86_64",
    "neon": "aarch64",
    "neon_dotprod": "aarch64",
    "neon_bf16": "aarch64",
    "neon_i8mm": "aarch64",
}

def isa_arch(isa):
    """The architecture an ISA belongs to ("x86_64", "aarch64"), or None for portable code."""
    return _ISA_ARCH.get(isa)

def cpukern_cc_library(name, isa = "portable", copts = [], srcs = [], **kwargs):
    """A cc_library compiled with the project flags plus those of one ISA. On the other
    architecture it compiles nothing (an empty library), so op libraries depend on every
    ISA library without a select()."""
    arch = isa_arch(isa)
    if arch != None:
        srcs = select({
            "//toolchains:" + arch: srcs,
            "//conditions:default": [],
        })
    if isa != "portable":
        # Under ASan, stack instrumentation of these intrinsic-heavy micro-kernels and packers
        # costs 4x their compile time (178 s against 47 s for the largest); heap buffers, where
        # their inputs and outputs live, stay checked.
        copts = copts + select({
            "//toolchains:asan": ["--param=asan-stack=0"],
            "//conditions:default": [],
        })
    native.cc_library(
        name = name,
        copts = COPTS + ISA_COPTS[isa] + copts,
        srcs = srcs,
        **kwargs
    )

def cpukern_cc_test(name, copts = [], deps = [], **kwargs):
    """A GoogleTest test with the project flags."""
    native.cc_test(
        name = name,
        copts = COPTS + copts,
        deps = deps + ["@googletest//:gtest_main"],
        **kwargs
    )
