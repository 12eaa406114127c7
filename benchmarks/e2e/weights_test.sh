#!/usr/bin/env bash
# Runs benchmarks/e2e/weights_test.py with the interpreter bazelw set up and the built package
# (the HF writer takes its tensor names from cpukern.torch.families).
set -euo pipefail
python="$(cat "${RUNFILES_DIR:-$0.runfiles}/cpukern_python/interpreter.txt")"
export PYTHONPATH="${RUNFILES_DIR:-$0.runfiles}/cpukern/python"
exec "$python" "${RUNFILES_DIR:-$0.runfiles}/cpukern/benchmarks/e2e/weights_test.py"
