#!/usr/bin/env bash
# ci/setup_amd64_root.sh DEST: the amd64 root for ARM hosts (see setup_cross_root.sh).
exec "$(dirname "${BASH_SOURCE[0]}")/setup_cross_root.sh" amd64 "$@"
