"""Shared fixtures for the Python suite (host and QEMU legs)."""

import os

import cpukern

UNDER_QEMU = bool(os.environ.get("CPUKERN_QEMU_CPU"))


def pytest_report_header(config):
    info = cpukern.cpu_info()
    lines = [f"cpukern {cpukern.__version__} on {info['arch']} ({info['vendor']}), "
             f"features: {' '.join(info['features']) or 'none'}"
             + (f", qemu -cpu {os.environ['CPUKERN_QEMU_CPU']}" if UNDER_QEMU else "")]
    for op in ("ternary_gemv", "widely_linear", "fused_moe", "linear", "decode_attention"):
        vs = cpukern.kernels(op)
        lines.append(f"  {op}: " + ", ".join(
            v["name"] + ("*" if v["selected"] else "") + ("" if v["supported"] else " (not on this CPU)")
            for v in vs))
    return lines
