#!/usr/bin/env bash
# --run_under wrapper for cross test legs: runs an ELF of another architecture under
# qemu-user (-cpu from CPUKERN_QEMU_CPU, default max); anything else runs as it is.
set -euo pipefail
bin="$1"
shift
if [[ "$(head -c 4 "$bin" | od -An -c | tr -d ' ')" == "177ELF" ]]; then
  machine=$(od -An -tu2 -j18 -N2 "$bin" | tr -d ' ')
  case "$machine:$(uname -m)" in
    183:aarch64 | 62:x86_64) ;;  # native (EM_AARCH64 = 183, EM_X86_64 = 62)
    183:*) exec qemu-aarch64 -cpu "${CPUKERN_QEMU_CPU:-max}" -L /usr/aarch64-linux-gnu "$bin" "$@" ;;
    62:*) exec qemu-x86_64 -cpu "${CPUKERN_QEMU_CPU:-max}" -L /usr/x86_64-linux-gnu "$bin" "$@" ;;
  esac
fi
exec "$bin" "$@"
