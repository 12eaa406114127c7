#!/usr/bin/env python3
"""Fails if a source file under kernels/ knows Python: includes CPython or nanobind, or names
Python's API or its libraries in a string (kernels/ is C++ with typed errors; the extension,
python/ext, words the Python side of a message: kernels/common/errors.h's Remedy).

Usage: check_kernels_no_python.py FILE...
"""
import re
import sys

INCLUDE = re.compile(r'#\s*include\s*[<"](Python\.h|nanobind/[^>"]*|pybind11/[^>"]*)[>"]')
# Python-only names: the package's modules, torch, numpy, and the Python words of messages.
NAMES = re.compile(r"cpukern\.|\btorch\b|\bnumpy\b|\bnp\.|state_dict|aligned_empty|"
                   r"KeyboardInterrupt|\bPython\b|\bPy[A-Z]\w+|\.py\b")
STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def code_of(line: str) -> str:
    """The line without its // comment (a // inside a string literal is kept)."""
    out, i = [], 0
    for m in STRING.finditer(line):
        head = line[i:m.start()]
        if "//" in head:
            out.append(head[:head.index("//")])
            return "".join(out)
        out.append(head + m.group(0))
        i = m.end()
    rest = line[i:]
    return "".join(out) + (rest[:rest.index("//")] if "//" in rest else rest)


def main() -> int:
    bad = []
    for path in sys.argv[1:]:
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            code = code_of(line)
            if INCLUDE.search(code):
                bad.append(f"{path}:{n}: includes Python: {line.strip()}")
            for s in STRING.findall(code):
                if NAMES.search(s):
                    bad.append(f"{path}:{n}: a Python name in a string: {s}")
    if len(sys.argv) < 10:
        bad.append(f"expected the sources of kernels/, got {len(sys.argv) - 1} files")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
