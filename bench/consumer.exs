# The consumer alone (drain -> decode -> pair -> history): MIX_ENV=bench mix run bench/consumer.exs
# (bench/overhead.exs runs it after the overhead table). BENCH_CONSUMER_CALLS sets the calls.
calls = String.to_integer(System.get_env("BENCH_CONSUMER_CALLS", "500000"))
KinoTraceBench.Consumer.run(calls: calls)
