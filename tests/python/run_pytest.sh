#!/usr/bin/env bash
# Runs tests/python against the built package in runfiles: natively when the target is the
# host's architecture, else under qemu-user (-cpu from CPUKERN_QEMU_CPU) with the cross root.
set -euo pipefail
target="${1#--target-arch=}"
shift
runfiles="${TEST_SRCDIR:-$0.runfiles}/cpukern"
tests="$runfiles/tests/python"
pytest_args=(-p no:cacheprovider -q -rs --rootdir "$tests" "$tests")
[[ -n "${XML_OUTPUT_FILE:-}" ]] && pytest_args+=(--junitxml="$XML_OUTPUT_FILE")
export PYTHONDONTWRITEBYTECODE=1
if [[ "$target" == "$(uname -m)" ]]; then
  unset CPUKERN_QEMU_CPU
  export PYTHONPATH="$runfiles/python:$tests"
  exec "$(cat "$TEST_SRCDIR/cpukern_python/interpreter.txt")" -m pytest "${pytest_args[@]}" "$@"
fi
# The cross root holds the guest's own site-packages; qemu-python adds them.
exec "$runfiles/ci/qemu-python" --cpu "${CPUKERN_QEMU_CPU:-max}" --root "$CPUKERN_CROSS_ROOT" \
  --env CPUKERN_QEMU_CPU="${CPUKERN_QEMU_CPU:-max}" \
  --pythonpath "$runfiles/python" --pythonpath "$tests" -- -m pytest "${pytest_args[@]}" "$@"
