#!/usr/bin/env bash
# Runs benchmarks/peer/ik_peer_test.py (no ik_llama.cpp needed) with the interpreter bazelw set
# up and the built package.
set -euo pipefail
python="$(cat "${RUNFILES_DIR:-$0.runfiles}/cpukern_python/interpreter.txt")"
export PYTHONPATH="${RUNFILES_DIR:-$0.runfiles}/cpukern/python"
exec "$python" "${RUNFILES_DIR:-$0.runfiles}/cpukern/benchmarks/peer/ik_peer_test.py"
