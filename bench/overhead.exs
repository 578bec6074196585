# kino_trace's overhead benchmark: cost per traced call against the floor (a NIF tracer
# that discards in enabled), OTP's pid tracer, :dbg and the stats counters; then the
# consumer alone (bench/consumer.exs) and the flood run (bench/flood.exs).
#
#   MIX_ENV=bench mix run bench/overhead.exs      (make bench)
#
# Environment: BENCH_ROUNDS (default 5), BENCH_SCALE (calls per run, default 1.0),
# BENCH_CONSUMER=0 to skip the consumer case, BENCH_FLOOD=0 to skip the flood,
# BENCH_FLOOD_CALLS (default 10_000_000), BENCH_CASES=untraced,floor,native to run only
# those cases (their keys in bench/support/overhead.ex).
rounds = String.to_integer(System.get_env("BENCH_ROUNDS", "5"))
scale = String.to_float(System.get_env("BENCH_SCALE", "1.0"))

KinoTraceBench.Report.machine() |> IO.puts()

only =
  case System.get_env("BENCH_CASES", "") do
    "" -> nil
    keys -> keys |> String.split(",", trim: true) |> Enum.map(&String.to_atom(String.trim(&1)))
  end

KinoTraceBench.Overhead.run(rounds: rounds, scale: scale, only: only)

if System.get_env("BENCH_CONSUMER", "1") != "0" do
  Code.require_file("consumer.exs", __DIR__)
end

if System.get_env("BENCH_FLOOD", "1") != "0" do
  Code.require_file("flood.exs", __DIR__)
end
