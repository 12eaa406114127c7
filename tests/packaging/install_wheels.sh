#!/usr/bin/env bash
# tests/packaging/install_wheels.sh: builds both wheels with Bazel and installs each where it
# runs, outside Bazel (pip needs PyPI for numpy/ml_dtypes/safetensors):
#   x86-64 wheel  -> a fresh `python3.11 -m venv`, `pip install WHEEL[io]`; imports cpukern,
#                    runs a ternary GEMV against numpy and a ternary.save/load round trip
#                    (the [io] extra brings safetensors);
#   aarch64 wheel -> `pip install --target` for platform manylinux2014_aarch64/cp311 (pip checks
#                    the tags fit that platform), then the same script under qemu-aarch64 with the
#                    arm64 cross root's CPython 3.11 (ci/qemu-python; its /site holds numpy,
#                    ml_dtypes and safetensors for aarch64).
# On an aarch64 host the roles swap (x86-64 under qemu-x86_64). Usage: [--keep] (keep the
# temporary directory). Bazel builds nothing when the wheels are up to date (after the test legs).
# Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
keep=0
for a in "$@"; do
  case "$a" in --keep) keep=1 ;; *) echo "unknown option $a" >&2; exit 2 ;; esac
done
host=$(uname -m)
cross=$([[ $host == x86_64 ]] && echo aarch64 || echo x86_64)
work=$(mktemp -d /tmp/cpukern-wheels.XXXXXX)
[[ $keep -eq 1 ]] || trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { echo "PASS: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }

# The wheel a configuration builds: Bazel prints its path after "up-to-date:".
wheel_of() {  # wheel_of [bazel flags...]
  local out name bin
  out=$(./bazelw build "$@" //python:wheel 2>&1) || { echo "$out" >&2; return 1; }
  name=$(grep -oE '\S+\.whl' <<<"$out" | tail -n 1) || return 1
  # The real output directory (bazel-bin follows whichever configuration built last).
  bin=$(./bazelw info "$@" bazel-bin 2>/dev/null) || return 1
  echo "$bin/python/$(basename "$name")"
}

cat >"$work/smoke.py" <<'PY'
import os, sys, tempfile
import numpy as np
import cpukern
from cpukern import ternary
assert os.path.dirname(cpukern.__file__).startswith(sys.argv[1]), (cpukern.__file__, sys.argv[1])
rng = np.random.default_rng(0)
w = rng.integers(-1, 2, size=(64, 256)).astype(np.int8)
x = rng.standard_normal(256).astype(np.float32)
weights = ternary.prepare(ternary.pack(w), 256, scale=np.float32(0.5))
y = ternary.gemv(weights, x)
ref = 0.5 * (w.astype(np.float64) @ x.astype(np.float64))
assert np.allclose(y, ref, rtol=1e-5, atol=1e-4), np.abs(y - ref).max()
packed = ternary.pack(w)
with tempfile.TemporaryDirectory() as d:  # ternary.save needs safetensors: the [io] extra
    path = os.path.join(d, "w.safetensors")
    ternary.save(path, {"w": packed}, k={"w": 256})
    back = ternary.load(path)
    assert np.array_equal(np.asarray(back["w"]), packed)
    del back
import safetensors
print("cpukern", cpukern.__version__, cpukern.cpu_info()["arch"], "gemv ok, safetensors", safetensors.__version__)
PY

# --- host wheel: fresh venv, pip install WHEEL[io] -----------------------------------------
if whl=$(wheel_of) && [[ -n $whl ]]; then
  echo "host wheel: $whl"
  python=$(command -v python3.11 || command -v python3)
  if "$python" -m venv "$work/venv" &&
     "$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$whl[io]" &&
     (cd "$work" && "$work/venv/bin/python" smoke.py "$work/venv"); then
    ok "host $host wheel installs into a fresh venv with [io] and runs"
  else
    bad "host $host wheel in a fresh venv"
  fi
else
  bad "bazel build //python:wheel"
fi

# --- cross wheel: pip install --target for the other platform, run under qemu ----------------
if whl=$(wheel_of --config="$cross") && [[ -n $whl ]]; then
  echo "cross wheel: $whl"
  plat=$(basename "$whl" .whl | cut -d- -f5 | tr . '\n' | tail -n 1)
  if "$work/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
       --target "$work/cross-site" --platform "$plat" --python-version 3.11 --implementation cp \
       --only-binary=:all: "$whl" &&
     (cd "$work" && "$repo/ci/qemu-python" --arch "$cross" --pythonpath "$work/cross-site" \
        -- "$work/smoke.py" "$work/cross-site"); then
    ok "cross $cross wheel installs for $plat and runs under qemu"
  else
    bad "cross $cross wheel under qemu"
  fi
else
  bad "bazel build --config=$cross //python:wheel"
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
