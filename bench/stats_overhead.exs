# Per-call overhead of a stats session (Kino.Trace.Stats) against no tracing, for each
# choice of counters, beside a per-call trace (Kino.Trace.calls/2) on the same function.
#
#   mix run bench/stats_overhead.exs
#
# Environment: BENCH_CALLS (calls per run, default 2_000_000), BENCH_ROUNDS (default 5).
# Reports the median over the rounds of (traced - untraced) / calls, in ns per call.

defmodule StatsBench.Work do
  @moduledoc false
  def f(x), do: x + 1

  def loop(0), do: :ok

  def loop(n) do
    __MODULE__.f(n)
    loop(n - 1)
  end
end

defmodule StatsBench do
  @moduledoc false

  def time_loop(calls) do
    {us, :ok} = :timer.tc(fn -> StatsBench.Work.loop(calls) end)
    us * 1000
  end

  # Each run happens in a fresh process so every mode starts from the same heap.
  def run(calls) do
    parent = self()
    {pid, ref} = spawn_monitor(fn -> send(parent, {:ns, time_loop(calls)}) end)

    receive do
      {:ns, ns} ->
        receive do: ({:DOWN, ^ref, :process, ^pid, _} -> ns)
    end
  end

  def median(list), do: list |> Enum.sort() |> Enum.at(div(length(list), 2))

  def measure(label, calls, rounds, setup, teardown) do
    per_call =
      for _ <- 1..rounds do
        base = run(calls)
        state = setup.()
        traced = run(calls)
        teardown.(state)
        {base / calls, (traced - base) / calls}
      end

    base = median(Enum.map(per_call, &elem(&1, 0)))
    overhead = median(Enum.map(per_call, &elem(&1, 1)))
    :io.format("~-44s ~8.1f ns/call untraced  ~8.1f ns/call added~n", [label, base, overhead])
    {label, overhead}
  end
end

calls = String.to_integer(System.get_env("BENCH_CALLS", "2000000"))
rounds = String.to_integer(System.get_env("BENCH_ROUNDS", "5"))
target = [&StatsBench.Work.f/1]

IO.puts(
  "OTP #{System.otp_release()}, #{System.schedulers_online()} schedulers, #{calls} calls x #{rounds} rounds\n"
)

stats = fn opts ->
  {fn -> Kino.Trace.Stats.start(target, opts) end,
   fn s ->
     snapshot = Kino.Trace.Stats.snapshot(s)
     true = snapshot.calls >= calls
     Kino.Trace.Stats.stop(s)
   end}
end

for {label, opts} <- [
      {"stats: calls only (call_time, times not shown)", [time: false, memory: false]},
      {"stats: time (call_time)", [memory: false]},
      {"stats: memory (call_memory)", [time: false]},
      {"stats: time + memory (default)", []}
    ] do
  {setup, teardown} = stats.(opts)
  StatsBench.measure(label, calls, rounds, setup, teardown)
end

StatsBench.measure(
  "per-call trace (calls/2, default options)",
  calls,
  rounds,
  fn -> Kino.Trace.calls(target) end,
  &Kino.Trace.stop/1
)
