"""ggml's test-backend-ops as a peer benchmark (stdlib only; shared by benchmarks/peer/ggml_peer.py
and benchmarks/ternary/b3p5_vs_q2b.py): enum values from the build's own ggml.h, --test-file
lines, the get_nprocs shim that sets its thread count, and the run with its us/run parsed.
Nothing of ggml is vendored: the user points these at their own build directory."""
import os
import re
import subprocess

SHIM = r"""
#include <stdlib.h>
/* test-backend-ops: N_THREADS = std::thread::hardware_concurrency() = get_nprocs() */
int get_nprocs(void) { const char* s = getenv("CPUKERN_PEER_THREADS"); return s ? atoi(s) : 1; }
"""


def build_shim(work: str) -> str:
    """Compiles SHIM into work/nprocs.so (LD_PRELOADed by run_ggml)."""
    shim = os.path.join(work, "nprocs.so")
    with open(os.path.join(work, "nprocs.c"), "w") as f:
        f.write(SHIM)
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O2", "-o", shim,
                    os.path.join(work, "nprocs.c")], check=True)
    return shim


def ggml_enums(build: str) -> tuple[dict[str, int], dict[str, int]]:
    """(ggml_type, ggml_op) name -> value, parsed from the build's own include/ggml.h."""
    src = None
    for line in open(os.path.join(build, "CMakeCache.txt")):
        if line.startswith("CMAKE_HOME_DIRECTORY:"):
            src = line.split("=", 1)[1].strip()
    # ggml's own tree, or llama.cpp's (ggml under ggml/)
    inc = [os.path.join(src, d, "include", "ggml.h") for d in (".", "ggml")]
    header = open(next((p for p in inc if os.path.exists(p)), inc[0])).read()

    def enum(name: str) -> dict[str, int]:
        body = re.search(r"enum\s+" + name + r"\s*\{(.*?)\};", header, re.S).group(1)
        body = re.sub(r"/\*.*?\*/", "", re.sub(r"//[^\n]*", "", body), flags=re.S)
        out, v = {}, -1
        for item in (x.strip() for x in body.split(",")):
            if not item:
                continue
            if "=" in item:
                k, e = (p.strip() for p in item.split("=", 1))
                v = out[e] if e in out else int(e, 0)
            else:
                k, v = item, v + 1
            out[k] = v
        return out

    return enum("ggml_type"), enum("ggml_op")


def ggml_source_commit(build: str) -> str:
    for line in open(os.path.join(build, "CMakeCache.txt")):
        if line.startswith("CMAKE_HOME_DIRECTORY:"):
            src = line.split("=", 1)[1].strip()
            r = subprocess.run(["git", "-C", src, "rev-parse", "--short=8", "HEAD"],
                               capture_output=True, text=True)
            return r.stdout.strip() if r.returncode == 0 else f"(not a git checkout: {src})"
    return "?"


def test_line(op: int, out_type: int, ne: list[int], sources: list[tuple[int, list[int]]],
              name: str) -> str:
    """One test-backend-ops --test-file line: contiguous sources (strides 0 = default)."""
    fields = [op, out_type, *ne, 0, len(sources)]
    for t, sne in sources:
        fields += [t, *sne, 0, 0, 0, 0]
    return " ".join(map(str, fields)) + " " + name


def run_ggml(binary: str, shim: str, lines: list[str], threads: int, work: str) -> dict[str, float]:
    """us per run of each named case, as test-backend-ops perf prints it."""
    path = os.path.join(work, f"cases_t{threads}.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = dict(os.environ, LD_PRELOAD=shim, CPUKERN_PEER_THREADS=str(threads))
    r = subprocess.run([binary, "perf", "-b", "CPU", "--test-file", path], capture_output=True,
                       text=True, env=env)
    out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)
    res = {m.group(1): float(m.group(2)) for m in
           re.finditer(r"name=([\w]+),.*?\d+ runs -\s+([\d.]+) us/run", out)}
    missing = [ln.rsplit(" ", 1)[1] for ln in lines if ln.rsplit(" ", 1)[1] not in res]
    if missing:
        raise RuntimeError(f"test-backend-ops gave no time for {missing}:\n{out[-3000:]}")
    return res
