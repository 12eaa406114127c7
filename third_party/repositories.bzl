"""Repository rules that bind installed packages into the build; nothing is downloaded.

bazelw installs the packages and passes their locations through --repo_env:
  CPUKERN_PYTHON       host Python (a venv with the pinned requirements, nanobind among them)
  CPUKERN_ARM64_ROOT   arm64 userland with python3.11 headers and libbenchmark (for --config=aarch64)
  CPUKERN_AMD64_ROOT   amd64 userland, the mirror image for cross builds from an ARM host
"""

def _python_include(ctx, python):
    r = ctx.execute([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"])
    if r.return_code != 0:
        fail("cannot query %s for its include directory: %s" % (python, r.stderr))
    return r.stdout.strip()

def _host_is_x86(ctx):
    # repository_os.arch does not exist in Bazel 4.2.3; ask uname.
    return ctx.execute(["uname", "-m"]).stdout.strip() in ("x86_64", "amd64")

def _link_or_empty(ctx, src, dst):
    if src and ctx.path(src).exists:
        ctx.symlink(src, dst)
    else:
        ctx.file(dst + "/MISSING", "not found: %s (run ./bazelw, which installs it)\n" % src)

def _python_repo_impl(ctx):
    python = ctx.os.environ.get("CPUKERN_PYTHON", "") or str(ctx.which("python3"))
    host_include = _python_include(ctx, python)
    arm64 = ctx.os.environ.get("CPUKERN_ARM64_ROOT", "")
    amd64 = ctx.os.environ.get("CPUKERN_AMD64_ROOT", "")

    # Headers per target architecture: the host interpreter's for its own architecture,
    # Debian's libpython3.11-dev from the cross root for the other one.
    if _host_is_x86(ctx):
        _link_or_empty(ctx, host_include, "x86_64/include")
        # The whole usr/include: Debian's pyconfig.h includes its arch part by relative path.
        _link_or_empty(ctx, arm64 + "/usr/include", "aarch64/usr_include")
    else:
        _link_or_empty(ctx, host_include, "aarch64/include")
        _link_or_empty(ctx, amd64 + "/usr/include", "x86_64/usr_include")

    # The target interpreter of each architecture, for the wheel's tags and the stable-ABI
    # switch (python/wheel.bzl: python_abi): the host interpreter's own version; the cross
    # root's CPython 3.11 (Debian bookworm; python.BUILD globs its python3.11 headers).
    r = ctx.execute([python, "-c", "import sys, sysconfig; print(sys.version_info[0], sys.version_info[1], " +
                                   "int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))"])
    if r.return_code != 0:
        fail("cannot query %s for its version: %s" % (python, r.stderr))
    host_major, host_minor, host_ft = r.stdout.strip().split(" ")
    host_info = "struct(version = (%s, %s), free_threaded = %s)" % (host_major, host_minor, host_ft == "1")
    cross_info = "struct(version = (3, 11), free_threaded = False)"
    host_arch, cross_arch = ("x86_64", "aarch64") if _host_is_x86(ctx) else ("aarch64", "x86_64")
    ctx.file("python_info.bzl", "# Written by cpukern_python_repository.\nPYTHON = {\n" +
             '    "%s": %s,\n    "%s": %s,\n}\n' % (host_arch, host_info, cross_arch, cross_info))

    r = ctx.execute([python, "-c", "import nanobind; print(nanobind.source_dir().rsplit('/', 1)[0])"])
    if r.return_code != 0:
        fail("nanobind is not installed for %s (run ./bazelw): %s" % (python, r.stderr))
    ctx.symlink(r.stdout.strip(), "nanobind")
    ctx.file("interpreter.txt", python + "\n")
    ctx.template("BUILD", ctx.attr._build_file, {})

cpukern_python_repository = repository_rule(
    implementation = _python_repo_impl,
    environ = ["CPUKERN_PYTHON", "CPUKERN_ARM64_ROOT", "CPUKERN_AMD64_ROOT"],
    attrs = {"_build_file": attr.label(default = "//third_party:python.BUILD")},
    local = True,
)

def _benchmark_repo_impl(ctx):
    arm64 = ctx.os.environ.get("CPUKERN_ARM64_ROOT", "")
    amd64 = ctx.os.environ.get("CPUKERN_AMD64_ROOT", "")
    is_x86 = _host_is_x86(ctx)
    libdirs = {
        "x86_64": "/usr/lib/x86_64-linux-gnu" if is_x86 else amd64 + "/usr/lib/x86_64-linux-gnu",
        "aarch64": arm64 + "/usr/lib/aarch64-linux-gnu" if is_x86 else "/usr/lib/aarch64-linux-gnu",
    }
    _link_or_empty(ctx, "/usr/include/benchmark", "include/benchmark")
    for arch, d in libdirs.items():
        for lib in ["libbenchmark.so", "libbenchmark_main.a"]:
            if ctx.path(d + "/" + lib).exists:
                ctx.symlink(d + "/" + lib, arch + "/" + lib)
            else:
                ctx.file(arch + "/" + lib, "")
    ctx.template("BUILD", ctx.attr._build_file, {})

cpukern_benchmark_repository = repository_rule(
    implementation = _benchmark_repo_impl,
    environ = ["CPUKERN_ARM64_ROOT", "CPUKERN_AMD64_ROOT"],
    attrs = {"_build_file": attr.label(default = "//third_party:benchmark.BUILD")},
    local = True,
)
