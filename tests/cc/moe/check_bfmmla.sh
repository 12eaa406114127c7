#!/usr/bin/env bash
# Runs tests/static/check_bfmmla.py ($1) on the aarch64 archives of //kernels/moe:
# $2 = libukernels_neon_bf16.a (must contain bfmmla), $3 = libukernels_neon.a (must not).
set -euo pipefail
python3 "$1" "$2"
python3 "$1" --absent "$3"
