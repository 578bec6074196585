#!/usr/bin/env bash
# Builds and runs the Catch2 suite of the pure C++ core (c_src/core, tests in c_src/tests)
# three times, each in its own build directory under build/:
#   plain    Release (-Werror when CI=true)      build/native-plain
#   address  ASan + UBSan                        build/native-address
#   thread   TSan                                build/native-thread
# No NIF is built. Usage: scripts/test-native.sh [plain|address|thread ...] (default: all)
# Exits non-zero if any variant fails to configure, build or pass.
# KINO_TRACE_STRESS_EVENTS=<n> sets the size of the multi-producer stress runs.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="$(nproc 2>/dev/null || echo 2)"

if [[ $# -gt 0 ]]; then
  variants=("$@")
else
  variants=(plain address thread)
fi

for v in "${variants[@]}"; do
  case "$v" in
    plain | address | thread) ;;
    *) echo "unknown variant '$v' (plain, address or thread)" >&2; exit 2 ;;
  esac
done

for tool in cmake ctest; do
  command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install cmake)" >&2; exit 2; }
done

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"

declare -A result seconds
failed=0
n=0

banner() {
  printf '\n==============================================================================\n'
  printf '== %s\n' "$1"
  printf '==============================================================================\n'
}

# TSan needs a memory layout that some kernels' ASLR settings break ("unexpected memory
# mapping", "FATAL: ThreadSanitizer: ..."). Then run it with ASLR off via setarch -R.
tsan_runner() {
  local exe="$1" out
  out="$("$exe" --list-test-names-only 2>&1 >/dev/null)"
  if grep -qiE 'unexpected memory mapping|FATAL: ThreadSanitizer' <<<"$out"; then
    if command -v setarch >/dev/null && setarch "$(uname -m)" -R true 2>/dev/null; then
      echo "TSan cannot run with this ASLR layout: running under 'setarch $(uname -m) -R'" >&2
      echo "setarch $(uname -m) -R"
      return 0
    fi
    echo "TSan cannot run here and setarch -R is unavailable" >&2
    return 1
  fi
  echo ""
}

run_variant() {
  local v="$1"
  local dir="$root/build/native-$v" werror=OFF build_type=RelWithDebInfo
  local -a cfg
  case "$v" in
    plain)
      build_type=Release
      [[ "${CI:-}" == "true" ]] && werror=ON
      cfg=(-DKINO_TRACE_SANITIZE=)
      ;;
    address) cfg=(-DKINO_TRACE_SANITIZE=address) ;;
    thread) cfg=(-DKINO_TRACE_SANITIZE=thread) ;;
  esac

  echo "-- configure ($build_type, KINO_TRACE_WERROR=$werror) in ${dir#"$root"/}"
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE="$build_type" -DKINO_TRACE_TESTS=ON \
    -DKINO_TRACE_WERROR="$werror" "${cfg[@]}" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; echo "configure failed"; return 1; }

  echo "-- build"
  cmake --build "$dir" --parallel "$jobs" || { echo "build failed"; return 1; }

  local runner=""
  if [[ "$v" == thread ]]; then
    runner="$(tsan_runner "$dir/kino_trace_core_tests")" || return 1
  fi

  echo "-- ctest"
  # shellcheck disable=SC2086 # $runner is empty or 'setarch <arch> -R'
  (cd "$dir" && $runner ctest --output-on-failure --timeout 900)
}

mkdir -p "$root/build"
for v in "${variants[@]}"; do
  n=$((n + 1))
  case "$v" in
    plain) title="plain Release" ;;
    address) title="AddressSanitizer + UndefinedBehaviorSanitizer" ;;
    thread) title="ThreadSanitizer" ;;
  esac
  banner "[$n/${#variants[@]}] $v: $title"
  start=$(date +%s.%N)
  if run_variant "$v"; then
    result[$v]=PASS
  else
    result[$v]=FAIL
    failed=1
  fi
  seconds[$v]=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "-- $v: ${result[$v]} in ${seconds[$v]} s"
done

banner "summary"
for v in "${variants[@]}"; do
  printf '  %-8s %s  %6s s\n' "$v" "${result[$v]}" "${seconds[$v]}"
done
if [[ $failed -ne 0 ]]; then
  echo "native tests FAILED"
  exit 1
fi
echo "native tests passed"
