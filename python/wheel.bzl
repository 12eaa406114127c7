"""py_wheel: packs the Python package and the extension into a platform wheel; the tag rule.

The tags come from the target interpreter (@cpukern_python//:python_info.bzl, written by
third_party/repositories.bzl: the host interpreter bazelw passes as CPUKERN_PYTHON, and the
cross root's CPython 3.11):

  CPython < 3.12   cp3X-cp3X, Requires-Python ==3.X.*, cpukern/_ext.cpython-3X-<arch>-linux-gnu.so
  CPython >= 3.12  cp312-abi3 (Py_LIMITED_API=0x030C0000 on nanobind and the extension:
                   nanobind's stable ABI), Requires-Python >=3.12, cpukern/_ext.abi3.so

python/build_wheel.py (python_abi, wheel_name) states the same rule and fails the action if
the file name declared here disagrees with it; tests/packaging tests both.
"""

load("@cpukern_python//:python_info.bzl", "PYTHON")

STABLE_ABI_MIN = (3, 12)
LIMITED_API_HEX = "0x030C0000"

# The manylinux policy each architecture's extension satisfies: the newest glibc/libstdc++
# symbol versions it links against, as `auditwheel show` reports them. Debian bookworm's
# toolchain (glibc 2.36, GCC 12): x86-64 needs GLIBC_2.34 and GLIBCXX_3.4.30 -> manylinux_2_35
# (Ubuntu 22.04+, Debian 12+, RHEL 10). A lower tag needs an older sysroot (a manylinux
# image), not a different tag. tests/packaging:wheel_test runs auditwheel on the built wheel
# and fails if the extension starts needing newer symbols than the tag promises.
MANYLINUX = {
    "x86_64": "manylinux_2_35",
    "aarch64": "manylinux_2_35",
}

_LEGACY_MANYLINUX = {"manylinux_2_5": "manylinux1", "manylinux_2_12": "manylinux2010", "manylinux_2_17": "manylinux2014"}

def python_abi(arch):
    """struct(python_tag, abi_tag, stable_abi, defines) for the target interpreter of `arch`."""
    info = PYTHON[arch]
    major, minor = info.version
    if info.free_threaded:
        fail("free-threaded CPython %d.%dt is not supported (no stable ABI there)" % (major, minor))
    if (major, minor) >= STABLE_ABI_MIN:
        return struct(
            python_tag = "cp%d%d" % STABLE_ABI_MIN,
            abi_tag = "abi3",
            stable_abi = True,
            defines = ["Py_LIMITED_API=" + LIMITED_API_HEX],
        )
    return struct(
        python_tag = "cp%d%d" % (major, minor),
        abi_tag = "cp%d%d" % (major, minor),
        stable_abi = False,
        defines = [],
    )

def platform_tag(arch):
    policy = MANYLINUX.get(arch)
    if not policy:
        return "linux_" + arch
    tags = ["%s_%s" % (policy, arch)]
    if policy in _LEGACY_MANYLINUX:
        tags.append("%s_%s" % (_LEGACY_MANYLINUX[policy], arch))
    return ".".join(tags)

def wheel_basename(version, arch):
    abi = python_abi(arch)
    return "cpukern-%s-%s-%s-%s.whl" % (version, abi.python_tag, abi.abi_tag, platform_tag(arch))

def _py_wheel_impl(ctx):
    arch = ctx.attr.arch
    whl = ctx.actions.declare_file(wheel_basename(ctx.attr.version, arch))
    ext = ctx.file.extension
    info = PYTHON[arch]
    headers = [
        h
        for h in ctx.attr._python_headers[CcInfo].compilation_context.headers.to_list()
        if h.basename == "patchlevel.h"
    ]
    prefix = ctx.label.package + "/"
    args = ctx.actions.args()
    args.add("--out", whl)
    args.add("--version", ctx.attr.version)
    args.add("--arch", arch)
    args.add("--python-version", "%d.%d" % info.version)
    if info.free_threaded:
        args.add("--free-threaded")
    if headers:
        args.add("--patchlevel", headers[0])
    args.add("--manylinux", MANYLINUX.get(arch, ""))
    args.add("--pyproject", ctx.file._pyproject)
    args.add("--readme", ctx.file._readme)
    args.add("--license", ctx.file._license)
    args.add("--extension", ext)
    for f in ctx.files.srcs:
        if not f.short_path.startswith(prefix):
            fail("%s is not under %s" % (f.short_path, prefix))
        args.add("%s=%s" % (f.short_path[len(prefix):], f.path))
    ctx.actions.run_shell(
        inputs = ctx.files.srcs + headers + [
            ext,
            ctx.file.builder,
            ctx.file._pyproject,
            ctx.file._readme,
            ctx.file._license,
        ],
        outputs = [whl],
        # tomllib: python3 >= 3.11 on PATH (Debian bookworm's, or the one bazelw requires).
        command = "python3 %s \"$@\"" % ctx.file.builder.path,
        arguments = [args],
        mnemonic = "PyWheel",
        progress_message = "Packing %s" % whl.short_path,
    )
    return [DefaultInfo(files = depset([whl]), runfiles = ctx.runfiles(files = [whl]))]

py_wheel = rule(
    implementation = _py_wheel_impl,
    attrs = {
        "arch": attr.string(mandatory = True),
        "builder": attr.label(allow_single_file = True, mandatory = True),
        "extension": attr.label(allow_single_file = True, mandatory = True),
        "srcs": attr.label_list(allow_files = True),
        "version": attr.string(mandatory = True),
        "_license": attr.label(allow_single_file = True, default = "//:LICENSE"),
        "_pyproject": attr.label(allow_single_file = True, default = "//:pyproject.toml"),
        "_python_headers": attr.label(default = "@cpukern_python//:python_headers"),
        "_readme": attr.label(allow_single_file = True, default = "//:README.md"),
    },
)
