#!/usr/bin/env python3
"""Fails unless the ISA table of kernels/common/isa.h (feature sets) and of
toolchains/defs.bzl (compile flags) have the same keys (defs.bzl's test-only simde_avx512
aside), and every cpukern_cc_library(isa=...) and every key of a ukernel_op(ukernels={...})
in kernels/ names a key of the table.

Usage: check_isa_table.py ISA_H DEFS_BZL BUILD...
"""
import re
import sys


def main():
    isa_h, defs, builds = sys.argv[1], sys.argv[2], sys.argv[3:]
    cxx = set(re.findall(r"inline constexpr uint64_t (\w+) =", open(isa_h).read()))
    text = open(defs).read()
    table = text[text.index("ISA_COPTS = {"):]
    table = table[:table.index("\n}\n")]
    bzl = set(re.findall(r'^\s+"(\w+)":', table, re.M)) - {"simde_avx512"}
    bad = []
    if cxx != bzl:
        bad.append(f"isa.h only: {sorted(cxx - bzl)}; defs.bzl only: {sorted(bzl - cxx)}")
    used = set()
    for b in builds:
        text = open(b).read()
        isas = re.findall(r'isa = "(\w+)"', text)
        per_isa = re.search(r"^( *)ukernels = \{\n(.*?)^\1\},?$", text, re.M | re.S)
        if per_isa:
            isas += re.findall(r'^' + per_isa.group(1) + r'    "(\w+)":', per_isa.group(2), re.M)
        for isa in isas:
            used.add(isa)
            if isa not in bzl | {"simde_avx512"}:
                bad.append(f"{b}: isa = \"{isa}\" is not in the ISA table")
    print(f"ISA table keys: {sorted(cxx)}; used by libraries: {sorted(used)}")
    if not builds:
        bad.append("no BUILD file given")
    for line in bad:
        print("FAIL:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
