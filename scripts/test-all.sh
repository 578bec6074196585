#!/usr/bin/env bash
# Runs every test suite of kino_trace (after scripts/setup.sh), even when one fails,
# then prints a summary and exits non-zero if any failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/env.sh

passed=0
failed=0
failures=()

suite() {
  local name="$1"; shift
  printf '\n\033[1m===== %s =====\033[0m\n' "$name"
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
  fi
}

suite "native core (Catch2: plain, ASan+UBSan, TSan)" bash scripts/test-native.sh
suite "Elixir (ExUnit, real trace sessions and NIF)" mix test
suite "NIF under ASan+UBSan in a real BEAM" bash scripts/test-nif-sanitized.sh
if [ -f assets/package.json ]; then
  suite "widget JS (Vitest)" bash -c 'cd assets && npm test --silent'
fi

printf '\n\033[1m===== summary =====\033[0m\n'
if [ "$failed" -gt 0 ]; then
  printf 'failed suites: %s\n' "${failures[*]}"
fi
echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
