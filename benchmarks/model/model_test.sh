#!/bin/sh
# Runs model.py --quick over a fixture checkout (one SDOT kernel) and checks its row.
set -eu
root="${TEST_TMPDIR:-$(mktemp -d)}/root"
d="benchmarks/model/testdata"
mkdir -p "$root/kernels/ternary/ukernels" "$root/toolchains"
cp "$d/ukernels.inc" "$root/kernels/ternary/ukernels/"
cp "$d/ternary_gemv_f32_qd8_q2b128_4x1__neon_dotprod.cc" "$root/kernels/ternary/ukernels/"
cp "$d/BUILD.fixture" "$root/kernels/ternary/BUILD"
cp toolchains/defs.bzl "$root/toolchains/"
out="$(python3 benchmarks/model/model.py --root "$root" --quick)"
echo "$out"
# 8 sdot per iteration (2 per 16-byte step, unrolled x4 by the fixture) = 128 weights; the
# row must carry a cycle count and a weights/cycle figure, labelled as modelled.
echo "$out" | grep -q "modelled (llvm-mca 19)"
echo "$out" | grep -Eq "^ternary_gemv_f32_qd8_q2b128_4x1__neon_dotprod +N2 +[0-9.]+ +128 +[0-9.]+ " || {
  echo "FAIL: no modelled row with 128 weights per iteration"; exit 1; }
echo PASS
