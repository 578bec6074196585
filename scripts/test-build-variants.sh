#!/usr/bin/env bash
# Builds the native tracer in the ways CI does not otherwise build it, each in its own
# directory under build/, and checks each NIF loads in a real BEAM:
#   clang    clang++ with -Werror: the NIF and the Catch2 suite (run)   build/variant-clang
#   fetch    no system {fmt} nor concurrentqueue: CMake fetches the pinned releases,
#            offline, from local archives made of the same releases' headers (Debian's
#            libfmt-dev 9.1.0, libconcurrentqueue-dev 1.0.3), -Werror       build/variant-fetch
# Usage: scripts/test-build-variants.sh [clang|fetch ...] (default: both). Exits non-zero
# if any variant fails to configure, build, pass or load.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/env.sh
jobs="$(nproc 2>/dev/null || echo 2)"
variants=("$@")
[[ ${#variants[@]} -eq 0 ]] && variants=(clang fetch)

erts_include="$(erl -noshell -eval 'io:format("~ts", [filename:join([code:root_dir(), "erts-" ++ erlang:system_info(version), "include"])]), halt().')"
ebin="$root/build/variant-ebin"

# kino_trace_tracer's object code, compiled here (the NIF's Erlang side).
compile_tracer() {
  mkdir -p "$ebin" && erlc -o "$ebin" src/kino_trace_tracer.erl
}

# Loads the NIF library <dir>/kino_trace_nif in a fresh VM, as the agent does (the path
# given through the tracer's persistent_term), and checks it works.
check_load() {
  local lib="$1"
  erl -noshell -pa "$ebin" -eval "
    persistent_term:put({kino_trace_tracer, nif_path}, \"$lib\"),
    {module, _} = code:ensure_loaded(kino_trace_tracer),
    case kino_trace_tracer:loaded() of
      true ->
        {Copy, _} = kino_trace_tracer:roundtrip(lists:seq(1, 100), #{max_items => 3}),
        io:format(\"-- loaded ~ts: roundtrip ~0p~n\", [\"$lib\", Copy]), halt(0);
      false -> io:format(\"NOT LOADED: ~ts~n\", [kino_trace_tracer:load_error()]), halt(1)
    end."
}

configure_build() {
  local dir="$1"; shift
  rm -rf "$dir"
  echo "-- configure in ${dir#"$root"/}: $*"
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DKINO_TRACE_ERTS_INCLUDE="$erts_include" \
    -DKINO_TRACE_NIF_OUTPUT="$dir/priv" -DKINO_TRACE_WERROR=ON "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; echo "configure failed"; return 1; }
}

variant_clang() {
  command -v clang++ >/dev/null || { echo "clang++ not found (apt-get install clang)"; return 1; }
  local dir="$root/build/variant-clang"
  CXX=clang++ configure_build "$dir" -DKINO_TRACE_TESTS=ON || return 1
  grep -q "The CXX compiler identification is Clang" "$dir.configure.log" || { echo "not clang"; return 1; }
  cmake --build "$dir" --parallel "$jobs" --target kino_trace_nif kino_trace_core_tests || return 1
  (cd "$dir" && ctest --output-on-failure --timeout 900) || return 1
  check_load "$dir/priv/kino_trace_nif"
}

variant_fetch() {
  local dir="$root/build/variant-fetch" archives="$root/build/variant-fetch-archives"
  [[ -f /usr/include/fmt/format.h ]] || { echo "/usr/include/fmt/format.h not found (apt-get install libfmt-dev)"; return 1; }
  # the release's layout: fmt-9.1.0/include/fmt/*.h
  rm -rf "$archives" && mkdir -p "$archives/fmt-9.1.0/include/fmt"
  cp /usr/include/fmt/*.h "$archives/fmt-9.1.0/include/fmt/"
  tar -C "$archives" -czf "$archives/fmt.tar.gz" fmt-9.1.0
  # concurrentqueue's release has its headers at the top: concurrentqueue-1.0.3/*.h
  [[ -f /usr/include/concurrentqueue/concurrentqueue.h ]] ||
    { echo "/usr/include/concurrentqueue/concurrentqueue.h not found (apt-get install libconcurrentqueue-dev)"; return 1; }
  mkdir -p "$archives/concurrentqueue-1.0.3" && cp /usr/include/concurrentqueue/*.h "$archives/concurrentqueue-1.0.3/"
  tar -C "$archives" -czf "$archives/concurrentqueue.tar.gz" concurrentqueue-1.0.3
  configure_build "$dir" -DKINO_TRACE_TESTS=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON \
    -DKINO_TRACE_FMT_URL="$archives/fmt.tar.gz" \
    -DKINO_TRACE_FMT_SHA256="$(sha256sum "$archives/fmt.tar.gz" | cut -c1-64)" \
    -DCMAKE_DISABLE_FIND_PACKAGE_concurrentqueue=ON \
    -DKINO_TRACE_CONCURRENTQUEUE_URL="$archives/concurrentqueue.tar.gz" \
    -DKINO_TRACE_CONCURRENTQUEUE_SHA256="$(sha256sum "$archives/concurrentqueue.tar.gz" | cut -c1-64)" || return 1
  # fetched, not the system's
  grep -q "no system {fmt}; using $archives/fmt.tar.gz" "$dir.configure.log" ||
    { cat "$dir.configure.log"; echo "the pinned archive was not used"; return 1; }
  grep -q "no system concurrentqueue; using $archives/concurrentqueue.tar.gz" "$dir.configure.log" ||
    { cat "$dir.configure.log"; echo "the pinned concurrentqueue archive was not used"; return 1; }
  cmake --build "$dir" --parallel "$jobs" --target kino_trace_nif || return 1
  # the NIF includes the fetched headers, never /usr/include's
  if grep -rhsE "/usr/include/(fmt|concurrentqueue)" "$dir/CMakeFiles" >/dev/null; then
    echo "the build used the system's headers"; return 1
  fi
  # a wrong hash is refused
  rm -rf "$dir-badhash"
  cmake -S "$root" -B "$dir-badhash" -DKINO_TRACE_ERTS_INCLUDE="$erts_include" -DKINO_TRACE_TESTS=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DKINO_TRACE_FMT_URL="$archives/fmt.tar.gz" \
    -DKINO_TRACE_FMT_SHA256="$(printf '0%.0s' {1..64})" >"$dir-badhash.configure.log" 2>&1 &&
    { echo "an archive with the wrong SHA256 was accepted"; return 1; }
  grep -q "does not match expected value" "$dir-badhash.configure.log" || { echo "no hash mismatch reported"; return 1; }
  check_load "$dir/priv/kino_trace_nif"
}

compile_tracer || exit 1
failed=0
for v in "${variants[@]}"; do
  printf '\n== build variant: %s\n' "$v"
  case "$v" in
    clang) variant_clang ;;
    fetch) variant_fetch ;;
    *) echo "unknown variant '$v' (clang or fetch)"; false ;;
  esac
  if [[ $? -eq 0 ]]; then echo "-- $v: PASS"; else echo "-- $v: FAIL"; failed=1; fi
done
exit $failed
