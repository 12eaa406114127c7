#!/usr/bin/env bash
# ci/setup_arm64_root.sh DEST: the arm64 root for x86-64 hosts (see setup_cross_root.sh).
exec "$(dirname "${BASH_SOURCE[0]}")/setup_cross_root.sh" arm64 "$@"
