#!/usr/bin/env bash
# Compiles kino_trace with warnings as errors on the toolchain set in
# $KINO_TRACE_TOOLCHAIN_SET (27 by default, see scripts/env.sh): the Erlang modules
# (erlc -Werror: Mix does not make erlc's warnings fatal) and the whole Mix project in
# the test environment (lib, src, test/support, the native tracer with -Werror).
# Exits non-zero on the first warning.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/env.sh

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "-- erlc -Werror src/*.erl (OTP $OTP_VERSION)"
erlc -Werror -o "$out" src/*.erl

echo "-- mix compile --warnings-as-errors (OTP $OTP_VERSION, Elixir $ELIXIR_VERSION, MIX_ENV=test)"
# CI=true also builds the native tracer with -Werror (mix/compile.kino_trace_nif.ex).
CI=true MIX_ENV=test mix compile --warnings-as-errors --all-warnings
