#!/usr/bin/env bash
# Runs every test suite of kino_trace (after scripts/setup.sh 27 29), even when one fails,
# then prints a summary and exits non-zero if any failed.
#
# Both ends of the supported range, each with its own build root (scripts/env.sh):
#   27  OTP 27.3.4.1 + Elixir 1.18.3
#   29  OTP 29.1.1 + Elixir 1.20.4
# On each: the compile with warnings as errors (scripts/check-warnings.sh), all of
# ExUnit (browser tests included) and the NIF under ASan+UBSan in a real BEAM. Once, as
# they do not depend on OTP or Elixir: the Catch2 core suites and the widget's JS tests.
# KINO_TRACE_TEST_SETS="27" (or "29") runs one end only.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
read -r -a sets <<<"${KINO_TRACE_TEST_SETS:-27 29}"

# Everything runs with CI=true, as CI runs it and as scripts/check-warnings.sh compiles:
# the native tracer is built once per toolchain, with -Werror. (With CI unset, `mix test`
# configured and built it again without -Werror right after the compile check, and the
# next run's check built it again: about a minute and a half each time here.) Off CI, the
# atom-table fuzz keeps its local size.
if [ -z "${CI:-}" ]; then
  export KINO_TRACE_ATOM_LINES="${KINO_TRACE_ATOM_LINES:-1250}"
fi
export CI=true

passed=0
failed=0
failures=()
# Each suite's output is also kept, so that the summary at the end (what a CI log's tail
# shows) can name what failed: ExUnit's numbered failures, warnings and failed checks.
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

suite() {
  local name="$1"; shift
  printf '\n\033[1m===== %s =====\033[0m\n' "$name"
  local start=$SECONDS
  local log="$logs/$((passed + failed)).log"
  if "$@" 2>&1 | tee "$log"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
    {
      printf '\n%s failed:\n' "$name"
      what_failed <"$log"
    } >>"$logs/summary"
  fi
  printf -- '-- %s: %d s\n' "$name" $((SECONDS - start))
}

# The lines that say what failed, at most 60: an ExUnit failure's first 6 lines (name,
# file, error) and other suites' FAILED/error lines; compiler warnings (their first 3
# lines, those with a file) only when they aborted the suite, after the failures.
what_failed() {
  sed 's/\x1b\[[0-9;]*m//g' | awk '
    function out(line) { if (n < 60) print "  " line; n++ }
    /^warning: / { warn = 3; block = "" }
    warn > 0 { block = block $0 "\n"; warn--; if (warn == 0 && block !~ /nofile/) warnings = warnings block; next }
    /aborted after successful execution/ { aborted = $0; next }
    /^ +[0-9]+\) / { keep = 6 }
    /FAILED|[Ee]rror:|[0-9]+ failures?/ && keep == 0 { keep = 1 }
    keep > 0 { out($0); keep-- }
    END {
      if (aborted != "") {
        k = split(warnings, lines, "\n")
        for (i = 1; i <= k; i++) if (lines[i] != "") out(lines[i])
        out(aborted)
      }
    }'
}

# Runs a command with toolchain set $1 on PATH (and its build root).
on() {
  local set="$1"; shift
  KINO_TRACE_TOOLCHAIN_SET="$set" bash -c 'source scripts/env.sh && "$@"' on "$@"
}

label() {
  case "$1" in
    27) echo "OTP 27.3.4.1 + Elixir 1.18.3" ;;
    29) echo "OTP 29.1.1 + Elixir 1.20.4" ;;
  esac
}

suite "native core (Catch2: plain, ASan+UBSan, TSan)" bash scripts/test-native.sh
suite "native tracer built with clang -Werror, and from the pinned fetched headers" bash scripts/test-build-variants.sh
for set in "${sets[@]}"; do
  suite "$(label "$set"): compile, warnings as errors" on "$set" bash scripts/check-warnings.sh
  suite "$(label "$set"): Elixir (ExUnit, real trace sessions and NIF)" on "$set" mix test --warnings-as-errors
  suite "$(label "$set"): NIF under ASan+UBSan in a real BEAM" on "$set" bash scripts/test-nif-sanitized.sh
done
if [ -f assets/package.json ]; then
  suite "widget JS (Vitest)" bash -c 'cd assets && npm test --silent'
fi

printf '\n\033[1m===== summary =====\033[0m\n'
if [ "$failed" -gt 0 ]; then
  cat "$logs/summary"
  printf '\nfailed suites: %s\n' "${failures[*]}"
fi
echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
