#!/usr/bin/env bash
# Runs a tests/packaging Python test with the build's interpreter (bazelw's venv: it has the
# pinned auditwheel), on the host even in cross configurations (the tests read files only).
set -euo pipefail
runfiles="${TEST_SRCDIR:-$0.runfiles}"
python="$(cat "$runfiles/cpukern_python/interpreter.txt")"
cd "$runfiles/cpukern"
export PYTHONDONTWRITEBYTECODE=1
exec "$python" "$@"
