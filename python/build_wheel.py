"""Writes a wheel (PEP 427) from the package files and the compiled extension; stdlib only."""

import argparse
import base64
import hashlib
import os
import zipfile


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--arch", required=True)
    p.add_argument("--extension", required=True)
    p.add_argument("srcs", nargs="*")
    a = p.parse_args()

    tag = f"cp311-cp311-linux_{a.arch}"
    dist = f"cpukern-{a.version}.dist-info"
    files = {}
    for src in a.srcs:  # python/cpukern/<path in the package>, subpackages included
        rel = src.replace(os.sep, "/").partition("python/cpukern/")[2]
        if not rel:
            raise SystemExit(f"build_wheel.py: {src} is not under python/cpukern/")
        with open(src, "rb") as f:
            files["cpukern/" + rel] = f.read()
    with open(a.extension, "rb") as f:
        files[f"cpukern/_ext.cpython-311-{a.arch}-linux-gnu.so"] = f.read()
    files[f"{dist}/METADATA"] = (
        "Metadata-Version: 2.1\nName: cpukern\nVersion: " + a.version + "\n"
        "Summary: CPU kernels for LLM inference (ternary GEMV, widely-linear, fused MoE)\n"
        "Requires-Python: ==3.11.*\nRequires-Dist: numpy>=1.26\nRequires-Dist: ml_dtypes>=0.4\n"
    ).encode()
    files[f"{dist}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: cpukern build_wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    ).encode()
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()

    with zipfile.ZipFile(a.out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, files[name], compress_type=zipfile.ZIP_DEFLATED)


if __name__ == "__main__":
    main()
