# kino_trace's overhead benchmark: cost per traced call against the floor (a NIF tracer
# that discards in enabled), OTP's pid tracer, :dbg and the stats counters; then the
# consumer alone (bench/consumer.exs) and the flood run (bench/flood.exs).
#
#   MIX_ENV=bench mix run bench/overhead.exs      (make bench)
#
# It runs in BENCH_VMS fresh VMs (default 3, one after the other: KinoTraceBench.VMs):
# each prints its table, its core-to-core trip and issue 40's targets' values; then the
# median and spread across the VMs, near and far states apart. The first VM runs every
# case, the others the cases the targets need. BENCH_VMS=0 runs once in this VM instead.
#
# Environment: BENCH_ROUNDS (default 3 a VM), BENCH_SCALE (calls per run, default 1.0),
# BENCH_CONSUMER=0 to skip the consumer case, BENCH_FLOOD=0 to skip the flood,
# BENCH_FLOOD_CALLS (default 4_000_000: three VMs stay within 15 minutes),
# BENCH_CASES=untraced,floor,native to run only those cases (their keys in
# bench/support/overhead.ex) in every VM.
alias KinoTraceBench.VMs

one_vm = fn ->
  rounds = String.to_integer(System.get_env("BENCH_ROUNDS", "3"))
  scale = String.to_float(System.get_env("BENCH_SCALE", "1.0"))

  KinoTraceBench.Report.machine() |> IO.puts()

  only =
    case System.get_env("BENCH_CASES", "") do
      "" -> nil
      keys -> keys |> String.split(",", trim: true) |> Enum.map(&String.to_atom(String.trim(&1)))
    end

  result = KinoTraceBench.Overhead.run(rounds: rounds, scale: scale, only: only)

  consumer =
    if System.get_env("BENCH_CONSUMER", "1") != "0" do
      calls = String.to_integer(System.get_env("BENCH_CONSUMER_CALLS", "500000"))
      KinoTraceBench.Consumer.run(calls: calls)
    end

  flood =
    if System.get_env("BENCH_FLOOD", "1") != "0" do
      calls = String.to_integer(System.get_env("BENCH_FLOOD_CALLS", "4000000"))

      case KinoTraceBench.Flood.run(calls: calls) do
        [%{info: info, calls: done} | _] -> 100 * info.delivered / max(2 * done, 1)
        _ -> nil
      end
    end

  result = Map.merge(result, %{consumer: consumer || %{}, flood: flood})
  VMs.print_vm(result)
  result
end

case {System.get_env("BENCH_VM"), String.to_integer(System.get_env("BENCH_VMS", "3"))} do
  {nil, vms} when vms > 0 ->
    KinoTraceBench.Report.machine() |> IO.puts()
    VMs.run(vms: vms)

  {nil, _} ->
    one_vm.()

  {_vm, _} ->
    one_vm.() |> VMs.emit()
end
