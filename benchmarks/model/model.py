"""Static performance model of cpukern's micro-kernels with llvm-mca 19.

For every micro-kernel named in the three kernel lists (kernels/<op>/ukernels/ukernels.inc):
compile its source with its real flags (toolchains/defs.bzl: COPTS + ISA_COPTS[isa of the
library that builds it]) to assembly, take its hot loop, run llvm-mca-19 on it for each core
and print cycles per iteration, weights (ternary, widely-linear) or FLOP (MoE) per cycle and
the bottleneck. arm rows -> Neoverse N1/N2/V1/V2; x86 rows -> LLVM's znver4 model (the calibration rows).

No markers in the sources: the loops are found in the assembly. A loop = a backward branch
to an earlier label of the same function; an innermost loop contains no other loop. The hot
loop of a micro-kernel is chosen by its SIGNATURE instructions (the table LAYOUTS below: the
instruction that consumes the weights, e.g. `sdot`): the innermost loop with the most of
them; on a tie the one with the most signature instructions per vector load (at batch 1
every loaded activation vector serves all the rows of the tile, so this ratio is highest in
the batch-1 loop; the batch-2+ loops reload activations per batch row). Weights per
iteration = sum over the loop's signature instructions of the weights each consumes at
batch 1 (derivations next to each entry). This is independent of how far the compiler
unrolled the loop. A kernel whose layout is not in the table gets cycles per iteration only
(of its largest innermost loop), and the table says so.

Every modelled number is labelled "modelled (llvm-mca 19)". Usage:
  ./bazelw run //benchmarks/model [-- --quick] [-- --calibrate] [-- --markdown]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

OPS = {"ternary": "ternary_gemv", "widely_linear": "widely_linear", "moe": "moe_gemm"}
ARM_CORES = ["neoverse-n1", "neoverse-n2", "neoverse-v1", "neoverse-v2"]
X86_CORES = ["znver4"]
LABEL = "modelled (llvm-mca 19)"

# --- the annotation table ---------------------------------------------------------------
# (op, layout word, arch) -> {signature mnemonic: weights consumed per instruction at B=1}.
# A value "bytes" means: the width in bytes of the instruction's vector register (x86 int8
# products: one weight per byte lane). For widely_linear a weight is one ternary code of the
# 4 planes (4 m k per op); the unfused schedule (the *_gemv_* kernel, one sub-GEMV per pass)
# decodes every code twice (each plane drives 2 of the 8 sub-GEMVs), so its signature counts
# half a weight per decoded code.
LAYOUTS = {
    # lut4r16 (NEON fp32): per group of 4 columns x 16 rows (64 weights) 2 nibble lookups x
    # 4 byte planes = 8 tbl -> 8 weights per tbl (a loop of NT tiles has 8 NT tbl).
    ("ternary", "lut4r16", "arm"): {"tbl": 8},
    # q2b128 SDOT (dotprod, and the i8mm kernel's batch-1 path): per 128 weights of a row 8
    # sdot (16 byte products each, one batch row) -> 16 weights per sdot.
    ("ternary", "q2b128", "arm"): {"sdot": 16, "smlal": 8, "smlal2": 8},
    #   ARMv8.0 kernel (no sdot): smlal / smlal2 multiply 8 byte lanes each -> 8 weights.
    # lut3r8 (AVX2 fp32): per group of 3 columns x 8 rows (24 weights) 2 vpermps (the add
    # pattern, the subtract pattern) -> 12 weights per vpermps.
    ("ternary", "lut3r8", "x86"): {"vpermps": 12},
    # lut27r16 (AVX-512 fp32): per group of 3 columns x 16 rows one vpermt2ps -> 48.
    ("ternary", "lut27r16", "x86"): {"vpermt2ps": 48},
    # q2b128 / q2b256 (x86 int8): vpmaddubsw / vpdpbusd multiply one weight per byte lane.
    ("ternary", "q2b128", "x86"): {"vpmaddubsw": "bytes", "vpdpbusd": "bytes"},
    ("ternary", "q2b256", "x86"): {"vpmaddubsw": "bytes", "vpdpbusd": "bytes"},
    ("ternary", "q2b128r4", "x86"): {"vpmaddubsw": "bytes", "vpdpbusd": "bytes"},
    ("ternary", "q2b256r4", "x86"): {"vpmaddubsw": "bytes", "vpdpbusd": "bytes"},
    # t2p16x4 (NEON): one cmtst decodes the nonzero mask of 4 columns of one plane; the
    # fused kernel uses it for both sub-GEMVs of the plane -> 4 weights; the unfused (gemv)
    # kernel -> 2 (see above).
    ("widely_linear", "t2p16x4", "arm"): {"cmtst": 4},
    ("widely_linear", "t2p16x4", "arm", "gemv"): {"cmtst": 2},
}
# MoE: FLOP per instruction (a multiply-add = 2 FLOP; for the int8 tiles integer OP, counted
# alike so that int8 and bf16 tiles compare).
FLOPS = {
    "bfmmla": 32,  # 2x4 by 4x2 bf16 -> 2x2 fp32: 16 multiply-adds
    "bfdot": 16,   # 4 lanes x 2 products
    "fmla": 8,     # .4s: 4 lanes (by element or vector)
    "smmla": 64,   # 2x8 by 8x2 int8 -> 2x2 int32: 32 multiply-adds
    "sdot": 32,    # .4s: 4 lanes x 4 int8 products (by element or vector)
    "vfmadd231ps": "lanes4", "vfmadd213ps": "lanes4", "vfmadd132ps": "lanes4",
    "vdpbf16ps": "lanes4x2",
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--root", default=os.environ.get("BUILD_WORKSPACE_DIRECTORY") or
                    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ap.add_argument("--quick", action="store_true",
                    help="one kernel (the NEON SDOT ternary kernel) on one core: a smoke test")
    ap.add_argument("--kernel", default="", help="regex over micro-kernel names")
    ap.add_argument("--cores", default="", help="comma list overriding the cores")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--w4a8", action="store_true",
                    help="the AArch64 W4A8 tiles against the MXFP4 tiles they replace, per row "
                         "count (w4a8_table below)")
    ap.add_argument("--calibrate", default="",
                    help="path of the calibration binary (benchmarks/model:calibrate): adds the "
                         "measured cycles per weight of the x86 kernels on this machine")
    ap.add_argument("--show-loop", action="store_true", help="print each chosen loop")
    ap.add_argument("--mca", default=shutil.which("llvm-mca-19") or "llvm-mca-19")
    return ap.parse_args()


# --- repository tables ---------------------------------------------------------------------
def balanced_calls(text, name):
    """The argument strings of every call name(...) in text (nested parentheses)."""
    out = []
    for m in re.finditer(r"^\s*" + re.escape(name) + r"\(", text, re.M):
        i, depth = m.end(), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1])
    return out


def kernel_rows(root, op):
    path = os.path.join(root, "kernels", op, "ukernels", "ukernels.inc")
    if not os.path.exists(path):
        return []
    text = open(path).read()
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))
    rows = []
    for args in [a for macro in ("CPUKERN_VARIANT", "CPUKERN_CATALOGUE_ONLY")
                 for a in balanced_calls(text, macro)]:
        parts = [p.strip() for p in args.split(",")]
        syms = re.findall(r"\b(" + OPS[op] + r"_\w+__\w+)\b", args)
        rows.append({"arch": parts[0], "name": parts[1], "isa": parts[2], "syms": syms})
    return rows


def bzl_tables(root):
    """COPTS and ISA_COPTS of toolchains/defs.bzl (plain list/dict literals: Python)."""
    src = open(os.path.join(root, "toolchains", "defs.bzl")).read()
    ns = {}
    for m in re.finditer(r"^([A-Z_0-9]+) = ([\[{].*?^[\]}])", src, re.M | re.S):
        exec(m.group(0), {}, ns)
    return ns["COPTS"], ns["ISA_COPTS"]


def build_isa(root, op, fname):
    """isa = "..." of the cpukern_cc_library in kernels/<op>/BUILD whose srcs hold fname."""
    text = open(os.path.join(root, "kernels", op, "BUILD")).read()
    lists = {m.group(1): m.group(2) for m in
             re.finditer(r"^([A-Z_0-9]+) = \[(.*?)\]", text, re.M | re.S)}
    for args in balanced_calls(text, "cpukern_cc_library"):
        body = args
        for var, val in lists.items():
            body = re.sub(r"\b" + var + r"\b", val, body)
        if ("ukernels/" + fname) in body:
            m = re.search(r'isa\s*=\s*"(\w+)"', args)
            return m.group(1) if m else "portable"
    return None


def micro_kernels(root):
    """(op, symbol, arch, isa key, source) for the arm and x86 rows, each symbol once."""
    seen, out = set(), []
    for op in OPS:
        for row in kernel_rows(root, op):
            if row["arch"] not in ("arm", "x86"):
                continue
            for sym in row["syms"]:
                if sym in seen:
                    continue
                seen.add(sym)
                fname = sym + ".cc"
                src = os.path.join(root, "kernels", op, "ukernels", fname)
                if not os.path.exists(src):
                    # e.g. widely-linear batched kernels defined inside another kernel's file
                    out.append((op, sym, row["arch"], row["isa"], None))
                    continue
                out.append((op, sym, row["arch"], build_isa(root, op, fname) or row["isa"], src))
    return out


# --- assembly -----------------------------------------------------------------------------
def compile_asm(root, src, arch, flags, out_dir):
    cxx = "aarch64-linux-gnu-g++" if arch == "arm" else "g++"
    asm = os.path.join(out_dir, os.path.basename(src)[:-3] + ".s")
    cmd = [cxx] + flags + ["-I", root, "-S", "-o", asm, src]
    subprocess.run(cmd, check=True, stderr=subprocess.PIPE, text=True)
    return open(asm).read(), " ".join(cmd[:1] + flags)


BRANCH_ARM = re.compile(r"^(b|b\.?(eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al)|cbn?z|tbn?z)$")
BRANCH_X86 = re.compile(r"^j\w+$")


def innermost_loops(asm, arch):
    """[(label, [instruction lines])] of every innermost loop."""
    lines = asm.splitlines()
    label_at, insns = {}, []  # insns: (line index, text) of instructions
    func_start = 0
    starts = []
    for i, raw in enumerate(lines):
        # comments: "//" in GCC's AArch64 assembly ('#' starts immediates there), '#' on x86
        s = raw.split("//")[0].strip() if arch == "arm" else raw.split("#")[0].strip()
        if not s:
            continue
        m = re.match(r"^([.\w$]+):$", s)
        if m:
            if not m.group(1).startswith(".L"):
                func_start = i
            label_at[m.group(1)] = (i, func_start)
            continue
        if s.startswith("."):
            continue
        insns.append((i, s))
    loops = []
    branch = BRANCH_ARM if arch == "arm" else BRANCH_X86
    for i, s in insns:
        parts = s.split(None, 1)
        if not branch.match(parts[0]) or len(parts) < 2:
            continue
        target = parts[1].split(",")[-1].strip()
        if target in label_at and label_at[target][0] < i:
            loops.append((label_at[target][0], i, target))
    inner = [l for l in loops
             if not any(o is not l and l[0] <= o[0] and o[1] <= l[1] and (o[0], o[1]) != (l[0], l[1])
                        for o in loops)]
    out = []
    for a, b, target in inner:
        body = [s for i, s in insns if a < i <= b]
        out.append((target, body))
    return out


def mnemonic(s):
    return s.split(None, 1)[0]


def vec_bytes(s):
    return 64 if "zmm" in s else 32 if "ymm" in s else 16


def is_vector_load(s, arch):
    m = mnemonic(s)
    if arch == "arm":
        return m in ("ldr", "ldp", "ld1", "ld1r", "ldur", "ld2", "ld3", "ld4") and bool(
            re.search(r"\b[qv]\d+", s))
    # AT&T: a memory source and a vector destination (the last operand)
    return "(" in s and bool(re.search(r"\).*,\s*%[xyz]mm\d+$", s))


def weights_of(body, table):
    w = 0
    for s in body:
        v = table.get(mnemonic(s))
        if v is None:
            continue
        w += vec_bytes(s) if v == "bytes" else v
    return w


def flops_of(body):
    f = 0
    for s in body:
        v = FLOPS.get(mnemonic(s))
        if v is None:
            continue
        if v == "lanes4":
            v = vec_bytes(s) // 4 * 2
        elif v == "lanes4x2":
            v = vec_bytes(s) // 4 * 4
        f += v
    return f


def choose_loop(loops, arch, score):
    """The loop with the highest score (signature count); ties: most per vector load."""
    def key(l):
        sig = score(l[1])
        loads = sum(is_vector_load(s, arch) for s in l[1]) or 1
        return (sig, sig / loads, len(l[1]))
    return max(loops, key=key) if loops else None


# --- llvm-mca -------------------------------------------------------------------------------
def mattr(flags):
    """llvm-mca -mattr for the AArch64 extensions a -march=...+ext flag enables."""
    exts = []
    for f in flags:
        if f.startswith("-march="):
            exts += f.split("+")[1:]
    return ["-mattr=" + ",".join("+" + e for e in exts)] if exts else []


# AArch64 extensions of each modelled core; a kernel needing one a core lacks is not dispatched
# there and is not modelled on it.
CORE_EXTS = {"neoverse-n1": {"dotprod"},
             "neoverse-n2": {"dotprod", "i8mm", "bf16"},
             "neoverse-v1": {"dotprod", "i8mm", "bf16"},
             "neoverse-v2": {"dotprod", "i8mm", "bf16"}}


_MCA_CACHE = {}


def mca(tool, body, arch, cpu, iterations=1000, flags=()):
    key = (tool, tuple(body), arch, cpu, iterations, tuple(flags))
    if key not in _MCA_CACHE:
        _MCA_CACHE[key] = _mca(tool, body, arch, cpu, iterations, flags)
    return _MCA_CACHE[key]


def _mca(tool, body, arch, cpu, iterations, flags):
    triple = "aarch64-linux-gnu" if arch == "arm" else "x86_64-linux-gnu"
    r = subprocess.run([tool, "-mtriple=" + triple, "-mcpu=" + cpu, "-iterations=%d" % iterations,
                        "-bottleneck-analysis"] + mattr(flags),
                       input="\n".join(body) + "\n", capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("llvm-mca failed: " + r.stderr.strip()[:400])
    out = r.stdout
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1)) / iterations
    names = dict(re.findall(r"^\[([\d.]+)\]\s+-\s+(\w+)", out, re.M))
    m = re.search(r"Resource pressure per iteration:\n(.*)\n(.*)\n", out)
    top, pressure = "", 0.0
    if m:
        keys = re.findall(r"\[([\d.]+)\]", m.group(1))
        vals = [0.0 if v == "-" else float(v) for v in m.group(2).split()]
        # units of one kind (e.g. V0, V1, or the 2 instances of N2UnitL01) summed per kind
        by_unit = {}
        for k, v in zip(keys, vals):
            by_unit.setdefault(names.get(k, k), []).append(v)
        for unit, vs in by_unit.items():
            if max(vs) > pressure:
                top, pressure = unit, max(vs)
    dep = re.search(r"Data Dependencies:\s+\[\s*([\d.]+)%", out)
    res = re.search(r"Resource Pressure\s+\[\s*([\d.]+)%", out)
    # the family of the busiest unit (N2UnitV0 -> the V pipes N2UnitV*), its mean load
    fam = re.sub(r"\d+$", "", top)
    loads = [max(vs) for u, vs in by_unit.items() if re.sub(r"\d+$", "", u) == fam] if top else []
    fam_util = sum(loads) / len(loads) / cycles if loads else 0
    unit = "%s x%d %d%%" % (fam, len(loads), round(100 * fam_util)) if len(loads) > 1 and fam_util >= 0.85 * pressure / cycles else \
        "%s %d%%" % (top, round(100 * pressure / cycles))
    if pressure >= 0.9 * cycles:
        neck = unit
    else:
        neck = "latency/deps (busiest: %s)" % unit
    if dep and res and (float(dep.group(1)) > 0 or float(res.group(1)) > 0):
        neck += "; stalls: res %s%% dep %s%%" % (res.group(1), dep.group(1))
    return cycles, neck


def peak_flops(tool, arch, cpu, body, flags=()):
    """Modelled peak FLOP/cycle of the loop's dominant FLOP instruction: 24 independent ones."""
    counts = {}
    for s in body:
        if FLOPS.get(mnemonic(s)) is not None:
            counts[s] = counts.get(s, 0) + 1
    if not counts:
        return None
    sample = max(counts, key=counts.get)
    insns = []
    for i in range(24):
        if arch == "arm":
            insns.append(re.sub(r"\bv\d+\.", "v%d." % i, sample, count=1))
        else:
            insns.append(re.sub(r"%([xyz]mm)\d+$", r"%%\g<1>%d" % i, sample.rstrip()))
    # sources: registers no accumulator uses
    fixed = []
    for s in insns:
        if arch == "arm":
            parts = s.split(",")
            parts[1:] = [re.sub(r"v\d+", "v%d" % (28 + j), p) for j, p in enumerate(parts[1:])]
            fixed.append(",".join(parts))
        else:
            ops = s.split(None, 1)[1].split(",")
            ops = [re.sub(r"%([xyz]mm)\d+", r"%%\g<1>%d" % (28 + j), o.strip()) if j < len(ops) - 1
                   else o.strip() for j, o in enumerate(ops)]
            fixed.append(mnemonic(s) + " " + ", ".join(ops))
    cyc, _ = mca(tool, fixed, arch, cpu, 4000, flags)
    return flops_of(fixed) / cyc


# --- main -----------------------------------------------------------------------------------
def layout_of(sym):
    # <op>_<type>[_<type>...]_<layout>[_gemv]_<tile>__<isa>: the word before the tile
    m = re.match(r"^(?:ternary_gemv|widely_linear|moe_gemm)_(.*)_(\d+x\d+)__(\w+)$", sym)
    if not m:
        return None, None, False
    words = m.group(1).split("_")
    gemv = words[-1] == "gemv"
    if gemv:
        words = words[:-1]
    return words[-1], m.group(2), gemv


def table_for(op, sym, arch):
    layout, _, gemv = layout_of(sym)
    if gemv and (op, layout, arch, "gemv") in LAYOUTS:
        return LAYOUTS[(op, layout, arch, "gemv")]
    return LAYOUTS.get((op, layout, arch))


def model_kernel(args, copts, isa_copts, op, sym, arch, isa, src, cores, tmp, show):
    rows = []
    flags = copts + isa_copts.get(isa, [])
    if src is None:
        return [dict(kernel=sym, core="-", note="no source file of its own (defined with another kernel)")]
    asm, cmd = compile_asm(args.root, src, arch, flags, tmp)
    loops = innermost_loops(asm, arch)
    if op == "moe":
        table, score = None, flops_of
    else:
        table = table_for(op, sym, arch)
        score = (lambda b: weights_of(b, table)) if table else (lambda b: 0)
    loop = choose_loop(loops, arch, score)
    if loop is None:
        return [dict(kernel=sym, core="-", note="no loop found")]
    label, body = loop
    if show:
        print("# %s: loop %s, %d instructions (%s)" % (sym, label, len(body), cmd))
        print("\n".join("    " + s for s in body))
    per_iter = score(body) if (table or op == "moe") else 0
    need = set()
    for f in flags:
        if f.startswith("-march="):
            need |= set(f.split("+")[1:])
    for cpu in cores:
        missing = need - CORE_EXTS.get(cpu, need)
        if missing:
            rows.append(dict(kernel=sym, core=cpu, note="not modelled: %s has no %s" % (
                short(cpu), "/".join(sorted(missing)))))
            continue
        try:
            cyc, neck = mca(args.mca, body, arch, cpu, flags=flags)
        except RuntimeError as e:
            rows.append(dict(kernel=sym, core=cpu, note="FAILED: " + str(e)[:120]))
            continue
        r = dict(kernel=sym, core=cpu, cyc=cyc, insns=len(body), neck=neck)
        if op == "moe" and per_iter:
            r["flop"] = per_iter / cyc
            r["peak"] = peak_flops(args.mca, arch, cpu, body, flags)
        elif per_iter:
            r["wpi"] = per_iter
            r["wpc"] = per_iter / cyc
        else:
            r["note"] = "layout not in the annotation table: cycles/iteration only"
        rows.append(r)
    return rows


# ggml's NEON loops modelled by llvm-mca 19 (an earlier session; /work/shared/BRIEF.md 4):
# one row, activations already int8, loads from L1. Weights per cycle on N1, N2, V1, V2.
GGML = {"ggml TQ2_0 (sdot; 16 sdot, 12 ushr, 16 and per 256 w)": [9.3, 9.3, 18.6, 18.3],
        "ggml TQ1_0": [5.3, 5.3, 10.7, 10.5]}


def host_cpu(tool):
    """The host core as LLVM names it (llvm-mca --version: "Host CPU: znver3")."""
    r = subprocess.run([tool, "--version"], capture_output=True, text=True)
    m = re.search(r"Host CPU:\s*(\S+)", r.stdout)
    return m.group(1) if m else ""


def short(cpu):
    return cpu.replace("neoverse-", "").upper() if cpu.startswith("neoverse") else cpu


def calibrate(args, results):
    """Measured cycles per weight of the x86 ternary kernels (benchmarks/model:calibrate)."""
    out = subprocess.run([args.calibrate], capture_output=True, text=True, check=True).stdout
    meas, ghz = {}, None
    for line in out.splitlines():
        if line.startswith("clock_ghz"):
            ghz = float(line.split()[1])
        elif line.startswith("kernel"):
            _, name, ns_per_w = line.split()[:3]
            meas[name] = float(ns_per_w)
    return ghz, meas, out


# --- W4A8 (issue 28): the int8-activation MXFP4 tiles against the exact MXFP4 tiles --------
# (W4A8 tile, the MXFP4 tile of the row it serves, weights its MXFP4 decode gives per tbl).
# Every loop of both files that decodes e2m1 codes (has tbl) and multiplies is classified by
# rows = multiply-adds / decoded weights (each weight serves every row of the tile; SMMLA and
# BFMMLA compute row pairs, so 1 row runs the 2-row loop at half use). The MXFP4 tiles' fast
# paths and in-register decodes both have tbl; their prefill over a decoded buffer (more rows
# than the tile: gemm_loop.h decoded_gemm) has none and is listed as "buffer", its decode not
# counted.
W4A8_PAIRS = [
    ("moe_gemm_f32_qd8_mxfp4p16x4_8x16__neon_dotprod", "moe_gemm_f32_f32_mxfp4p16_4x16__neon_fma", 16),
    ("moe_gemm_f32_qd8_mxfp4p8x8_8x8__neon_i8mm", "moe_gemm_f32_bf16p8x4_mxfp4p8x4_8x8__neon_bfmmla", 8),
    ("moe_gemm_f32_qd8_mxfp4p16x16_4x16__neon_generic", "moe_gemm_f32_f32_mxfp4p16_4x16__neon_fma", 16),
]
MACS = {"sdot": 16, "smmla": 32, "smull": 8, "smull2": 8, "smlal": 8, "smlal2": 8, "bfmmla": 16,
        "fmla": 4}  # multiply-adds per instruction (fmla: .4s only)


def macs_of(body):
    return sum(MACS.get(mnemonic(s), 0) for s in body if mnemonic(s) != "fmla" or ".4s" in s)


def w4a8_loops(args, copts, isa_copts, sym, wpt, tmp):
    """{rows: (body, MAC/iter)} of the kernel's e2m1 loops (rows 0: the decoded-buffer loop)."""
    src = os.path.join(args.root, "kernels", "moe", "ukernels", sym + ".cc")
    flags = copts + isa_copts.get(build_isa(args.root, "moe", sym + ".cc") or "portable", [])
    asm, _ = compile_asm(args.root, src, "arm", flags, tmp)
    out = {}
    for _, body in innermost_loops(asm, "arm"):
        mac, tbl = macs_of(body), sum(1 for s in body if mnemonic(s) == "tbl")
        rows = round(mac / (tbl * wpt)) if tbl else 0
        if mac == 0 or (rows == 0 and mac < max((m for _, m in out.get(0, [])), default=0)):
            continue
        out.setdefault(rows, []).append((body, mac))
    return out, flags


def w4a8_table(args):
    copts, isa_copts = bzl_tables(args.root)
    tmp = tempfile.mkdtemp(prefix="cpukern_model_")
    cores = args.cores.split(",") if args.cores else ARM_CORES
    lines = []
    hdr = ["W4A8 tile", "MXFP4 tile", "rows", "core", "W4A8 MAC/cycle", "cycles per block",
           "MXFP4 MAC/cycle", "W4A8 / MXFP4"]
    lines.append(hdr)
    for w4, base, wpt in W4A8_PAIRS:
        wl, wflags = w4a8_loops(args, copts, isa_copts, w4, 16, tmp)
        bl, bflags = w4a8_loops(args, copts, isa_copts, base, wpt, tmp)
        nr = int(re.search(r"_\d+x(\d+)__", w4).group(1))
        for m in (1, 2, 4, 8):
            need = set(f.split("+", 1)[1] for f in wflags + bflags if f.startswith("-march=") and "+" in f)
            def best(loops, rows, flags, cpu):
                """MAC/cycle of the fastest loop for `rows` rows (a pair loop for an odd count
                at its use), cycles of that loop per 32-k block of rows x nr columns."""
                cands = [(b, mac, rows / r) for r, ls in loops.items() if r in (rows, rows + 1) and r
                         for b, mac in ls]
                if not cands:
                    return None
                res = []
                for b, mac, use in cands:
                    cyc, _ = mca(args.mca, b, "arm", cpu, flags=flags)
                    res.append((mac * use / cyc, cyc))
                return max(res)
            for cpu in cores:
                exts = set()
                for f in wflags + bflags:
                    if f.startswith("-march="):
                        exts |= set(f.split("+")[1:])
                if exts - CORE_EXTS.get(cpu, exts):
                    continue
                w = best(wl, m, wflags, cpu)
                if w is None:
                    continue
                b = best(bl, m, bflags, cpu)
                note = ""
                if b is None and 0 in bl:  # more rows than the MXFP4 tile: its decoded buffer
                    b = max((mac / mca(args.mca, bb, "arm", cpu, flags=bflags)[0], 0)
                            for bb, mac in bl[0])
                    note = " (buffer)"
                cyc_block = m * nr * 32 / w[0]
                lines.append([w4, base, str(m), short(cpu), "%.1f" % w[0], "%.1f" % cyc_block,
                              ("%.1f" % b[0] + note) if b else "-",
                              "%.2fx" % (w[0] / b[0]) if b else "-"])
    shutil.rmtree(tmp, ignore_errors=True)
    print("All numbers: %s, hot loop only (operands in L1). MAC = useful multiply-adds "
          "(a 1-row SMMLA / BFMMLA loop counts half); cycles per block = one 32-k block of "
          "rows x the W4A8 tile's columns." % LABEL)
    for i, l in enumerate(lines):
        print("| " + " | ".join(l) + " |" if args.markdown else "  ".join(l))
        if args.markdown and i == 0:
            print("|" + "---|" * len(l))
    return 0


def main():
    args = parse_args()
    if args.w4a8:
        return w4a8_table(args)
    copts, isa_copts = bzl_tables(args.root)
    kernels = micro_kernels(args.root)
    if args.quick:
        kernels = [k for k in kernels if k[1] == "ternary_gemv_f32_qd8_q2b128_4x1__neon_dotprod"]
    elif args.kernel:
        kernels = [k for k in kernels if re.search(args.kernel, k[1])]
    tmp = tempfile.mkdtemp(prefix="cpukern_model_")
    results = []
    host = host_cpu(args.mca)
    x86_cores = X86_CORES + ([host] if host and host not in X86_CORES and
                             not host.startswith(("neoverse", "generic")) else [])
    for op, sym, arch, isa, src in kernels:
        cores = (args.cores.split(",") if args.cores else
                 (ARM_CORES if arch == "arm" else x86_cores))
        if args.quick:
            cores = ["neoverse-n2"]
        if arch == "x86" and isa.startswith("avx512") and host in cores and host != "znver4":
            cores = [c for c in cores if c != host]  # the host core (calibration) has no AVX-512
        try:
            rows = model_kernel(args, copts, isa_copts, op, sym, arch, isa, src, cores, tmp,
                                args.show_loop)
        except (subprocess.CalledProcessError, RuntimeError) as e:
            err = getattr(e, "stderr", None) or str(e)
            rows = [dict(kernel=sym, core="-", note="FAILED: " + err.strip().splitlines()[-1][:120])]
        for r in rows:
            r["op"], r["arch"] = op, arch
        results.extend(rows)
    shutil.rmtree(tmp, ignore_errors=True)

    calib = None
    if args.calibrate:
        calib = calibrate(args, results)

    # --- print ---
    md = args.markdown
    hdr = ["kernel", "core", "cycles/iter", "weights/iter", "weights/cycle", "FLOP/cycle (peak)",
           "measured", "bottleneck / note"]
    lines = []

    def emit(cols):
        if md:
            lines.append("| " + " | ".join(cols) + " |")
        else:
            lines.append("  ".join(cols))

    print("All numbers but 'measured': %s, hot loop only (operands in L1, no prologue/epilogue)."
          % LABEL)
    emit(hdr)
    if md:
        emit(["---"] * len(hdr))
    for r in results:
        if "cyc" not in r:
            emit([r["kernel"], r["core"], "-", "-", "-", "-", "-", r.get("note", "")])
            continue
        measured = "-"
        if calib and r["arch"] == "x86" and r.get("wpc") and r["core"] == x86_cores[-1]:
            ghz, meas, _ = calib
            if r["kernel"] in meas:
                cpw = meas[r["kernel"]] * ghz  # cycles per weight measured
                measured = "%.3f cyc/w (model %.3f: %+.0f%%)" % (
                    cpw, 1 / r["wpc"], 100 * (1 / r["wpc"] - cpw) / cpw)
        emit([r["kernel"], short(r["core"]), "%.2f" % r["cyc"],
              str(r.get("wpi", "-")), "%.1f" % r["wpc"] if "wpc" in r else "-",
              "%.0f (%.0f)" % (r["flop"], r["peak"]) if r.get("flop") else "-",
              measured, r.get("note", r.get("neck", ""))])
    if not args.quick:
        for name, vals in GGML.items():
            for cpu, v in zip(ARM_CORES, vals):
                emit([name, short(cpu), "-", "-", "%.1f" % v, "-", "-",
                      "anchor: llvm-mca 19 of ggml's loop (earlier session, BRIEF.md 4)"])
    print("\n".join(lines))
    if calib:
        ghz, meas, raw = calib
        print("\nCalibration (this machine, measured):")
        print(raw.rstrip())
    return 1 if any(r.get("note", "").startswith("FAILED") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
