# Source this file to put one of kino_trace's toolchains (built by scripts/setup.sh) on
# PATH. Safe to source several times, also to switch from one set to the other.
#
#   source scripts/env.sh                              OTP 27.3.4.1 + Elixir 1.18.3 (default)
#   KINO_TRACE_TOOLCHAIN_SET=29 source scripts/env.sh  OTP 29.1.1 + Elixir 1.20.4
#
# The OTP 27 set is built from Debian trixie's source tarballs; the OTP 29 set from
# forky's `erlang` source tarball, with Elixir extracted from sid's `elixir` package.
# Set 29 builds into `_build29` (MIX_BUILD_ROOT), so both sets share one checkout.
export KINO_TRACE_MIN_OTP=27
export KINO_TRACE_TOOLCHAIN_SET="${KINO_TRACE_TOOLCHAIN_SET:-27}"
case "$KINO_TRACE_TOOLCHAIN_SET" in
  27)
    export OTP_VERSION=27.3.4.1 ELIXIR_VERSION=1.18.3
    export OTP_TARBALL="erlang_${OTP_VERSION}+dfsg.orig.tar.xz"
    export ELIXIR_TARBALL="elixir-lang_${ELIXIR_VERSION}.dfsg.orig.tar.xz"
    ;;
  29)
    export OTP_VERSION=29.1.1 ELIXIR_VERSION=1.20.4
    export OTP_TARBALL="erlang_${OTP_VERSION}+dfsg.orig.tar.xz"
    # sid's binary package `elixir`, extracted by setup.sh (never installed)
    export ELIXIR_TARBALL=""
    ;;
  *)
    echo "env.sh: KINO_TRACE_TOOLCHAIN_SET must be 27 or 29, not '$KINO_TRACE_TOOLCHAIN_SET'" >&2
    return 2 2>/dev/null || exit 2
    ;;
esac
export KINO_TRACE_TOOLCHAIN="${KINO_TRACE_TOOLCHAIN:-/opt/kino_trace}"
export OTP_PREFIX="$KINO_TRACE_TOOLCHAIN/otp-$OTP_VERSION"
export ELIXIR_PREFIX="$KINO_TRACE_TOOLCHAIN/elixir-$ELIXIR_VERSION"
# Drop any toolchain of ours already on PATH (another set), then put this one first.
_kt_path=""
IFS=: read -r -a _kt_parts <<<"$PATH"
for _kt_p in "${_kt_parts[@]}"; do
  case "$_kt_p" in
    "$KINO_TRACE_TOOLCHAIN"/otp-*/bin | "$KINO_TRACE_TOOLCHAIN"/elixir-*/bin | "") ;;
    *) _kt_path="${_kt_path:+$_kt_path:}$_kt_p" ;;
  esac
done
export PATH="$ELIXIR_PREFIX/bin:$OTP_PREFIX/bin${_kt_path:+:$_kt_path}"
unset _kt_path _kt_parts _kt_p
# Each set has its own Mix build root (compiled .beam files and the NIF differ per OTP).
_kt_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$KINO_TRACE_TOOLCHAIN_SET" = 27 ]; then
  [ "${MIX_BUILD_ROOT:-}" = "$_kt_root/_build29" ] && unset MIX_BUILD_ROOT
else
  [ -n "${MIX_BUILD_ROOT:-}" ] || export MIX_BUILD_ROOT="$_kt_root/_build$KINO_TRACE_TOOLCHAIN_SET"
fi
unset _kt_root
export LANG="${LANG:-C.UTF-8}"
export LC_ALL="${LC_ALL:-C.UTF-8}"
export ERL_AFLAGS="${ERL_AFLAGS:-}"
