#!/usr/bin/env bash
# Runs the ExUnit suites that drive the native tracer hardest against a NIF built with
# ASan+UBSan, inside a real BEAM (the sanitizer runtimes are preloaded). Uses its own
# build directory, so the normal build is untouched. On the toolchain set in
# $KINO_TRACE_TOOLCHAIN_SET (scripts/env.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/env.sh

# Under the toolchain set's own build root (_build, or _build29 for OTP 29).
export MIX_BUILD_ROOT="${MIX_BUILD_ROOT:-$root/_build}/sanitized"
export KINO_TRACE_CMAKE_ARGS="-DKINO_TRACE_SANITIZE=address"
preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"

# Preloaded for every process (any BEAM that loads kino_trace_tracer loads the NIF).
export LD_PRELOAD="$preload"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# tracer_bounds_test.exs: the NIF's term-layout readers on huge terms; its timing
# comparisons are left out (only the NIF is instrumented here).
mix test test/kino_trace/tracer_test.exs test/kino/trace/calls/messages_test.exs \
    test/kino/trace/calls/cleanup_test.exs test/kino/trace_test.exs test/kino_trace/tracer/native_decoder_test.exs \
    test/kino_trace/tracer/bounds_test.exs test/kino_trace/tracer/alloc_faults_test.exs --exclude timing
