#!/usr/bin/env bash
# ci/setup_arm64_root.sh DEST
#
# Builds an arm64 (aarch64) Debian bookworm userland at DEST, for running the
# project's Python tests under `qemu-aarch64 -L DEST` (see ci/qemu-python) and
# for cross-compiling the Python extension against arm64 CPython 3.11 headers.
#
# What ends up in DEST:
#   DEST/usr/bin/python3.11, stdlib, libpython3.11.so, glibc + loader,
#   libstdc++6, libgcc-s1 and the full dependency closure (dpkg -x, nothing
#   is installed into the host system);
#   DEST/usr/include/python3.11/                      (Python.h ...)
#   DEST/usr/include/aarch64-linux-gnu/python3.11/    (pyconfig.h)
#   DEST/site/    manylinux aarch64 cp311 wheels: numpy, ml_dtypes, absl-py,
#                 pytest, hypothesis (+ the rest of requirements.txt)
#   DEST/.complete  content hash of this script + requirements + sources.
#
# Idempotent: when DEST/.complete matches the current hash this is a fast
# no-op. Otherwise the root is rebuilt in DEST.new and swapped in atomically.
# Downloaded .debs and apt lists are kept in DEST.work (reused on rebuilds).
#
# apt runs with a fully private state (own lists, cache, empty dpkg status,
# APT::Architecture=arm64), so the host needs neither `dpkg --add-architecture`
# nor root-owned apt state; it does need apt-get, dpkg-deb and a Debian
# keyring. Package sources are taken from the host's bookworm entries in
# /etc/apt/sources.list{,.d/}; set CPUKERN_DEBIAN_MIRROR (and optionally
# CPUKERN_DEBIAN_SECURITY_MIRROR) to use explicit mirror URLs instead, e.g.
# on a non-Debian host.
#
# Environment:
#   CPUKERN_REQUIREMENTS   requirements file (default: <repo>/requirements.txt)
#   PYTHON                 host python with pip (default: python3)
set -euo pipefail

die() { echo "setup_arm64_root: ERROR: $*" >&2; exit 1; }
step() { STEP="$*"; echo "==> [$(date +%H:%M:%S)] $*"; }
STEP="start"
trap 'rc=$?; [ $rc -eq 0 ] || echo "setup_arm64_root: FAILED in step: ${STEP} (exit $rc)" >&2' EXIT

[ $# -eq 1 ] || die "usage: $0 DEST"
DEST=$1
case "$DEST" in /*) ;; *) DEST="$PWD/$DEST" ;; esac
DEST=${DEST%/}
[ "$DEST" != "" ] && [ "$DEST" != "/" ] || die "refusing DEST=/"

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
REQS=${CPUKERN_REQUIREMENTS:-$REPO_ROOT/requirements.txt}
PYTHON=${PYTHON:-python3}

# Debian packages (arm64). The closure is resolved by apt.
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
HASH=$( { cat "${BASH_SOURCE[0]}"; echo "--reqs"; echo "$PIP_SPECS";
          echo "--sources"; echo "$SOURCES"; } | sha256sum | cut -d' ' -f1)
if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$HASH" ]; then
  echo "setup_arm64_root: $DEST is up to date ($HASH)"
  trap - EXIT
  exit 0
fi

# Serialize concurrent builders of the same DEST, then re-check.
mkdir -p "$(dirname "$DEST")"
if command -v flock >/dev/null; then
  exec 9>"$DEST.lock"
  flock 9
  if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$HASH" ]; then
    echo "setup_arm64_root: $DEST was built concurrently; up to date"
    trap - EXIT
    exit 0
  fi
fi

T0=$(date +%s)
step "checking host tools"
for t in apt-get dpkg-deb sha256sum "$PYTHON"; do
  command -v "$t" >/dev/null || die "missing host tool: $t"
done
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON has no pip (apt-get install python3-pip, or set PYTHON=/path/to/python-with-pip)"

WORK="$DEST.work"
NEW="$DEST.new"
mkdir -p "$WORK"/{state/lists/partial,cache/archives/partial,etc/sources.list.d,etc/preferences.d,etc/apt.conf.d}
: >"$WORK/state/status"
: >"$WORK/etc/sources.list"
echo "$SOURCES" >"$WORK/etc/sources.list.d/cpukern-arm64.list"

APT=(apt-get -q
  -o "APT::Architecture=arm64"
  -o "APT::Architectures=arm64"
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

step "apt-get update (private arm64 state in $WORK)"
"${APT[@]}" update --error-on=any >"$WORK/apt-update.log" 2>&1 ||
  { tail -n 30 "$WORK/apt-update.log" >&2; die "apt-get update failed (log: $WORK/apt-update.log)"; }

step "resolving + downloading arm64 closure: ${DEB_PACKAGES[*]}"
# Start from a clean archive dir listing so we unpack exactly this closure.
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
  deb=$(ls "$WORK/cache/archives/${pkg}_${ver_file}_"*.deb 2>/dev/null | head -n1 || true)
  [ -n "$deb" ] || die "downloaded .deb not found for $pkg $ver"
  dpkg-deb -x "$deb" "$NEW" || die "dpkg-deb -x $deb failed"
  echo "$pkg $ver" >>"$NEW/.packages"
done

step "post-unpack fixups"
[ -x "$NEW/usr/bin/python3.11" ] || die "usr/bin/python3.11 missing after unpack"
[ -f "$NEW/usr/include/python3.11/Python.h" ] || die "Python.h missing after unpack"
[ -f "$NEW/usr/include/aarch64-linux-gnu/python3.11/pyconfig.h" ] || die "pyconfig.h missing after unpack"
ln -sfn python3.11 "$NEW/usr/bin/python3"
# Bookworm packages are not usr-merged; the loader lives in /lib. Make sure
# the canonical /lib/ld-linux-aarch64.so.1 exists (it is a symlink in libc6).
[ -e "$NEW/lib/ld-linux-aarch64.so.1" ] || die "arm64 dynamic loader missing"
# A guest-format (empty) ld.so.cache, so the guest loader never reads the
# host's x86-64 /etc/ld.so.cache through qemu's -L fallback.
mkdir -p "$NEW/etc"
: >"$NEW/etc/ld.so.cache"
# Debian's multiarch wrapper /usr/include/python3.11/pyconfig.h does
# `#include <aarch64-linux-gnu/python3.11/pyconfig.h>`, which only resolves if
# <root>/usr/include itself is on the include path (it is not for a cross
# compiler, and adding it would shadow the cross toolchain's libc headers).
# Python.h includes "pyconfig.h" from its own directory first, so an extra
# -I<root>/usr/include/aarch64-linux-gnu/python3.11 does not help either.
# Replace the wrapper with an aarch64-only one that uses a path relative to
# itself; then -I<root>/usr/include/python3.11 alone is enough.
PYCFG="$NEW/usr/include/python3.11/pyconfig.h"
mv "$PYCFG" "$PYCFG.debian-multiarch"
cat >"$PYCFG" <<'HEOF'
/* cpukern arm64 root: aarch64-only replacement of Debian's multiarch wrapper
   (original: pyconfig.h.debian-multiarch). See ci/setup_arm64_root.sh. */
#if !defined(__aarch64__) || !defined(__linux__)
# error "this pyconfig.h is for aarch64-linux-gnu (cpukern arm64 root)"
#endif
#include "../aarch64-linux-gnu/python3.11/pyconfig.h"
HEOF
# Static libpython (~23 MB) is not needed to build extension modules.
rm -f "$NEW"/usr/lib/python3.11/config-3.11-aarch64-linux-gnu/libpython3.11*.a \
      "$NEW"/usr/lib/aarch64-linux-gnu/libpython3.11*.a
# Drop docs/man pages: not needed for running tests.
rm -rf "$NEW/usr/share/doc" "$NEW/usr/share/man" "$NEW/usr/share/lintian" "$NEW/usr/share/locale"

step "pip: installing aarch64 cp311 wheels into $NEW/site"
echo "$PIP_SPECS" | sed 's/^/    /'
"$PYTHON" -m pip install --quiet --disable-pip-version-check \
  --no-user --no-compile --root-user-action=ignore --target "$NEW/site" \
  --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 \
  --platform manylinux_2_28_aarch64 \
  --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
  --cache-dir "$WORK/pip-cache" \
  $PIP_SPECS 2> >(grep -v "^WARNING: Location 'file:.* is ignored" >&2) ||
  die "pip install of guest wheels failed"

step "byte-compiling stdlib + site with the guest interpreter, smoke test"
# IMPORTANT: qemu-user's -L only redirects a path into the root when that path
# already exists there; anything *created* (e.g. a new __pycache__/x.pyc) goes
# to the same path on the HOST. An arm64 python writing bytecode for
# /usr/lib/python3.11 would therefore write into the host's /usr/lib/python3.11.
# So: never let the guest write bytecode implicitly (PYTHONDONTWRITEBYTECODE=1,
# ci/qemu-python does the same), and precompile here with explicit host-side
# target paths ("$NEW/..." does not exist inside the root, so qemu passes it
# through unchanged).
if command -v qemu-aarch64 >/dev/null; then
  QEMU=(qemu-aarch64 -L "$NEW" -0 /usr/bin/python3.11 -U PYTHONPATH -U PYTHONHOME
        -U PYTHONSTARTUP -E PYTHONNOUSERSITE=1 -E PYTHONDONTWRITEBYTECODE=1
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
  "${QEMU[@]}" -c 'import sys, platform, ssl, ctypes, zlib, sqlite3; assert platform.machine() == "aarch64", platform.machine(); print("    guest:", platform.machine(), sys.version.split()[0])' ||
    die "guest python smoke test failed"
else
  echo "    qemu-aarch64 not found; skipping byte-compilation and smoke test"
fi

step "activating $DEST"
echo "$HASH" >"$NEW/.complete"
if [ -e "$DEST" ]; then
  rm -rf "$DEST.old"
  mv "$DEST" "$DEST.old"
fi
mv "$NEW" "$DEST"
rm -rf "$DEST.old"
echo "setup_arm64_root: done in $(( $(date +%s) - T0 ))s; $(du -sh "$DEST" | cut -f1) at $DEST"
