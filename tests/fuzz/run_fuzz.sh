#!/usr/bin/env bash
# Builds the libFuzzer targets with clang directly (not through Bazel) and runs each for a fixed
# time, starting from its committed corpus.
#
#   tests/fuzz/run_fuzz.sh [SECONDS] [TARGET...]     # default: 30 s, every target
#   tests/fuzz/run_fuzz.sh 30 ternary_unpack
#
# Needs clang and its runtimes (Debian: apt-get install -y clang libclang-rt-14-dev).
# Targets: tests/fuzz/<name>_fuzz.cc with seeds in tests/fuzz/corpus/<name>/, and the library
# sources listed in sources_<name> below (add a function for a new target, e.g. a weight-file
# loader). Findings (crash-*, leak-*, timeout-*) go to $FUZZ_OUT (default: a temporary
# directory), new corpus entries to a scratch copy of the corpus (the committed one stays small).
# Exit status: 0 when every target ran its time without a finding.
set -euo pipefail

seconds="${1:-30}"
shift || true
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${FUZZ_OUT:-$(mktemp -d -t cpukern-fuzz.XXXXXX)}"
CXX="${CXX_FUZZ:-clang++}"
mkdir -p "$out"

if ! command -v "$CXX" >/dev/null; then
  echo "run_fuzz.sh: $CXX not found (apt-get install -y clang libclang-rt-14-dev)" >&2
  exit 2
fi

# Per-ISA flags of the micro-kernel files, by their __<isa> suffix (toolchains/defs.bzl).
isa_flags() {
  case "$1" in
    scalar) echo "" ;;
    avx2 | avx2_fma) echo "-mavx2 -mfma" ;;
    avx_vnni) echo "-mavx2 -mfma -mavxvnni" ;;
    avx2_bmi2) echo "-mavx2 -mfma -mbmi2" ;;
    avx512) echo "-mavx512f -mavx512bw -mavx512vl -mfma" ;;
    avx512_bmi2) echo "-mavx512f -mavx512bw -mavx512vl -mbmi2 -mfma" ;;
    avx512_vnni) echo "-mavx512f -mavx512bw -mavx512vl -mfma -mavx512vnni" ;;
    avx512_bf16) echo "-mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mavx512vnni -mfma" ;;
    amx_bf16 | amx_int8) echo "-mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mavx512vnni -mfma -mamx-tile -mamx-bf16 -mamx-int8" ;;
    neon | neon_fma | neon_generic) echo "" ;;
    neon_dotprod) echo "-march=armv8.2-a+dotprod" ;;
    neon_bf16 | neon_bfmmla) echo "-march=armv8.2-a+bf16+i8mm" ;;
    neon_i8mm) echo "-march=armv8.2-a+i8mm+dotprod" ;;
    *) echo "UNKNOWN" ;;
  esac
}

arch_isas() {  # the ukernel suffixes this machine compiles
  case "$(uname -m)" in
    x86_64) echo "scalar avx2 avx2_fma avx2_bmi2 avx_vnni avx512 avx512_bmi2 avx512_vnni avx512_bf16 amx_bf16 amx_int8" ;;
    aarch64) echo "scalar neon neon_fma neon_generic neon_dotprod neon_bf16 neon_bfmmla neon_i8mm" ;;
  esac
}

# Library sources of each target: "file" or "file|extra flags".
sources_common() {
  echo "kernels/common/cpu_features.cc"
  echo "kernels/common/packed_weights.cc"
  echo "kernels/common/prepared_blob.cc"
  echo "kernels/common/registry.cc"
  echo "kernels/common/thread_pool.cc"
  echo "kernels/common/weight_memory.cc"
}

# An op's files: its driver-level sources, then its micro-kernels with their ISA flags
# (files without an __isa suffix are portable).
sources_op() {
  local op="$1" f isa flags
  for f in "$root"/kernels/"$op"/*.cc; do  # driver, registry, serialize, ...: every one
    echo "${f#"$root"/}"
  done
  for f in "$root"/kernels/"$op"/ukernels/*.cc; do
    if [[ "$f" != *__* ]]; then
      echo "${f#"$root"/}"
      continue
    fi
    isa="${f##*__}"
    isa="${isa%.cc}"
    [[ " $(arch_isas) " == *" $isa "* ]] || continue
    flags="$(isa_flags "$isa")"
    if [[ "$flags" == UNKNOWN ]]; then
      echo "run_fuzz.sh: no flags for ISA '$isa' of $f; add it to isa_flags" >&2
      exit 2
    fi
    echo "${f#$root/}|$flags"
  done
}

sources_ternary_unpack() {
  sources_common
  sources_op ternary
}

sources_prepared_blob() {
  sources_common
  sources_op ternary
  sources_op widely_linear
  sources_op moe
}

build() {  # build NAME -> $out/NAME (objects shared between targets: same flags)
  local name="$1" objdir="$out/obj" objs=() line src flags obj
  local common=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
    -fno-sanitize-recover=undefined -I"$root" -DCPUKERN_FUZZ=1)
  mkdir -p "$objdir"
  local srcs
  srcs="$("sources_$name")"
  while IFS= read -r line; do
    [[ -z "$line" ]] && continue
    src="${line%%|*}"
    flags=""
    [[ "$line" == *"|"* ]] && flags="${line#*|}"
    obj="$objdir/$(echo "$src" | tr '/' '_').o"
    objs+=("$obj")
    [[ -f "$obj" ]] && continue
    # shellcheck disable=SC2086
    "$CXX" "${common[@]}" $flags -c "$root/$src" -o "$obj" &
  done <<<"$srcs"
  wait
  "$CXX" "${common[@]}" -fsanitize=fuzzer -c "$here/${name}_fuzz.cc" -o "$objdir/${name}_fuzz.o"
  "$CXX" -fsanitize=fuzzer,address,undefined "$objdir/${name}_fuzz.o" "${objs[@]}" -lpthread \
    -o "$out/$name"
}

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$here"/*_fuzz.cc; do
    f="$(basename "$f")"
    targets+=("${f%_fuzz.cc}")
  done
fi

status=0
for name in "${targets[@]}"; do
  echo "=== $name: build" >&2
  start=$(date +%s)
  build "$name"
  echo "=== $name: built in $(($(date +%s) - start)) s; fuzzing for $seconds s" >&2
  work="$out/corpus-$name"
  mkdir -p "$work"
  if ! ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$out/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$out/" "$work" "$here/corpus/$name"; then
    echo "=== $name: FINDING (artifacts in $out)" >&2
    status=1
  else
    echo "=== $name: no finding in $seconds s ($(ls "$work" | wc -l) corpus entries in $work)" >&2
  fi
done
exit $status
