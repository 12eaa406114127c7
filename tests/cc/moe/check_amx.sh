#!/usr/bin/env bash
# The amx library ($1, libukernels_amx.a) must run the AMX instructions natively: tile
# configuration, loads, stores and both dot products present, and no call into the emulation
# (kernels/common/amx_emulation.h is for the simde_amx test row only).
set -euo pipefail
dis="$(objdump -d "$1")"
for insn in ldtilecfg tilerelease tileloadd tilestored tilezero tdpbf16ps tdpbssd; do
  if ! grep -qw "$insn" <<<"$dis"; then
    echo "FAIL: no $insn in $1"
    exit 1
  fi
done
if objdump -t "$1" | grep -q amx_emulation; then
  echo "FAIL: $1 refers to the AMX emulation"
  exit 1
fi
echo "ok: $1 runs ldtilecfg, tileloadd, tdpbf16ps, tdpbssd, ... natively"
