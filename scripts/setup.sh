#!/usr/bin/env bash
# Sets up everything kino_trace needs on a Debian 12 machine, idempotently:
#   1. Debian packages (compilers, cmake, fmt, Catch2, Chromium, OTP build deps)
#   2. the toolchain sets named as arguments (default: $KINO_TRACE_TOOLCHAIN_SET, else 27),
#      each into its own prefix under /opt/kino_trace, skipped when already there:
#        27  OTP 27.3.4.1 and Elixir 1.18.3, built from Debian trixie's source tarballs
#            (skipped too when the `erl`/`elixir` on PATH are new enough)
#        29  OTP 29.1.1 built from Debian forky's `erlang` source tarball, and Elixir
#            1.20.4 extracted (dpkg-deb -x, never installed) from sid's `elixir` package
#   3. npm packages for the widget's JS build and tests (when assets/package.json exists)
#
# Usage: scripts/setup.sh [27] [29]
# Prints what it does. Afterwards, `source scripts/env.sh` (or
# `KINO_TRACE_TOOLCHAIN_SET=29 source scripts/env.sh`) puts a toolchain on PATH.
# Never installs packages of another Debian release: only a source tarball and one
# architecture-independent .deb are downloaded. forky and sid are read through a private
# apt configuration under /opt/kino_trace/apt, so the machine's own apt never sees them.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
sets=("$@")
[ "${#sets[@]}" -gt 0 ] || sets=("${KINO_TRACE_TOOLCHAIN_SET:-27}")
for s in "${sets[@]}"; do
  case "$s" in 27 | 29) ;; *) echo "setup: unknown toolchain set '$s' (27 or 29)" >&2; exit 2 ;; esac
done
# shellcheck source=env.sh
KINO_TRACE_TOOLCHAIN_SET="${sets[0]}" source "$here/env.sh"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_packages=(
  build-essential cmake pkg-config git ca-certificates xz-utils dpkg-dev
  # the native tracer is also built with clang in the tests (scripts/test-build-variants.sh)
  clang
  libfmt-dev libconcurrentqueue-dev catch2
  # OTP build
  autoconf m4 perl libncurses-dev libssl-dev zlib1g-dev
  # widget tests
  chromium chromium-driver nodejs npm
  # Debian 12's own Erlang/OTP 25, never used to build or run kino_trace: a test starts a
  # node with it to check that kino_trace refuses to trace a node older than OTP 27
  erlang-base
)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian's npm package is not needed when node already ships npm (e.g. nodesource builds)
if command -v npm >/dev/null 2>&1; then
  filtered=(); for p in "${missing[@]}"; do [[ "$p" == npm || "$p" == nodejs ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  say "Debian packages: all present"
fi

otp_ok() {
  command -v erl >/dev/null 2>&1 || return 1
  local rel
  rel="$(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().' 2>/dev/null || echo 0)"
  [ "${rel:-0}" -ge "$KINO_TRACE_MIN_OTP" ] 2>/dev/null
}

elixir_ok() {
  command -v elixir >/dev/null 2>&1 || return 1
  elixir -e 'v = Version.parse!(System.version()); if Version.match?(v, ">= 1.17.0"), do: System.halt(0), else: System.halt(1)' >/dev/null 2>&1
}

fetch_trixie_sources() {
  local dir="$KINO_TRACE_TOOLCHAIN/src"
  mkdir -p "$dir"
  if [ -f "$dir/$OTP_TARBALL" ] && [ -f "$dir/$ELIXIR_TARBALL" ]; then
    say "trixie source tarballs already in $dir"
    return
  fi
  local list=/etc/apt/sources.list.d/kino-trace-trixie-src.sources
  if [ ! -f "$list" ]; then
    # Reuse the URI and keyring of the machine's own Debian entry: no host name is written here.
    local uri keyring
    uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
    keyring="$(awk '/^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
    [ -n "$uri" ] || { echo "setup: no URIs line in /etc/apt/sources.list.d/debian.sources" >&2; exit 1; }
    say "adding a deb-src entry for trixie (source packages only) at $list"
    as_root tee "$list" >/dev/null <<SRC
Types: deb-src
URIs: $uri
Suites: trixie
Components: main
Signed-By: ${keyring:-/usr/share/keyrings/debian-archive-keyring.gpg}
SRC
  fi
  say "downloading erlang and elixir-lang source tarballs from trixie"
  as_root apt-get update -qq
  # apt-get source exits non-zero (the .dsc is missing); the tarballs are what we need.
  (cd "$dir" && apt-get source --download-only erlang/trixie elixir-lang/trixie >/dev/null 2>&1 || true)
  for f in "$OTP_TARBALL" "$ELIXIR_TARBALL"; do
    [ -f "$dir/$f" ] || { echo "setup: $f was not downloaded into $dir" >&2; exit 1; }
  done
}

build_otp() {
  local src="$KINO_TRACE_TOOLCHAIN/src"
  local work; work="$(mktemp -d)"
  say "building OTP $OTP_VERSION into $OTP_PREFIX (about 4-13 minutes on 2 cores)"
  tar -xf "$src/$OTP_TARBALL" -C "$work"
  local dir; dir="$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n1)"
  (
    cd "$dir"
    ./configure --prefix="$OTP_PREFIX" --without-wx --without-javac --without-odbc \
      --without-common_test --without-debugger --without-observer --without-et >"$work/configure.log" 2>&1 \
      || { tail -50 "$work/configure.log"; exit 1; }
    make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -80 "$work/make.log"; exit 1; }
    make install >"$work/install.log" 2>&1 || { tail -50 "$work/install.log"; exit 1; }
  )
  rm -rf "$work"
}

build_elixir() {
  local src="$KINO_TRACE_TOOLCHAIN/src"
  local work; work="$(mktemp -d)"
  say "building Elixir $ELIXIR_VERSION into $ELIXIR_PREFIX (about 2 minutes)"
  tar -xf "$src/$ELIXIR_TARBALL" -C "$work"
  local dir; dir="$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n1)"
  (
    cd "$dir"
    make -j"$(nproc)" compile >"$work/make.log" 2>&1 || { tail -80 "$work/make.log"; exit 1; }
    make PREFIX="$ELIXIR_PREFIX" install >"$work/install.log" 2>&1 || { tail -50 "$work/install.log"; exit 1; }
  )
  rm -rf "$work"
}

# The machine's own Debian URI and keyring (no host name is written in this repository).
debian_uri() { awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources; }
debian_keyring() {
  local k; k="$(awk '/^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
  echo "${k:-/usr/share/keyrings/debian-archive-keyring.gpg}"
}

# apt-get with a private configuration: its own sources list (forky's sources, sid's
# packages), lists and caches under $KINO_TRACE_TOOLCHAIN/apt. The machine's own sources,
# lists and caches are neither read nor written.
private_apt() {
  local d="$KINO_TRACE_TOOLCHAIN/apt"
  as_root apt-get -qq -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
    -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" \
    -o Dir::Cache::archives="$d/archives" -o APT::Sandbox::User=root "$@"
}
private_apt_update() {
  local d="$KINO_TRACE_TOOLCHAIN/apt" uri
  uri="$(debian_uri)"
  [ -n "$uri" ] || { echo "setup: no URIs line in /etc/apt/sources.list.d/debian.sources" >&2; exit 1; }
  as_root mkdir -p "$d/lists/partial" "$d/cache" "$d/archives/partial"
  say "private apt configuration for forky (source packages) and sid (packages) in $d"
  as_root tee "$d/sources.list" >/dev/null <<SRC
deb-src [signed-by=$(debian_keyring)] $uri forky main
deb [signed-by=$(debian_keyring)] $uri sid main
SRC
  private_apt update
}

elixir_deb() { compgen -G "$KINO_TRACE_TOOLCHAIN/src/elixir_${ELIXIR_VERSION}+dfsg-*.deb" | head -n1; }

# forky's erlang orig tarball and sid's elixir .deb into $KINO_TRACE_TOOLCHAIN/src.
fetch_forky_sid() {
  local dir="$KINO_TRACE_TOOLCHAIN/src"
  as_root mkdir -p "$dir"
  if [ -f "$dir/$OTP_TARBALL" ] && [ -n "$(elixir_deb)" ]; then
    say "forky/sid downloads already in $dir"
    return
  fi
  private_apt_update
  if [ ! -f "$dir/$OTP_TARBALL" ]; then
    say "downloading the erlang source tarball (orig only) from forky"
    (cd "$dir" && private_apt source --download-only --tar-only erlang/forky >/dev/null)
    [ -f "$dir/$OTP_TARBALL" ] || {
      echo "setup: forky's erlang is not $OTP_VERSION: $(ls "$dir" | grep '^erlang_' | tr '\n' ' ')" >&2
      exit 1
    }
  fi
  if [ -z "$(elixir_deb)" ]; then
    say "downloading sid's elixir package (extracted, never installed)"
    (cd "$dir" && private_apt download elixir/sid >/dev/null)
    [ -n "$(elixir_deb)" ] || {
      echo "setup: sid's elixir is not $ELIXIR_VERSION: $(ls "$dir" | grep '^elixir_' | tr '\n' ' ')" >&2
      exit 1
    }
  fi
}

# Elixir's files (usr/lib/elixir of the package) into $ELIXIR_PREFIX; the package's
# dependencies (Debian's OTP 29 packages) are not needed: OTP comes from $OTP_PREFIX.
extract_elixir_deb() {
  local deb work
  deb="$(elixir_deb)"
  work="$(mktemp -d)"
  say "extracting Elixir $ELIXIR_VERSION from $(basename "$deb") into $ELIXIR_PREFIX"
  dpkg-deb -x "$deb" "$work"
  [ -x "$work/usr/lib/elixir/bin/elixir" ] || { echo "setup: $deb has no usr/lib/elixir/bin/elixir" >&2; exit 1; }
  as_root rm -rf "$ELIXIR_PREFIX.partial"
  as_root mv "$work/usr/lib/elixir" "$ELIXIR_PREFIX.partial"
  as_root mv -T "$ELIXIR_PREFIX.partial" "$ELIXIR_PREFIX"
  rm -rf "$work"
}

# The OTP release in $OTP_PREFIX is exactly $OTP_VERSION.
prefix_otp_ok() {
  [ -x "$OTP_PREFIX/bin/erl" ] || return 1
  local v
  v="$(cat "$OTP_PREFIX"/lib/erlang/releases/*/OTP_VERSION 2>/dev/null | head -n1)"
  [ "$v" = "$OTP_VERSION" ]
}
prefix_elixir_ok() {
  [ -x "$ELIXIR_PREFIX/bin/elixir" ] &&
    grep -q "{vsn,\"$ELIXIR_VERSION\"}" "$ELIXIR_PREFIX/lib/elixir/ebin/elixir.app" 2>/dev/null
}

setup_27() {
  if otp_ok; then
    say "OTP: $(command -v erl) is OTP $KINO_TRACE_MIN_OTP+ — no build needed"
  else
    fetch_trixie_sources
    build_otp
    otp_ok || { echo "setup: OTP build finished but erl is not OTP $KINO_TRACE_MIN_OTP+" >&2; exit 1; }
  fi

  if elixir_ok; then
    say "Elixir: $(command -v elixir) is 1.17+ — no build needed"
  else
    fetch_trixie_sources
    build_elixir
    elixir_ok || { echo "setup: Elixir build finished but elixir is not 1.17+" >&2; exit 1; }
  fi
}

setup_29() {
  if prefix_otp_ok; then
    say "OTP $OTP_VERSION: already in $OTP_PREFIX"
  else
    fetch_forky_sid
    build_otp
    prefix_otp_ok || { echo "setup: OTP build finished but $OTP_PREFIX is not OTP $OTP_VERSION" >&2; exit 1; }
  fi
  if prefix_elixir_ok; then
    say "Elixir $ELIXIR_VERSION: already in $ELIXIR_PREFIX"
  else
    fetch_forky_sid
    extract_elixir_deb
    prefix_elixir_ok || { echo "setup: $ELIXIR_PREFIX is not Elixir $ELIXIR_VERSION" >&2; exit 1; }
  fi
}

for s in "${sets[@]}"; do
  # shellcheck source=env.sh
  KINO_TRACE_TOOLCHAIN_SET="$s" source "$here/env.sh"
  "setup_$s"
  say "toolchain set $s ready: $(erl -noshell -eval 'io:format("OTP ~s", [erlang:system_info(otp_release)]), halt().'), Elixir $(elixir --short-version 2>/dev/null || elixir -v | tail -1)"
done

if [ -f "$root/assets/package.json" ]; then
  if [ ! -d "$root/assets/node_modules" ] || [ "$root/assets/package.json" -nt "$root/assets/node_modules" ]; then
    say "installing npm packages in assets/"
    (cd "$root/assets" && npm ci --no-audit --no-fund --loglevel=error && touch node_modules)
  else
    say "npm packages: present"
  fi
fi

say "ready"
