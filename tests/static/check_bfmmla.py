#!/usr/bin/env python3
"""Checks that the AArch64 BFMMLA micro-kernels really contain `bfmmla` instructions.

Usage: check_bfmmla.py [--objdump PATH] [--absent] FILE...

Disassembles each object file or archive (aarch64-linux-gnu-objdump -d -C) and, per function
whose name contains "kernel_8x8" or "kernel_4x16" (the BFMMLA micro-kernels), counts `bfmmla`
instructions. Fails unless every such function has at least one, and unless at least one such
function was found. With --absent, fails instead if ANY function in the files contains a
bfmmla/bfdot/bfcvt instruction (for the libraries that must run on CPUs without FEAT_BF16).
"""
import argparse
import re
import shutil
import subprocess
import sys

FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
INSN = re.compile(r"^\s*[0-9a-f]+:\s+(?:[0-9a-f]{8}\s+)?(\S+)")
BF16 = re.compile(r"^(bfmmla|bfdot|bfmlal[bt]|bfcvt\w*)$")
KERNELS = ("kernel_8x8", "kernel_4x16")


def functions(objdump, path):
    out = subprocess.run([objdump, "-d", "-C", path], check=True, capture_output=True,
                         text=True).stdout
    name, insns = None, []
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            if name is not None:
                yield name, insns
            name, insns = m.group(1), []
            continue
        m = INSN.match(line)
        if m and name is not None:
            insns.append(m.group(1))
    if name is not None:
        yield name, insns


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objdump", default=shutil.which("aarch64-linux-gnu-objdump") or "objdump")
    ap.add_argument("--absent", action="store_true")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    checked, ok = 0, True
    for path in args.files:
        for name, insns in functions(args.objdump, path):
            n = sum(1 for i in insns if BF16.match(i))
            if args.absent:
                if n:
                    print(f"FAIL {path}: {name}: {n} BF16 instructions in a no-BF16 library")
                    ok = False
                checked += 1
                continue
            if not any(k in name for k in KERNELS):
                continue
            b = sum(1 for i in insns if i == "bfmmla")
            checked += 1
            print(f"{'ok  ' if b else 'FAIL'} {name}: {b} bfmmla")
            ok &= b > 0
    if checked == 0:
        print("FAIL: no function checked")
        return 1
    print(("PASS" if ok else "FAIL") + f": {checked} functions checked")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
