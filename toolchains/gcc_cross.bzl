"""A cc_toolchain_config for a Debian cross gcc (aarch64-linux-gnu-*, x86_64-linux-gnu-*)."""

load(
    "@bazel_tools//tools/cpp:cc_toolchain_config_lib.bzl",
    "feature",
    "flag_group",
    "flag_set",
    "tool_path",
)
load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")

_COMPILE = [
    ACTION_NAMES.c_compile,
    ACTION_NAMES.cpp_compile,
    ACTION_NAMES.cpp_header_parsing,
    ACTION_NAMES.cpp_module_compile,
    ACTION_NAMES.assemble,
    ACTION_NAMES.preprocess_assemble,
]

_LINK = [
    ACTION_NAMES.cpp_link_executable,
    ACTION_NAMES.cpp_link_dynamic_library,
    ACTION_NAMES.cpp_link_nodeps_dynamic_library,
]

def _impl(ctx):
    prefix = "/usr/bin/" + ctx.attr.triple + "-"
    tools = ["gcc", "ld", "ar", "cpp", "nm", "objdump", "strip", "objcopy"]
    tool_paths = [tool_path(name = t, path = prefix + t) for t in tools]
    tool_paths.append(tool_path(name = "gcov", path = "/bin/false"))
    features = [
        feature(name = "supports_pic", enabled = True),
        feature(name = "supports_dynamic_linker", enabled = True),
        feature(
            name = "default_flags",
            enabled = True,
            flag_sets = [
                flag_set(
                    actions = _COMPILE,
                    flag_groups = [flag_group(flags = [
                        "-fPIC",
                        "-no-canonical-prefixes",
                        "-fno-canonical-system-headers",
                        "-Wno-builtin-macro-redefined",
                        "-D__DATE__=\"redacted\"",
                        "-D__TIMESTAMP__=\"redacted\"",
                        "-D__TIME__=\"redacted\"",
                    ])],
                ),
                flag_set(
                    actions = _LINK,
                    flag_groups = [flag_group(flags = ["-lstdc++", "-lm", "-pthread"])],
                ),
            ],
        ),
        feature(
            name = "opt",
            flag_sets = [flag_set(
                actions = _COMPILE,
                flag_groups = [flag_group(flags = ["-O2", "-DNDEBUG", "-ffunction-sections", "-fdata-sections"])],
            )],
        ),
        feature(
            name = "dbg",
            flag_sets = [flag_set(actions = _COMPILE, flag_groups = [flag_group(flags = ["-g"])])],
        ),
        feature(
            name = "user_compile_flags",
            enabled = True,
            flag_sets = [flag_set(
                actions = _COMPILE,
                flag_groups = [flag_group(
                    flags = ["%{user_compile_flags}"],
                    iterate_over = "user_compile_flags",
                    expand_if_available = "user_compile_flags",
                )],
            )],
        ),
        feature(
            name = "user_link_flags",
            enabled = True,
            flag_sets = [flag_set(
                actions = _LINK,
                flag_groups = [flag_group(
                    flags = ["%{user_link_flags}"],
                    iterate_over = "user_link_flags",
                    expand_if_available = "user_link_flags",
                )],
            )],
        ),
    ]
    return cc_common.create_cc_toolchain_config_info(
        ctx = ctx,
        features = features,
        cxx_builtin_include_directories = [
            "/usr/lib/gcc-cross/" + ctx.attr.triple,
            "/usr/lib/gcc/" + ctx.attr.triple,
            "/usr/" + ctx.attr.triple + "/include",
            "/usr/include",
        ],
        toolchain_identifier = ctx.attr.triple,
        host_system_name = "local",
        target_system_name = ctx.attr.triple,
        target_cpu = ctx.attr.cpu,
        target_libc = "glibc",
        compiler = "gcc",
        abi_version = "gcc",
        abi_libc_version = "glibc",
        tool_paths = tool_paths,
    )

gcc_cross_toolchain_config = rule(
    implementation = _impl,
    attrs = {
        "triple": attr.string(mandatory = True),
        "cpu": attr.string(mandatory = True),
    },
    provides = [CcToolchainConfigInfo],
)

def gcc_cross_toolchain(name, triple, cpu, constraint, exec_constraint):
    """A cross cc toolchain for targets with `constraint`, run on hosts with `exec_constraint`."""
    gcc_cross_toolchain_config(name = name + "_config", triple = triple, cpu = cpu)
    native.filegroup(name = name + "_empty")
    native.cc_toolchain(
        name = name + "_cc",
        all_files = ":" + name + "_empty",
        ar_files = ":" + name + "_empty",
        as_files = ":" + name + "_empty",
        compiler_files = ":" + name + "_empty",
        dwp_files = ":" + name + "_empty",
        linker_files = ":" + name + "_empty",
        objcopy_files = ":" + name + "_empty",
        strip_files = ":" + name + "_empty",
        supports_param_files = 1,
        toolchain_config = ":" + name + "_config",
    )
    native.toolchain(
        name = name,
        exec_compatible_with = [exec_constraint],
        target_compatible_with = [constraint, "@platforms//os:linux"],
        toolchain = ":" + name + "_cc",
        toolchain_type = "@bazel_tools//tools/cpp:toolchain_type",
    )
