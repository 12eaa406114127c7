#!/usr/bin/env python3
"""Checks the AArch64 MoE micro-kernel archives against the kernel list.

Usage: check_bfmmla.py [--objdump PATH] UKERNELS_INC ARCHIVE...

The archives are the ISA libraries, libukernels_<isa>.a. For every row of the kernel list
(kernels/moe/ukernels/ukernels.inc) whose isa is neon_bf16, the archive member compiled from
the row's file (<ukernel>.o) must contain `bfmmla` in its GEMM code (the blocked loop or the
BFMMLA register kernels), except in the int8 column (`_qd8_` in its name), which must contain
`smmla`; a neon_dotprod row's int8 member must be in libukernels_neon_dotprod.a and contain
`sdot`, its other columns come from libukernels_neon.a; for every row whose isa is neon, the
member must be in libukernels_neon.a, and that library must contain no BF16, SDOT or SMMLA
instruction at all (it runs on ARMv8.0 CPUs). Fails when no row was checked.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

# CPUKERN_VARIANT / CPUKERN_CATALOGUE_ONLY(arch, name, isa, priority, ukernel per weight
# format...), possibly over lines.
ROW = re.compile(r"^CPUKERN_(?:VARIANT|CATALOGUE_ONLY)\(([^)]*)\)", re.M)
MEMBER = re.compile(r"^(\S+?)(?:\.pic)?\.o:\s+file format")
FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
INSN = re.compile(r"^\s*[0-9a-f]+:\s+(?:[0-9a-f]{8}\s+)?(\S+)")
BF16 = re.compile(r"^(bfmmla|bfdot|bfmlal[bt]|bfcvt\w*|[su]dot|usdot|[su]mmla|usmmla)$")
INT8 = {"neon_bf16": "smmla", "neon_dotprod": "sdot"}  # the int8 tile's instruction per isa
GEMM = re.compile(r"blocked_gemm<|bfmmla::(\(anonymous namespace\)::)?kernel<")  # the loop, the register kernels


def functions(objdump, path):
    """{member: {function: [mnemonics]}} of an archive (or object file)."""
    out = subprocess.run([objdump, "-d", "-C", path], check=True, capture_output=True,
                         text=True).stdout
    members, member, name = {}, os.path.basename(path), None
    for line in out.splitlines():
        m = MEMBER.match(line)
        if m:
            member, name = m.group(1), None
            continue
        m = FUNC.match(line)
        if m:
            name = m.group(1)
            members.setdefault(member, {})[name] = []
            continue
        m = INSN.match(line)
        if m and name is not None:
            members[member][name].append(m.group(1))
    return members


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objdump", default=shutil.which("aarch64-linux-gnu-objdump") or "objdump")
    ap.add_argument("kernel_list")
    ap.add_argument("archives", nargs="+")
    args = ap.parse_args()
    rows = []
    for body in ROW.findall(open(args.kernel_list).read()):
        arch, name, isa, prio, *ukernels = (f.strip() for f in body.split(","))
        rows += [(arch, name, isa, prio, u) for u in ukernels]
    libs = {}
    for path in args.archives:
        m = re.match(r"libukernels_(\w+?)(?:\.pic)?\.a$", os.path.basename(path))
        if m:
            libs[m.group(1)] = functions(args.objdump, path)
    ok, checked = True, 0
    for arch, name, isa, _, ukernel in rows:
        if isa not in ("neon_bf16", "neon_dotprod", "neon"):
            continue
        checked += 1
        if ukernel.endswith("__scalar"):  # a portable column (W4A8 before its NEON tiles)
            print(f"ok   {name}: {ukernel} (portable)")
            continue
        int8 = "_qd8_" in ukernel
        lib = "neon" if isa == "neon_dotprod" and not int8 else isa
        funcs = libs.get(lib, {}).get(ukernel)
        if funcs is None:
            print(f"FAIL {name}: no member {ukernel}.o in libukernels_{lib}.a")
            ok = False
            continue
        if isa == "neon" or lib == "neon":
            print(f"ok   {name}: {ukernel}.o in libukernels_neon.a")
            continue
        if int8:  # SMMLA / SDOT tile: its instruction in the code
            want = INT8[isa]
            n = sum(1 for insns in funcs.values() for i in insns if i == want)
            print(f"{'ok  ' if n else 'FAIL'} {name}: int8 {ukernel}.o: {n} {want}")
            ok &= n > 0
            continue
        counts = {f: sum(1 for i in insns if i == "bfmmla") for f, insns in funcs.items()
                  if GEMM.search(f)}
        for f, n in sorted(counts.items()):
            print(f"     {ukernel}: {f[:100]}: {n} bfmmla")
        good = sum(counts.values()) > 0
        print(f"{'ok  ' if good else 'FAIL'} {name}: {sum(counts.values())} bfmmla in its GEMM")
        ok &= good
    for member, funcs in libs.get("neon", {}).items():
        for f, insns in funcs.items():
            n = sum(1 for i in insns if BF16.match(i))
            if n:
                print(f"FAIL libukernels_neon.a {member}: {f}: {n} BF16/SDOT/SMMLA instructions")
                ok = False
    if checked == 0:
        print("FAIL: no neon / neon_dotprod / neon_bf16 row checked")
        return 1
    print(("PASS" if ok else "FAIL") + f": {checked} rows checked")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
