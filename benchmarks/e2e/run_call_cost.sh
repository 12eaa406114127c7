#!/usr/bin/env bash
# Runs benchmarks/e2e/call_cost.py with the interpreter bazelw set up and the built package.
set -euo pipefail
runfiles="${RUNFILES_DIR:-$0.runfiles}/cpukern"
python="$(cat "${RUNFILES_DIR:-$0.runfiles}/cpukern_python/interpreter.txt")"
export PYTHONPATH="$runfiles/python"
exec "$python" "$runfiles/benchmarks/e2e/call_cost.py" "$@"
