#!/usr/bin/env bash
# Runs benchmarks/peer/ik_peer.py with the interpreter bazelw set up and the built package.
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}/cpukern"
python="$(cat "${RUNFILES_DIR:-$0.runfiles}/cpukern_python/interpreter.txt")"
export PYTHONPATH="$runfiles/python"
exec "$python" "$runfiles/benchmarks/peer/ik_peer.py" --probe "$runfiles/benchmarks/bandwidth/bandwidth" "$@"
