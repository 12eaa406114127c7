#!/usr/bin/env bash
# Runs benchmarks/e2e/weights_test.py with the interpreter bazelw set up.
set -euo pipefail
python="$(cat "${RUNFILES_DIR:-$0.runfiles}/cpukern_python/interpreter.txt")"
exec "$python" "${RUNFILES_DIR:-$0.runfiles}/cpukern/benchmarks/e2e/weights_test.py"
