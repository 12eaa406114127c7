"""py_wheel: packs the pure-Python files and the extension into a platform wheel."""

def _py_wheel_impl(ctx):
    arch = ctx.attr.arch
    whl = ctx.actions.declare_file("cpukern-%s-cp311-cp311-linux_%s.whl" % (ctx.attr.version, arch))
    ext = ctx.file.extension
    args = ctx.actions.args()
    args.add("--out", whl)
    args.add("--version", ctx.attr.version)
    args.add("--arch", arch)
    args.add("--extension", ext)
    args.add_all(ctx.files.srcs)
    ctx.actions.run_shell(
        inputs = ctx.files.srcs + [ext, ctx.file.builder],
        outputs = [whl],
        command = "python3 %s \"$@\"" % ctx.file.builder.path,
        arguments = [args],
        mnemonic = "PyWheel",
        progress_message = "Packing %s" % whl.short_path,
    )
    return [DefaultInfo(files = depset([whl]))]

py_wheel = rule(
    implementation = _py_wheel_impl,
    attrs = {
        "arch": attr.string(mandatory = True),
        "builder": attr.label(allow_single_file = True, mandatory = True),
        "extension": attr.label(allow_single_file = True, mandatory = True),
        "srcs": attr.label_list(allow_files = True),
        "version": attr.string(mandatory = True),
    },
)
