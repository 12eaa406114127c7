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

ISA_COPTS = {
    "portable": [],
    # x86-64
    "avx2": ["-mavx2", "-mfma"],
    "avx2_bmi2": ["-mavx2", "-mfma", "-mbmi2"],
    "avx512_bmi2": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mbmi2", "-mfma"],
    "avx512_bf16": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mfma"],
    "avx512_vnni": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mbmi2", "-mfma"],
    # The AVX-512 kernels' source compiled against SIMDe's portable _mm512_* (any host).
    "simde_avx512": ["-DCPUKERN_SIMDE=1", "-Wno-unused-function", "-Wno-psabi"],
    # AArch64 (NEON is baseline armv8-a).
    "neon": [],
    "neon_dotprod": ["-march=armv8.2-a+dotprod"],
    "neon_bf16": ["-march=armv8.2-a+bf16"],
    "neon_i8mm": ["-march=armv8.2-a+i8mm+dotprod"],
}

_X86_ISAS = ["avx2", "avx2_bmi2", "avx512_bmi2", "avx512_bf16", "avx512_vnni"]
_ARM_ISAS = ["neon", "neon_dotprod", "neon_bf16", "neon_i8mm"]

def isa_compatible_with(isa):
    """The target constraint of an ISA: its libraries are skipped on other architectures."""
    if isa in _X86_ISAS:
        return ["@platforms//cpu:x86_64"]
    if isa in _ARM_ISAS:
        return ["@platforms//cpu:aarch64"]
    return []

def cpukern_cc_library(name, isa = "portable", copts = [], target_compatible_with = [], **kwargs):
    """A cc_library compiled with the project flags plus those of one ISA, and only for
    the architecture that ISA belongs to."""
    native.cc_library(
        name = name,
        copts = COPTS + ISA_COPTS[isa] + copts,
        target_compatible_with = target_compatible_with + [
            c
            for c in isa_compatible_with(isa)
            if c not in target_compatible_with
        ],
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
