# The flood run alone: MIX_ENV=bench mix run bench/flood.exs
# (bench/overhead.exs runs it after the overhead table). BENCH_FLOOD_CALLS sets the calls.
calls = String.to_integer(System.get_env("BENCH_FLOOD_CALLS", "10000000"))
KinoTraceBench.Flood.run(calls: calls)
