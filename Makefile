# kino_trace — the two commands:
#   make demo   sets up what is missing, then traces a sample workload on the console
#   make test   sets up what is missing, then runs every suite
# and, once set up, the contributor's loop:
#   make test-quick   the ExUnit suite on the default toolchain without the slow groups
SHELL := /bin/bash
ENV := source scripts/env.sh &&

.PHONY: setup setup-all demo test test-quick test-native test-nif-sanitized test-elixir test-js test-browser assets bench clean

setup:
	bash scripts/setup.sh

# Both toolchains the tests run on: OTP 27.3 + Elixir 1.18 and OTP 29.1 + Elixir 1.20.
setup-all:
	bash scripts/setup.sh 27 29

demo: setup
	$(ENV) mix run demo/demo.exs

test: setup-all
	bash scripts/test-all.sh

# The default toolchain's ExUnit suite without the tests tagged :slow (fuzzing, floods,
# builds of the package and of clones, other nodes) and :browser (Chromium): a few
# minutes. `make test` runs them all.
test-quick:
	$(ENV) mix test --exclude slow --exclude browser

test-native:
	bash scripts/test-native.sh

test-nif-sanitized:
	bash scripts/test-nif-sanitized.sh

test-elixir:
	$(ENV) mix test

# npm ci only when the packages are missing (it deletes node_modules and installs afresh).
test-js:
	cd assets && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm test

test-browser:
	$(ENV) mix test --only browser

# Rebuilds the widget's committed bundle (lib/assets/trace/build) from assets/src.
assets:
	cd assets && npm ci --no-audit --no-fund && npm run build

bench: setup
	$(ENV) MIX_ENV=bench mix run bench/overhead.exs

clean:
	$(ENV) mix clean; rm -rf build
