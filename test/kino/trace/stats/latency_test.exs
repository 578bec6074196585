defmodule Kino.Trace.Stats.LatencyTest do
  # A stats session with `latency: true`: its rows carry each function's latency
  # distribution, from a trace of the same functions owned by its server (issue 38.1).
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers, only: [wait_until: 1]

  alias Kino.Trace.Stats
  alias KinoTrace.Latency.Histogram
  alias KinoTraceTest.Sample.Timing

  @err Histogram.relative_error()
  @jitter_us 200_000
  @leaf {Timing, :leaf, 0}

  setup do
    on_exit(fn -> wait_until(fn -> sessions() == [] end) end)
  end

  # kino_trace's trace and stats sessions (once the reaper has dealt with ended ones)
  defp sessions do
    KinoTrace.Backend.Reaper.sync()

    for {name, _} = s <- :trace.session_info(:all),
        name in [:kino_trace, :kino_trace_stats],
        do: s
  end

  defp print(stats) do
    {:ok, device} = StringIO.open("")
    :ok = Stats.print(stats, device: device)
    {_, table} = StringIO.contents(device)
    StringIO.close(device)
    String.split(table, "\n", trim: true)
  end

  for tracer <- [:native, :fallback] do
    test "rows carry every call's distribution; the table shows P50, P99 and MAX (#{tracer} tracer)" do
      if unquote(tracer) == :fallback, do: KinoTraceTest.Helpers.use_fallback_tracer()

      stats =
        Stats.start(
          ["KinoTraceTest.Sample.Timing.leaf/0", "KinoTraceTest.Sample.Timing.count_down/1"],
          pids: self(),
          latency: true
        )

      for _ <- 1..20, do: Timing.leaf()
      Timing.count_down(3)

      snapshot = Stats.snapshot(stats)
      assert snapshot.latency?
      row = Stats.Snapshot.row(snapshot, @leaf)
      assert row.calls == 20
      assert %{count: 20, unknown: 0} = row.latency
      # wall time: each call waits 1 ms
      assert row.latency.min >= 1000 * (1 - @err) and row.latency.max < 1000 + @jitter_us
      assert row.latency.p50 <= row.latency.p99 and row.latency.p99 <= row.latency.max
      # a tail-call loop is traced without returns: its calls are unknown, never zero
      assert %{count: 0, unknown: 4} =
               Stats.Snapshot.row(snapshot, {Timing, :count_down, 1}).latency

      [_summary, header | lines] = print(stats)
      assert header =~ ~r/TIME µs\s+PER CALL\s+%TIME\s+P50 µs\s+P99 µs\s+MAX µs\s+MEMORY words/
      leaf_line = Enum.find(lines, &String.starts_with?(&1, "KinoTraceTest.Sample.Timing.leaf/0"))
      assert leaf_line =~ ~r/\s\d{4,}\s/

      payload = KinoTrace.Widget.StatsPayload.snapshot(snapshot)
      leaf = Enum.find(payload.rows, &(&1.key == "KinoTraceTest.Sample.Timing.leaf/0"))
      assert %{count: 20, unknown: 0, exceptions: %{count: 0}} = leaf.latency
      assert length(leaf.latency.histogram) in 1..24
      assert Enum.sum(Enum.map(leaf.latency.histogram, &Enum.at(&1, 1))) == 20

      # reset: the distributions start over too
      :ok = Stats.reset(stats)
      Timing.leaf()
      assert %{count: 1} = Stats.Snapshot.row(Stats.snapshot(stats), @leaf).latency

      :ok = Stats.stop(stats)
      assert sessions() == []
    end
  end

  for tracer <- [:native, :fallback] do
    test "each process of a row carries its own distribution; the payload bounds the processes and counts the rest (#{tracer} tracer)" do
      if unquote(tracer) == :fallback, do: KinoTraceTest.Helpers.use_fallback_tracer()
      stats = Stats.start(["KinoTraceTest.Sample.Timing.wait/1"], pids: :new, latency: true)

      [quick, slow] =
        for waits <- [List.duplicate(1, 5), [8, 8]] do
          Task.async(fn ->
            Enum.each(waits, &Timing.wait/1)
            self()
          end)
        end
        |> Task.await_many()

      row = Stats.Snapshot.row(Stats.snapshot(stats), {Timing, :wait, 1})
      assert %{count: 7} = row.latency
      by_pid = Map.new(row.processes, &{&1.pid, &1.latency})
      assert %{count: 5, unknown: 0} = by_pid[quick]
      assert %{count: 2, unknown: 0} = by_pid[slow]
      # (lower bounds only: a loaded machine makes waits longer, never shorter)
      assert by_pid[quick].min >= 1000 * (1 - @err) and by_pid[slow].min >= 8000 * (1 - @err)

      # the widget's drill-down: at most `processes` of them (most running time first),
      # each with its distribution, the rest counted
      payload = KinoTrace.Widget.StatsPayload.snapshot(Stats.snapshot(stats), processes: 1)
      [wait] = payload.rows
      assert [%{pid: shown, calls: calls, latency: %{count: count}}] = wait.processes
      assert {shown, count} in [{inspect(quick), 5}, {inspect(slow), 2}] and calls == count
      assert %{count: 1, calls: other} = wait.processes_omitted
      assert calls + other == 7
      :ok = Stats.stop(stats)
    end
  end

  test "without latency: true, no distributions and no columns" do
    stats = Stats.start(["KinoTraceTest.Sample.Timing.leaf/0"], pids: self())
    Timing.leaf()
    snapshot = Stats.snapshot(stats)
    refute snapshot.latency?
    assert Stats.Snapshot.row(snapshot, @leaf).latency == nil
    refute Enum.at(print(stats), 1) =~ "P50"
    :ok = Stats.stop(stats)
  end

  test "a trace of durations that is gone: snapshots go on, its rows without distributions" do
    stats = Stats.start(["KinoTraceTest.Sample.Timing.leaf/0"], pids: self(), latency: true)
    Timing.leaf()
    %{latency_trace: %{session: pid}} = KinoTrace.Client.internals(stats.server)
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}

    snapshot = Stats.snapshot(stats)
    assert snapshot.latency?
    assert %{calls: 1, latency: nil} = Stats.Snapshot.row(snapshot, @leaf)
    assert Enum.at(print(stats), 1) =~ "P50"
    :ok = Stats.stop(stats)
  end

  test "the latency trace ends with its owner" do
    parent = self()

    owner =
      spawn(fn ->
        stats = Stats.start(["KinoTraceTest.Sample.Timing.leaf/0"], pids: parent, latency: true)
        send(parent, {:started, stats})
        receive do: (:never -> :ok)
      end)

    on_exit(fn -> Process.exit(owner, :kill) end)
    assert_receive {:started, _stats}, 10_000
    # the stats session and its trace of durations
    assert [{:kino_trace, _}, {:kino_trace_stats, _}] = Enum.sort(sessions())
    ref = Process.monitor(owner)
    Process.exit(owner, :kill)
    assert_receive {:DOWN, ^ref, :process, ^owner, :killed}
    wait_until(fn -> sessions() == [] end)
  end
end
