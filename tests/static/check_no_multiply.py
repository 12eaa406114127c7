#!/usr/bin/env python3
"""Fails if a fp32-mode ternary GEMV micro-kernel contains a multiply instruction.

Usage: check_no_multiply.py [--arch auto|x86_64|aarch64] [--objdump PROG]
                            [--pattern SUBSTR]... [--regex RE]... [--exclude SUBSTR]...
                            [--require SUBSTR]... [--require-from LIST --require-regex RE
                            [--require-suffix S]...] FILE...

The architecture of the files (--arch, default auto: read from the ELF header of the first
object file or archive member) picks the objdump (x86_64: objdump; aarch64:
aarch64-linux-gnu-objdump unless the host is aarch64; --objdump overrides) and the
forbidden mnemonics:
  x86_64: vmulps/vmulss/vmulpd/mulsd..., vfmadd*/vfmsub*/vfnmadd*/vfnmsub*,
    vpmull*/vpmul*/vpmadd*/pmadd*/vpdp*, imul/mul/mulx (the list below).
  aarch64 (scalar and NEON/SVE forms alike):
    floating point: fmul, fmulx, fnmul, fmla, fmls, fmlal, fmlal2, fmlsl, fmlsl2, fmadd,
      fmsub, fnmadd, fnmsub, fcmla, bfmlalb, bfmlalt, bfdot, bfmmla, fmmla;
    integer: mul, mla, mls, mneg, madd, msub, smull, smull2, umull, umull2, smulh, umulh,
      smaddl, smsubl, smnegl, umaddl, umsubl, umnegl, smlal, smlal2, smlsl, smlsl2, umlal,
      umlal2, umlsl, umlsl2, sqdmull, sqdmull2, sqdmlal, sqdmlal2, sqdmlsl, sqdmlsl2,
      sqdmulh, sqrdmulh, sqrdmlah, sqrdmlsh, pmul, pmull, pmull2;
    dot products and matrix multiplies: sdot, udot, usdot, sudot, smmla, ummla, usmmla;
    SVE: the same names plus mad, msb, fmad, fmsb, fnmad, fnmsb, fnmla, fnmls, fmulx,
      ftmad, sqrdcmlah, cdot, cmla.
  Integer division (sdiv, udiv) is not a multiply and is allowed, as on x86.

Disassembles each object file or archive with `objdump -d -C` (demangled), selects the
functions whose name contains one of the patterns or matches (re.search) one of the
regexes (default, when neither is given: the fp32 micro-kernels'
`ternary_gemv_f32_f32_..._run` and `..._xprep` functions and their local helpers), and fails if any of
them contains a multiply: vmulps/vmulss/vmulpd/mulsd..., vfmadd*/vfmsub*/vfnmadd*/vfnmsub*,
vpmull*/vpmul*/vpmadd*/pmadd*/vpdp*, imul/mul/mulx. The packers (run once at prepare
time) and the scale epilogue (its own file) are not micro-kernel inner loops and are not
selected. Prints every function it checked; fails too when nothing was checked, or when a
--require substring matches none of the checked functions (a kernel that must be checked).
--require-from reads more required names from a kernel list (kernels/<op>/ukernels/
ukernels.inc): every distinct match of --require-regex in it (group 1 if the regex has a
group), once per --require-suffix (default: the name alone).
"""
import argparse
import platform
import re
import subprocess
import sys

MULTIPLY = re.compile(
    r"^(v?mul[sp][sd]|v?mulx|imul[a-z]?|mul[bwlq]?|v?pmul\w*|v?pmadd\w*|vpdp\w*|"
    r"vfn?m(add|sub)\w*|vfmaddsub\w*|vfmsubadd\w*|v4fmadd\w*|vdpbf16ps|vgf2p8mul\w*|"
    r"v?dpp[sd]|vpclmul\w*|v?pclmul\w*)$")
# AArch64 (the docstring lists them): every multiply, multiply-add, dot product and matrix
# multiply of the base, FP, Advanced SIMD and SVE instruction sets.
MULTIPLY_AARCH64 = re.compile(
    r"^(fmulx?|fnmul|fml[as]l?2?|fn?m(add|sub)|fcmla|bfml[as]l[bt]|bfdot|bfmmla|fmmla|"
    r"mul|ml[as]|mneg|madd|msub|[su]mul[lh]2?|[su]m(add|sub|neg)l|[su]ml[as]l2?|"
    r"sqdmull2?|sqdml[as]l2?|sqr?dmulh|sqrdml[as]h|pmull?2?|"
    r"[su]dot|usdot|sudot|[su]mmla|usmmla|"
    r"mad|msb|fmad|fmsb|fnmad|fnmsb|fnml[as]|ftmad|sqrdcmlah|cdot|cmla)$")
MULTIPLY_BY_ARCH = {"x86_64": MULTIPLY, "aarch64": MULTIPLY_AARCH64}
EM_ARCH = {62: "x86_64", 183: "aarch64"}

FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
INSN = re.compile(r"^\s*[0-9a-f]+:\s+(?:[0-9a-f]{2} )+\s*(\S+)")


def elf_arch(path):
    """The architecture of an object file, or of an archive's first ELF member; None if
    there is no ELF in it (an empty archive)."""
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    i = data.find(b"\x7fELF")
    if i < 0 or len(data) < i + 20:
        return None
    return EM_ARCH.get(int.from_bytes(data[i + 18:i + 20], "little"), "unknown")


def default_objdump(arch):
    host = platform.machine()
    if arch == "aarch64" and host not in ("aarch64", "arm64"):
        return "aarch64-linux-gnu-objdump"
    if arch == "x86_64" and host not in ("x86_64", "AMD64"):
        return "x86_64-linux-gnu-objdump"
    return "objdump"


def functions(path, objdump="objdump"):
    out = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", path],
                         check=True, capture_output=True, text=True).stdout
    name, insns = None, []
    for line in out.splitlines():
        m = FUNC.match(line)
        if m:
            if name is not None:
                yield name, insns
            name, insns = m.group(1), []
            continue
        if name is None:
            continue
        parts = line.split("\t")
        if len(parts) >= 2 and re.match(r"^\s*[0-9a-f]+:$", parts[0]):
            mnemonic = parts[1].split()[0] if parts[1].split() else ""
            if mnemonic:
                insns.append((mnemonic, line.strip()))
    if name is not None:
        yield name, insns


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pattern", action="append",
                    default=None, help="substring selecting functions (repeatable)")
    ap.add_argument("--regex", action="append", default=None,
                    help="regular expression selecting functions by name (repeatable)")
    ap.add_argument("--exclude", action="append", default=["_pack", "geometry", "packed_size"])
    ap.add_argument("--require", action="append", default=[],
                    help="substring that must match a checked function (repeatable)")
    ap.add_argument("--require-from", action="append", default=[],
                    help="kernel list file to read required names from (repeatable)")
    ap.add_argument("--require-regex", action="append", default=[],
                    help="regex of the names to require in --require-from files (repeatable)")
    ap.add_argument("--require-suffix", action="append", default=[],
                    help="suffix appended to each name read from a list (repeatable)")
    ap.add_argument("--arch", default="auto", choices=["auto"] + sorted(MULTIPLY_BY_ARCH),
                    help="architecture of the files (auto: from their ELF headers)")
    ap.add_argument("--objdump", default=None, help="objdump program (default: by --arch)")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    arch = args.arch
    if arch == "auto":
        found = {a for a in map(elf_arch, args.files) if a}
        if len(found) != 1 or not found <= set(MULTIPLY_BY_ARCH):
            print(f"FAIL: cannot tell the architecture of the files (found {sorted(found)});"
                  " pass --arch")
            return 1
        arch = found.pop()
    multiply = MULTIPLY_BY_ARCH[arch]
    objdump = args.objdump or default_objdump(arch)
    print(f"architecture {arch}, {objdump}")
    if args.require_from and not args.require_regex:
        ap.error("--require-from needs --require-regex")
    listed = []
    for path in args.require_from:
        text = open(path).read()
        for rx in args.require_regex:
            for m in re.finditer(rx, text):
                name = m.group(1) if m.re.groups else m.group(0)
                if name not in listed:
                    listed.append(name)
        if not listed:
            print(f"FAIL: --require-regex matched nothing in {path}")
            return 1
    args.require += [n + sfx for n in listed for sfx in (args.require_suffix or [""])]
    regexes = [re.compile(r) for r in (args.regex or [])]
    patterns = args.pattern or ([] if regexes else [r"ternary_gemv_f32_f32_"])
    # Local helpers (anonymous namespace, templates) of fp32 ukernel files are selected too:
    # a function is checked if its name matches a pattern, or if it is defined in an object
    # whose exported ukernel matches and is not excluded.
    checked, bad = [], []
    for path in args.files:
        current_obj_is_f32 = False
        if elf_arch(path) is None:  # an empty archive (a library of the other architecture)
            continue
        for name, insns in functions(path, objdump):
            sel = (any(p in name for p in patterns) or any(r.search(name) for r in regexes)) \
                and not any(e in name for e in args.exclude)
            if not sel:
                continue
            muls = [l for (mn, l) in insns if multiply.match(mn)]
            checked.append((path, name, len(insns)))
            if muls:
                bad.append((path, name, muls))
    for path, name, n in checked:
        print(f"checked {n:6d} instructions  {name}  ({path})")
    if not checked:
        print("FAIL: no fp32 micro-kernel function found in", args.files)
        return 1
    for path, name, muls in bad:
        print(f"FAIL: multiply in {name} ({path}):")
        for l in muls[:20]:
            print("    ", l)
    missing = [r for r in args.require if not any(r in name for (_, name, _) in checked)]
    for r in missing:
        print(f"FAIL: required function {r!r} was not found among the checked functions")
    if bad or missing:
        return 1
    print(f"OK: {len(checked)} fp32 micro-kernel functions, no multiply instruction")
    return 0


if __name__ == "__main__":
    sys.exit(main())
