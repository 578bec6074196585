# kino_trace — the two commands:
#   make demo   sets up what is missing, then traces a sample workload on the console
#   make test   sets up what is missing, then runs every suite
SHELL := /bin/bash
ENV := source scripts/env.sh &&

.PHONY: setup demo test test-native test-elixir test-js bench clean

setup:
	bash scripts/setup.sh

demo: setup
	$(ENV) mix run demo/demo.exs

test: setup
	bash scripts/test-all.sh

test-native:
	bash scripts/test-native.sh

test-elixir:
	$(ENV) mix test

bench: setup
	$(ENV) MIX_ENV=bench mix run bench/overhead.exs

clean:
	$(ENV) mix clean; rm -rf build
