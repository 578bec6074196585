# Source this file to put kino_trace's toolchain (OTP 27 / Elixir 1.18 built by
# scripts/setup.sh) on PATH. Safe to source several times.
export KINO_TRACE_MIN_OTP=27
export OTP_VERSION=27.3.4.1
export ELIXIR_VERSION=1.18.3
export OTP_TARBALL="erlang_${OTP_VERSION}+dfsg.orig.tar.xz"
export ELIXIR_TARBALL="elixir-lang_${ELIXIR_VERSION}.dfsg.orig.tar.xz"
export KINO_TRACE_TOOLCHAIN="${KINO_TRACE_TOOLCHAIN:-/opt/kino_trace}"
export OTP_PREFIX="$KINO_TRACE_TOOLCHAIN/otp-$OTP_VERSION"
export ELIXIR_PREFIX="$KINO_TRACE_TOOLCHAIN/elixir-$ELIXIR_VERSION"
case ":$PATH:" in
  *":$ELIXIR_PREFIX/bin:"*) ;;
  *) export PATH="$ELIXIR_PREFIX/bin:$OTP_PREFIX/bin:$PATH" ;;
esac
export LANG="${LANG:-C.UTF-8}"
export LC_ALL="${LC_ALL:-C.UTF-8}"
export ERL_AFLAGS="${ERL_AFLAGS:-}"
