#!/usr/bin/env bash
# ci/setup_cross_root.sh ARCH DEST      (ARCH: arm64 | amd64)
#
# Builds a Debian bookworm userland of another architecture at DEST, for
# running the project's Python tests under `qemu-<machine> -L DEST` (see
# ci/qemu-python) and for cross-compiling the Python extension against that
# architecture's CPython 3.11 headers. bazelw calls it through the wrappers
# ci/setup_arm64_root.sh (x86-64 hosts) and ci/setup_amd64_root.sh (ARM hosts).
#
#   ARCH   Debian arch  triple               qemu           wheels
#   arm64  arm64        aarch64-linux-gnu    qemu-aarch64   manylinux *_aarch64 cp311
#   amd64  amd64        x86_64-linux-gnu     qemu-x86_64    manylinux *_x86_64 cp311
#
# What ends up in DEST (TRIPLE from the table):
#   DEST/usr/bin/python3.11, stdlib, libpython3.11.so, glibc + loader,
#   libstdc++6, libgcc-s1, libbenchmark and the full dependency closure
#   (dpkg -x, nothing is installed into the host system);
#   DEST/usr/include/python3.11/                (Python.h ...; pyconfig.h wrapper, see below)
#   DEST/usr/include/TRIPLE/python3.11/         (pyconfig.h)
#   DEST/usr/lib/TRIPLE/libbenchmark.so         (google benchmark, for cross-built benchmarks)
#   DEST/site/    manylinux cp311 wheels of requirements.txt (numpy, ml_dtypes,
#                 absl-py, pytest, hypothesis, ...), precompiled
#   DEST/.arch    ARCH (ci/qemu-python reads the guest architecture from the root)
#   DEST/.complete  content hash of this script + ARCH + requirements + sources.
#
# Idempotent: when DEST/.complete matches the current hash this is a fast
# no-op. Otherwise the root is rebuilt in DEST.new and swapped in atomically.
# Downloaded .debs, apt lists and the pip cache are kept in DEST.work (reused
# on rebuilds).
#
# apt runs with a fully private state (own lists, cache, empty dpkg status,
# APT::Architecture=ARCH), so the host needs neither `dpkg --add-architecture`
# nor root-owned apt state; it does need apt-get, dpkg-deb and a Debian
# keyring. Package sources are taken from the host's bookworm entries in
# /etc/apt/sources.list{,.d/}; set CPUKERN_DEBIAN_MIRROR (and optionally
# CPUKERN_DEBIAN_SECURITY_MIRROR) to use explicit mirror URLs instead, e.g.
# on a non-Debian host. The mirror must carry ARCH (deb.debian.org does).
#
# Environment:
#   CPUKERN_REQUIREMENTS   requirements file (default: <repo>/requirements.txt)
#   PYTHON                 host python with pip (default: python3 if it has pip, else a
#                          private venv in DEST.work made with `python3 -m venv`)
set -euo pipefail

ME=setup_cross_root
die() { echo "$ME: ERROR: $*" >&2; exit 1; }
step() { STEP="$*"; echo "==> [$(date +%H:%M:%S)] $*"; }
STEP="start"
trap 'rc=$?; [ $rc -eq 0 ] || echo "$ME: FAILED in step: ${STEP} (exit $rc)" >&2' EXIT

[ $# -eq 2 ] || die "usage: $0 arm64|amd64 DEST"
ARCH=$1
DEST=$2
case "$ARCH" in
  arm64|aarch64)
    ARCH=arm64 MACHINE=aarch64 TRIPLE=aarch64-linux-gnu QEMU_BIN=qemu-aarch64
    LOADER=/lib/ld-linux-aarch64.so.1
    # Debian's multiarch pyconfig.h wrapper tests the same macros for this triple.
    CPP_GUARD='defined(__aarch64__) && defined(__linux__)' ;;
  amd64|x86_64|x86-64)
    ARCH=amd64 MACHINE=x86_64 TRIPLE=x86_64-linux-gnu QEMU_BIN=qemu-x86_64
    LOADER=/lib64/ld-linux-x86-64.so.2
    # __LP64__ tells x86_64 from x32 (__ILP32__), which defines __x86_64__ too.
    CPP_GUARD='defined(__x86_64__) && defined(__LP64__) && defined(__linux__)' ;;
  *) die "unknown ARCH '$ARCH' (arm64 or amd64)" ;;
esac
ME="setup_cross_root($ARCH)"
case "$DEST" in /*) ;; *) DEST="$PWD/$DEST" ;; esac
DEST=${DEST%/}
[ "$DEST" != "" ] && [ "$DEST" != "/" ] || die "refusing DEST=/"

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
REQS=${CPUKERN_REQUIREMENTS:-$REPO_ROOT/requirements.txt}
PYTHON=${PYTHON:-}

# Debian packages (ARCH). The closure is resolved by apt.
DEB_PACKAGES=(
  python3.11 libpython3.11 libpython3.11-dev
  libbenchmark-dev  # google benchmark for the cross-built benchmark binaries
  libc6 libstdc++6 libgcc-s1 zlib1g libffi8 libexpat1 libssl3 ca-certificates
)
# Guest Python packages: defaults, overridden by pins in requirements.txt.
declare -A DEFAULT_PINS=(
  [numpy]=2.2.6 [ml_dtypes]=0.5.4 [absl-py]=2.3.1 [pytest]=8.4.2
  [hypothesis]=6.135.0
)
PIP_PLATFORMS=(manylinux2014_$MACHINE manylinux_2_17_$MACHINE manylinux_2_28_$MACHINE)

# ---------------------------------------------------------------- sources
host_sources() {
  # Print one-line apt sources for the host's bookworm entries.
  if [ -n "${CPUKERN_DEBIAN_MIRROR:-}" ]; then
    echo "deb ${CPUKERN_DEBIAN_MIRROR} bookworm main"
    echo "deb ${CPUKERN_DEBIAN_MIRROR} bookworm-updates main"
    [ -z "${CPUKERN_DEBIAN_SECURITY_MIRROR:-}" ] ||
      echo "deb ${CPUKERN_DEBIAN_SECURITY_MIRROR} bookworm-security main"
    return
  fi
  local f
  # deb822 (*.sources)
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && uris != "" && suites ~ /bookworm/) {
          n = split(uris, U, " "); m = split(suites, S, " ")
          for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
            printf "deb%s %s %s %s\n", (signed != "" ? " [signed-by=" signed "]" : ""), U[i], S[j], comps
        }
        types = uris = suites = comps = signed = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
        if (key == "types") types = $0; else if (key == "uris") uris = $0
        else if (key == "suites") suites = $0; else if (key == "components") comps = $0
        else if (key == "signed-by") signed = $0 }
      END { flush() }' "$f"
  done
  # one-line format; drop [arch=...] style options, keep signed-by
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    grep -E '^[[:space:]]*deb[[:space:]]' "$f" | grep bookworm |
      sed -E 's/\[[^]]*\]//; s/^[[:space:]]*deb[[:space:]]+/deb /' || true
  done
}

SOURCES=$(host_sources | sort -u)
[ -n "$SOURCES" ] || die "no Debian bookworm apt sources found on this host; set CPUKERN_DEBIAN_MIRROR"

# ------------------------------------------------------------ pip pins
pip_specs() {
  local name have=""
  if [ -f "$REQS" ]; then
    # Everything pinned in requirements.txt (comments/blank lines dropped).
    sed -E 's/#.*//; s/[[:space:]]+//g' "$REQS" | grep -v '^$' || true
    have=$(sed -E 's/#.*//; s/[[:space:]]+//g; s/[<>=!~;\[].*//' "$REQS" |
      tr 'A-Z_' 'a-z-' | grep -v '^$' || true)
  fi
  for name in "${!DEFAULT_PINS[@]}"; do
    local norm
    norm=$(echo "$name" | tr 'A-Z_' 'a-z-')
    grep -qx "$norm" <<<"$have" || echo "${name}==${DEFAULT_PINS[$name]}"
  done
}
PIP_SPECS=$(pip_specs | sort)

# ---------------------------------------------------------------- hash
HASH=$( { cat "${BASH_SOURCE[0]}"; echo "--arch $ARCH"; echo "--reqs"; echo "$PIP_SPECS";
          echo "--sources"; echo "$SOURCES"; } | sha256sum | cut -d' ' -f1)
if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$HASH" ]; then
  echo "$ME: $DEST is up to date ($HASH)"
  trap - EXIT
  exit 0
fi

# Serialize concurrent builders of the same DEST, then re-check.
mkdir -p "$(dirname "$DEST")"
if command -v flock >/dev/null; then
  exec 9>"$DEST.lock"
  flock 9
  if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$HASH" ]; then
    echo "$ME: $DEST was built concurrently; up to date"
    trap - EXIT
    exit 0
  fi
fi

T0=$(date +%s)
step "checking host tools"
for t in apt-get dpkg-deb sha256sum realpath "${PYTHON:-python3}"; do
  command -v "$t" >/dev/null || die "missing host tool: $t"
done
WORK="$DEST.work"
if [ -z "$PYTHON" ]; then
  # pip only downloads wheels here. A bare Debian (e.g. the CI container) has
  # python3-venv (bazelw installs it) but not python3-pip: use a private venv.
  PYTHON=python3
  if ! python3 -m pip --version >/dev/null 2>&1; then
    [ -x "$WORK/pip-venv/bin/python" ] ||
      python3 -m venv "$WORK/pip-venv" ||
      die "python3 has no pip and python3 -m venv failed (apt-get install python3-venv or python3-pip, or set PYTHON=/path/to/python-with-pip)"
    PYTHON="$WORK/pip-venv/bin/python"
  fi
fi
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON has no pip (apt-get install python3-pip, or set PYTHON=/path/to/python-with-pip)"

NEW="$DEST.new"
mkdir -p "$WORK"/{state/lists/partial,cache/archives/partial,etc/sources.list.d,etc/preferences.d,etc/apt.conf.d}
: >"$WORK/state/status"
: >"$WORK/etc/sources.list"
rm -f "$WORK"/etc/sources.list.d/*.list
echo "$SOURCES" >"$WORK/etc/sources.list.d/cpukern-$ARCH.list"

APT=(apt-get -q
  -o "APT::Architecture=$ARCH"
  -o "APT::Architectures=$ARCH"
  -o "Dir::State=$WORK/state"
  -o "Dir::State::status=$WORK/state/status"
  -o "Dir::Cache=$WORK/cache"
  -o "Dir::Etc::SourceList=$WORK/etc/sources.list"
  -o "Dir::Etc::SourceParts=$WORK/etc/sources.list.d"
  -o "Dir::Etc::Preferences=$WORK/etc/preferences"
  -o "Dir::Etc::PreferencesParts=$WORK/etc/preferences.d"
  -o "Dir::Etc::Parts=$WORK/etc/apt.conf.d"
  -o "APT::Sandbox::User=root"
  -o "APT::Install-Recommends=false"
  -o "APT::Install-Suggests=false"
  -o "Acquire::Languages=none"
  -o "Acquire::Retries=3"
)

step "apt-get update (private $ARCH state in $WORK)"
"${APT[@]}" update --error-on=any >"$WORK/apt-update.log" 2>&1 ||
  { tail -n 30 "$WORK/apt-update.log" >&2; die "apt-get update failed (log: $WORK/apt-update.log)"; }

step "resolving + downloading $ARCH closure: ${DEB_PACKAGES[*]}"
"${APT[@]}" install --download-only -y "${DEB_PACKAGES[@]}" >"$WORK/apt-install.log" 2>&1 ||
  { tail -n 40 "$WORK/apt-install.log" >&2; die "apt-get install --download-only failed (log: $WORK/apt-install.log)"; }
# The exact closure apt chose (names + versions), so stale cached .debs from
# earlier runs are not unpacked.
mapfile -t CLOSURE < <("${APT[@]}" install -s -y "${DEB_PACKAGES[@]}" 2>/dev/null |
  awk '/^Inst /{ gsub(/[()]/,"",$3); print $2 " " $3 }')
[ ${#CLOSURE[@]} -gt 0 ] || die "empty package closure"
echo "    ${#CLOSURE[@]} packages"

step "unpacking .debs into $NEW"
rm -rf "$NEW"
mkdir -p "$NEW"
for entry in "${CLOSURE[@]}"; do
  pkg=${entry%% *}; ver=${entry#* }; pkg=${pkg%%:*}
  ver_file=${ver//:/%3a}
  # ARCH or all (ca-certificates, debconf, ... are Architecture: all).
  deb=$(ls "$WORK/cache/archives/${pkg}_${ver_file}_${ARCH}.deb" \
           "$WORK/cache/archives/${pkg}_${ver_file}_all.deb" 2>/dev/null | head -n1 || true)
  [ -n "$deb" ] || die "downloaded .deb not found for $pkg $ver ($ARCH)"
  dpkg-deb -x "$deb" "$NEW" || die "dpkg-deb -x $deb failed"
  echo "$pkg $ver" >>"$NEW/.packages"
done

step "post-unpack fixups"
[ -x "$NEW/usr/bin/python3.11" ] || die "usr/bin/python3.11 missing after unpack"
[ -f "$NEW/usr/include/python3.11/Python.h" ] || die "Python.h missing after unpack"
[ -f "$NEW/usr/include/$TRIPLE/python3.11/pyconfig.h" ] || die "pyconfig.h missing after unpack"
ln -sfn python3.11 "$NEW/usr/bin/python3"
# Absolute symlinks (e.g. amd64's /lib64/ld-linux-x86-64.so.2 ->
# /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2, usr/lib/python3.11/sitecustomize.py
# -> /etc/python3.11/...) would be followed on the HOST when qemu -L opens them
# (and by the host compiler for usr/lib/TRIPLE/lib*.so): the guest would load the
# host's loader, or nothing on a host of the other architecture. Make them
# relative, so the root is self-contained.
n_abs=0
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  ln -sfn "$(realpath -m -s --relative-to="$(dirname "$link")" "$NEW$target")" "$link"
  n_abs=$((n_abs + 1))
done < <(find "$NEW" -type l -lname '/*' -print0)
echo "    $n_abs absolute symlinks made root-relative"
# ca-certificates' postinst (update-ca-certificates) never ran: build the
# bundle that usr/lib/ssl/cert.pem points at, as it would have.
if [ ! -e "$NEW/etc/ssl/certs/ca-certificates.crt" ] && [ -d "$NEW/usr/share/ca-certificates" ]; then
  mkdir -p "$NEW/etc/ssl/certs"
  find "$NEW/usr/share/ca-certificates" -name '*.crt' -print0 | sort -z |
    xargs -0 -r cat >"$NEW/etc/ssl/certs/ca-certificates.crt"
fi
# Bookworm packages are not usr-merged; the loader lives in /lib (arm64) or
# /lib64 (amd64, a symlink into /lib/x86_64-linux-gnu).
[ -e "$NEW$LOADER" ] || die "$ARCH dynamic loader $LOADER missing"
# A guest-format (empty) ld.so.cache, so the guest loader never reads the
# host's /etc/ld.so.cache through qemu's -L fallback.
mkdir -p "$NEW/etc"
: >"$NEW/etc/ld.so.cache"
# Debian's multiarch wrapper /usr/include/python3.11/pyconfig.h does
# `#include <TRIPLE/python3.11/pyconfig.h>`, which only resolves if
# <root>/usr/include itself is on the include path (it is not for a cross
# compiler, and adding it would shadow the cross toolchain's libc headers).
# Python.h includes "pyconfig.h" from its own directory first, so an extra
# -I<root>/usr/include/TRIPLE/python3.11 does not help either. Replace the
# wrapper with a TRIPLE-only one that uses a path relative to itself; then
# -I<root>/usr/include/python3.11 alone is enough.
PYCFG="$NEW/usr/include/python3.11/pyconfig.h"
mv "$PYCFG" "$PYCFG.debian-multiarch"
cat >"$PYCFG" <<HEOF
/* cpukern $ARCH root: $TRIPLE-only replacement of Debian's multiarch wrapper
   (original: pyconfig.h.debian-multiarch). See ci/setup_cross_root.sh. */
#if !($CPP_GUARD)
# error "this pyconfig.h is for $TRIPLE (cpukern $ARCH root)"
#endif
#include "../$TRIPLE/python3.11/pyconfig.h"
HEOF
# Static libpython (~23 MB) is not needed to build extension modules.
rm -f "$NEW"/usr/lib/python3.11/config-3.11-$TRIPLE/libpython3.11*.a \
      "$NEW"/usr/lib/$TRIPLE/libpython3.11*.a
# Drop docs/man pages: not needed for running tests.
rm -rf "$NEW/usr/share/doc" "$NEW/usr/share/man" "$NEW/usr/share/lintian" "$NEW/usr/share/locale"
echo "$ARCH" >"$NEW/.arch"

step "pip: installing $MACHINE cp311 wheels into $NEW/site"
echo "$PIP_SPECS" | sed 's/^/    /'
PLATFORM_ARGS=()
for p in "${PIP_PLATFORMS[@]}"; do PLATFORM_ARGS+=(--platform "$p"); done
# shellcheck disable=SC2086  # PIP_SPECS: one spec per word
"$PYTHON" -m pip install --quiet --disable-pip-version-check \
  --no-user --no-compile --root-user-action=ignore --target "$NEW/site" \
  "${PLATFORM_ARGS[@]}" \
  --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
  --cache-dir "$WORK/pip-cache" \
  $PIP_SPECS 2> >(grep -v "^WARNING: Location 'file:.* is ignored" >&2) ||
  die "pip install of guest wheels failed"

step "byte-compiling stdlib + site with the guest interpreter ($QEMU_BIN), smoke test"
# IMPORTANT: qemu-user's -L only redirects a path into the root when that path
# already exists there; anything *created* (e.g. a new __pycache__/x.pyc) goes
# to the same path on the HOST. A guest python writing bytecode for
# /usr/lib/python3.11 would therefore write into the host's /usr/lib/python3.11
# (the same holds for qemu-x86_64 on an x86-64 host). So: never let the guest
# write bytecode implicitly (PYTHONDONTWRITEBYTECODE=1, ci/qemu-python does the
# same), and precompile here with explicit host-side target paths ("$NEW/..."
# does not exist inside the root, so qemu passes it through unchanged).
if command -v "$QEMU_BIN" >/dev/null; then
  QEMU=("$QEMU_BIN" -cpu max -L "$NEW" -0 /usr/bin/python3.11 -U PYTHONPATH -U PYTHONHOME
        -U PYTHONSTARTUP -U LD_LIBRARY_PATH -U LD_PRELOAD
        -E PYTHONNOUSERSITE=1 -E PYTHONDONTWRITEBYTECODE=1
        "$NEW/usr/bin/python3.11")
  "${QEMU[@]}" - "$NEW" <<'PYEOF' || die "guest byte-compilation failed"
import os, sys, py_compile, importlib.util
root = sys.argv[1]
skip = {"test", "tests", "idlelib", "lib2to3", "__pycache__"}
n = errors = 0
for top in ("/usr/lib/python3.11", "/site"):
    for d, dirs, files in os.walk(root + top):
        dirs[:] = [x for x in dirs if x not in skip and not x.startswith("config-3.11")]
        for f in files:
            if not f.endswith(".py"):
                continue
            host_src = os.path.join(d, f)
            guest_src = host_src[len(root):]
            cfile = root + importlib.util.cache_from_source(guest_src)
            try:
                py_compile.compile(host_src, cfile=cfile, dfile=guest_src, doraise=True)
                n += 1
            except (py_compile.PyCompileError, SyntaxError) as e:
                errors += 1
print(f"    compiled {n} modules ({errors} skipped with errors)")
PYEOF
  "${QEMU[@]}" -c "import sys, platform, ssl, ctypes, zlib, sqlite3; assert platform.machine() == '$MACHINE', platform.machine(); assert sys.prefix == '/usr', sys.prefix; print('    guest:', platform.machine(), sys.version.split()[0])" ||
    die "guest python smoke test failed"
else
  echo "    $QEMU_BIN not found; skipping byte-compilation and smoke test"
fi

step "activating $DEST"
echo "$HASH" >"$NEW/.complete"
if [ -e "$DEST" ]; then
  rm -rf "$DEST.old"
  mv "$DEST" "$DEST.old"
fi
mv "$NEW" "$DEST"
rm -rf "$DEST.old"
echo "$ME: done in $(( $(date +%s) - T0 ))s; $(du -sh "$DEST" | cut -f1) at $DEST"
