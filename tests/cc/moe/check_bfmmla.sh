#!/usr/bin/env bash
# Runs tests/static/check_bfmmla.py on the aarch64 archives of //kernels/moe:
# $1 = libukernels_neon_bf16.a (must contain bfmmla), $2 = libukernels_neon.a (must not).
set -euo pipefail
py="$(dirname "$0")/check_bfmmla.py"  # symlink to tests/static/check_bfmmla.py
python3 "$py" "$1"
python3 "$py" --absent "$2"
