#!/bin/sh
# ./bazelw run //benchmarks/model [-- args]: the model table over the checkout's sources,
# with the calibration on x86 hosts unless --no-calibrate is given.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
r="$here"
for d in "${RUNFILES_DIR:-$0.runfiles}"/*/benchmarks/model; do
  [ -f "$d/model.py" ] && r="$d" && break
done
cal=""
case " $* " in *" --no-calibrate "*) ;; *)
  [ "$(uname -m)" = x86_64 ] && [ -x "$r/calibrate" ] && cal="--calibrate=$r/calibrate" ;;
esac
args=""
for a in "$@"; do [ "$a" = --no-calibrate ] || args="$args $a"; done
# shellcheck disable=SC2086
exec python3 "$r/model.py" $cal $args
