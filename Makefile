# kino_trace — the two commands:
#   make demo   sets up what is missing, then traces a sample workload on the console
#   make test   sets up what is missing, then runs every suite
SHELL := /bin/bash
ENV := source scripts/env.sh &&

.PHONY: setup setup-all demo test test-native test-nif-sanitized test-elixir test-js test-browser assets bench clean

setup:
	bash scripts/setup.sh

# Both toolchains the tests run on: OTP 27.3 + Elixir 1.18 and OTP 29.1 + Elixir 1.20.
setup-all:
	bash scripts/setup.sh 27 29

demo: setup
	$(ENV) mix run demo/demo.exs

test: setup-all
	bash scripts/test-all.sh

test-native:
	bash scripts/test-native.sh

test-nif-sanitized:
	bash scripts/test-nif-sanitized.sh

test-elixir:
	$(ENV) mix test

test-js:
	cd assets && npm ci --no-audit --no-fund && npm test

test-browser:
	$(ENV) mix test --only browser

# Rebuilds the widget's committed bundle (lib/assets/trace/build) from assets/src.
assets:
	cd assets && npm ci --no-audit --no-fund && npm run build

bench: setup
	$(ENV) MIX_ENV=bench mix run bench/overhead.exs

clean:
	$(ENV) mix clean; rm -rf build
