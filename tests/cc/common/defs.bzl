"""The test targets every ternary-family op (ternary, widely_linear) has, from its kernel list."""

load("//toolchains:defs.bzl", "cpukern_cc_library", "cpukern_cc_test")

def list_rows_libraries(op):
    """:list_rows and :simde_rows, the tests' rows of //kernels/<op>'s kernel list
    (list_rows.h): list_rows.cc compiled natively (every any/x86/arm line, shipped and
    catalogue-only) and against SIMDe (the simde lines, over :ukernels_simde_avx512)."""
    lib = "//kernels/" + op
    for name, isa, deps in [
        ("list_rows", "portable", []),
        ("simde_rows", "simde_avx512", [lib + ":ukernels_simde_avx512"]),
    ]:
        cpukern_cc_library(
            name = name,
            testonly = True,
            srcs = ["list_rows.cc"],
            hdrs = ["list_rows.h"],
            isa = isa,
            visibility = ["//visibility:public"],
            deps = [lib, lib + ":ukernel_hdrs", "//tests/cc/common:list_rows_inc"] + deps,
        )

def op_tests(op, no_multiply_x86, no_multiply_aarch64, size = None):
    """Tests of //kernels/<op>.

    <op>_test: <op>_test.cc over every row line of the kernel list (shipped and
    catalogue-only, from :list_rows, not the registry) and every packer the CPU runs (the
    others skip with the reason); <op>_simde_test: the same body over the simde lines (the
    AVX-512 micro-kernels built against SIMDe, :simde_rows; any host,
    -DCPUKERN_TEST_SIMDE=1); serialize_test: the serialised
    prepared form (round trips, other-CPU layouts, header checks, a fuzz of header and
    payload bytes for the ASan leg).

    check_no_multiply (x86-64 builds) and check_no_multiply_aarch64 (the --config=aarch64
    legs: a host script reading the aarch64 archives with aarch64-linux-gnu-objdump): no
    multiply instruction in any fp32 micro-kernel of the op's archives, with the extra
    check_no_multiply.py arguments given (which functions, and which of the kernel list's
    must be among them, so that the check cannot pass vacuously). tags no_sanitizer: the
    --config=asan/tsan builds (-O1 plus instrumentation) put imul into address arithmetic,
    so it would fail on code it never ships. The SIMDe build (test-only) is checked on x86
    only.
    """
    lib = "//kernels/" + op
    inc = lib + ":ukernels/ukernels.inc"
    list_rows_libraries(op)
    rows = [":list_rows", ":simde_rows"]
    for name, copts in [(op + "_test", []), (op + "_simde_test", ["-DCPUKERN_TEST_SIMDE=1"])]:
        cpukern_cc_test(
            name = name,
            size = size,
            srcs = [op + "_test.cc"],
            copts = copts,
            deps = [lib, "//tests/cc/common:variant_params"] + rows,
        )
    for name, libs, args, tags, cpu in [
        ("check_no_multiply", ":fp32_ukernel_libs", no_multiply_x86, ["host"], "x86_64"),
        ("check_no_multiply_aarch64", ":native_ukernel_libs", ["--arch=aarch64"] + no_multiply_aarch64, [], "aarch64"),
    ]:
        native.sh_test(
            name = name,
            size = size,
            srcs = ["//tests/static:run_python3.sh"],
            args = ["$(location //tests/static:check_no_multiply.py)"] + args + [
                "--require-from=$(location " + inc + ")",
                "$(locations " + lib + libs + ")",
            ],
            data = [lib + libs, inc, "//tests/static:check_no_multiply.py"],
            tags = tags + ["no_sanitizer"],
            target_compatible_with = ["@platforms//cpu:" + cpu],
        )
    cpukern_cc_test(
        name = "serialize_test",
        size = "small",
        srcs = ["serialize_test.cc"],
        deps = [lib, "//tests/cc/prepared:tamper"] + rows,
    )
