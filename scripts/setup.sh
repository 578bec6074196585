#!/usr/bin/env bash
# Sets up everything kino_trace needs on a Debian 12 machine, idempotently:
#   1. Debian packages (compilers, cmake, fmt, moodycamel, Catch2, Chromium, OTP build deps)
#   2. OTP 27 and Elixir 1.18, built from Debian trixie's source tarballs into a fixed
#      prefix, when the `erl`/`elixir` on PATH are older (skipped when already built)
#   3. npm packages for the widget's JS build and tests (when assets/package.json exists)
#
# Prints what it does. Afterwards, `source scripts/env.sh` puts the toolchain on PATH.
# Never installs trixie binary packages: only the source tarballs are downloaded.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=env.sh
source "$here/env.sh"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_packages=(
  build-essential cmake pkg-config git ca-certificates xz-utils dpkg-dev
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

if [ -f "$root/assets/package.json" ]; then
  if [ ! -d "$root/assets/node_modules" ] || [ "$root/assets/package.json" -nt "$root/assets/node_modules" ]; then
    say "installing npm packages in assets/"
    (cd "$root/assets" && npm ci --no-audit --no-fund --loglevel=error && touch node_modules)
  else
    say "npm packages: present"
  fi
fi

say "ready: $(erl -noshell -eval 'io:format("OTP ~s", [erlang:system_info(otp_release)]), halt().'), $(elixir --short-version 2>/dev/null || elixir -v | tail -1)"
