defmodule KinoTraceBench.VMs do
  @moduledoc false
  # `make bench` in fresh VMs (issue 40): the host moves its two vCPUs nearer or farther
  # apart between VMs, and one VM's ratios say little. The driver starts `vms` fresh VMs
  # one after the other (`mix run bench/overhead.exs` with BENCH_VM set), each printing its
  # own table, its core-to-core trip and its targets' values, and hands back its result
  # on one line; then prints the median and the spread (min-max) of each value across the
  # VMs, for the near and far states apart when both occur, and judges the targets on the
  # median of all VMs.

  alias KinoTraceBench.Targets

  @marker "BENCH_VM_RESULT "

  # The host's far state: a cache line's trip between CPUs 0 and 1 at or above this.
  @far_ns 200

  def run(opts) do
    vms = Keyword.fetch!(opts, :vms)
    far_ns = Keyword.get(opts, :far_ns, @far_ns)

    results =
      for i <- 1..vms do
        IO.puts("\n======== VM #{i} of #{vms} ========")

        # The first VM runs every case (the full table); the others the targets' rows.
        cases =
          if i == 1 or System.get_env("BENCH_CASES"),
            do: [],
            else: [{"BENCH_CASES", Enum.join(Targets.cases(), ",")}]

        {i, run_vm([{"BENCH_VM", Integer.to_string(i)} | cases])}
      end

    report(for({i, r} <- results, r != nil, do: {i, r}), far_ns)
    results
  end

  # One fresh VM: its output goes through; its result line is decoded.
  defp run_vm(env) do
    mix = System.find_executable("mix")

    env =
      [{"MIX_ENV", "bench"} | env]
      |> Enum.map(fn {k, v} -> {String.to_charlist(k), String.to_charlist(v)} end)

    port =
      Port.open({:spawn_executable, mix}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        {:line, 65_536},
        args: ["run", "bench/overhead.exs"],
        env: env
      ])

    collect(port, nil, "")
  end

  defp collect(port, result, partial) do
    receive do
      {^port, {:data, {:eol, chunk}}} ->
        line = partial <> chunk

        case line do
          @marker <> encoded ->
            collect(port, :erlang.binary_to_term(Base.decode64!(encoded)), "")

          _ ->
            IO.puts(line)
            collect(port, result, "")
        end

      {^port, {:data, {:noeol, chunk}}} ->
        collect(port, result, partial <> chunk)

      {^port, {:exit_status, 0}} ->
        result

      {^port, {:exit_status, status}} ->
        IO.puts("  (this VM exited with status #{status}: left out)")
        result
    end
  end

  # In the VM (BENCH_VM set): hands the result to the driver.
  def emit(result), do: IO.puts(@marker <> Base.encode64(:erlang.term_to_binary(result)))

  # One VM's line: its trip and its values.
  def print_vm(result, far_ns \\ @far_ns) do
    values = Targets.values(result)
    {a, b} = Map.get(result, :c2c, {nil, nil})

    IO.puts(
      "\nThis VM: a cache line took #{Targets.fmt(a)} ns from CPU 0 to CPU 1 before its rounds, #{Targets.fmt(b)} after (#{Targets.state(result, far_ns) || "?"} state)"
    )

    for {key, label, target, _} <- Targets.targets(),
        do:
          IO.puts(
            "  #{String.pad_trailing(label, 52)} #{String.pad_leading(Targets.fmt(values[key]), 7)}  (target #{target})"
          )

    for {key, label} <- Targets.infos(),
        do:
          IO.puts(
            "  #{String.pad_trailing(label, 52)} #{String.pad_leading(Targets.fmt(values[key]), 7)}"
          )
  end

  defp report(results, far_ns) do
    IO.puts("\n======== Across #{length(results)} fresh VMs: median [min-max] ========")

    per_vm =
      Enum.map(results, fn {i, r} -> {i, r, Targets.values(r), Targets.state(r, far_ns)} end)

    IO.puts("core-to-core trip (ns, before/after each VM's rounds; far at >= #{far_ns} ns):")

    for {i, r, _, state} <- per_vm do
      {a, b} = Map.get(r, :c2c, {nil, nil})
      IO.puts("  VM #{i}: #{Targets.fmt(a)} / #{Targets.fmt(b)}  #{state}")
    end

    groups = per_vm |> Enum.group_by(&elem(&1, 3)) |> Map.drop([nil])
    split? = map_size(groups) > 1

    header =
      String.pad_trailing("", 52) <>
        String.pad_leading("all VMs", 22) <>
        if(split?,
          do: Enum.map_join(Enum.sort(Map.keys(groups)), &String.pad_leading("#{&1}", 22)),
          else: ""
        )

    IO.puts(header <> "  target (on the median of all)")

    line = fn key, label, tail ->
      cell = fn rows ->
        rows
        |> Enum.map(fn {_, _, v, _} -> v[key] end)
        |> Targets.summary()
        |> fmt_summary()
        |> String.pad_leading(22)
      end

      extra =
        if split?,
          do: Enum.map_join(Enum.sort(Map.keys(groups)), fn s -> cell.(groups[s]) end),
          else: ""

      IO.puts("  " <> String.pad_trailing(label, 50) <> cell.(per_vm) <> extra <> tail)
    end

    for {key, label, target, ok?} <- Targets.targets() do
      med = per_vm |> Enum.map(fn {_, _, v, _} -> v[key] end) |> Targets.summary()
      line.(key, label, "  #{target}: #{Targets.verdict(med && med.median, ok?)}")
    end

    for {key, label} <- Targets.infos(), do: line.(key, label, "")
  end

  defp fmt_summary(nil), do: "-"

  defp fmt_summary(%{median: m, min: lo, max: hi}),
    do: "#{Targets.fmt(m)} [#{Targets.fmt(lo)}-#{Targets.fmt(hi)}]"
end
