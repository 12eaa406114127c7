"""Test parameters from the registries: every variant compiled in, skipped with the reason
when this CPU cannot run it."""

import os

import pytest

import cpukern

UNDER_QEMU = bool(os.environ.get("CPUKERN_QEMU_CPU"))


def variant_params(op):
    out = []
    for v in cpukern.kernels(op):
        marks = []
        if not v["supported"]:
            marks.append(pytest.mark.skip(
                reason=f"{op}/{v['name']} needs {', '.join(v['requires'])}; missing {v['why']}"))
        out.append(pytest.param(v["name"], id=v["name"], marks=marks))
    return out


def supported(op):
    return [v["name"] for v in cpukern.kernels(op) if v["supported"]]
