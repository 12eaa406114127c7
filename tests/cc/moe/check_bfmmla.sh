#!/usr/bin/env bash
# Runs tests/static/check_bfmmla.py ($1) with the kernel list ($2) on the aarch64 ISA
# libraries of //kernels/moe ($3...): each neon_bf16 row's object must contain bfmmla (int8:
# smmla), the neon_dotprod row's int8 object sdot, the neon library none of them.
set -euo pipefail
python3 "$@"
