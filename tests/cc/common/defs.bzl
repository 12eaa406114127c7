"""The test targets every ternary-family op (ternary, widely_linear) has, from its kernel list."""

load("//toolchains:defs.bzl", "cpukern_cc_test")

def op_tests(op, no_multiply_x86, no_multiply_aarch64, size = None):
    """Tests of //kernels/<op>.

    <op>_test: <op>_test.cc over every row and packer of the kernel list the CPU runs (the
    others skip with the reason); <op>_simde_test: the same body over the SIMDe rows of the
    AVX-512 micro-kernels (any host, -DCPUKERN_TEST_SIMDE=1); serialize_test: the serialised
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
    for name, copts in [(op + "_test", []), (op + "_simde_test", ["-DCPUKERN_TEST_SIMDE=1"])]:
        cpukern_cc_test(
            name = name,
            size = size,
            srcs = [op + "_test.cc"],
            copts = copts,
            deps = [lib, lib + ":simde", "//tests/cc/common:variant_params"],
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
        deps = [lib, lib + ":simde", "//tests/cc/prepared:tamper"],
    )
