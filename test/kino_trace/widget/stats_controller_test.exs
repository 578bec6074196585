defmodule KinoTrace.Widget.StatsControllerTest do
  # The stats widget's behaviour without Kino, on real stats sessions.
  use ExUnit.Case, async: true

  alias KinoTrace.Widget.StatsController
  alias KinoTraceTest.StatsWidgetSample, as: Sample

  @sample "KinoTraceTest.StatsWidgetSample"

  defp start(opts \\ []) do
    stats = Kino.Trace.stats([@sample], Keyword.merge([pids: :new], opts))
    on_exit(fn -> Kino.Trace.stop(stats) end)
    stats
  end

  defp workload do
    Sample.in_process(fn ->
      for i <- 1..200, do: Sample.light(i)
      Sample.heavy(5)
      Sample.alloc(2_000)
    end)
  end

  test "connect sends the figures of a real session; refresh re-arms its timer" do
    stats = start()
    {controller, [{:send_after, :refresh, 1_000}]} = StatsController.init(stats, lifeline: false)
    worker = workload()

    {:ok, effects, controller} = StatsController.handle_info(controller, :refresh)

    assert [
             {:broadcast, "snapshot", %{status: "running", snapshot: snapshot}},
             {:send_after, :refresh, 1_000}
           ] = effects

    rows = Map.new(snapshot.rows, &{&1.key, &1})
    assert rows["KinoTraceTest.StatsWidgetSample.light/1"].calls == 200
    assert rows["KinoTraceTest.StatsWidgetSample.heavy/1"].calls == 1
    assert rows["KinoTraceTest.StatsWidgetSample.alloc/1"].calls == 1
    assert snapshot.totals.calls == 202 + rows_private_calls(rows)

    # heavy's private loop ran for about 5 ms of wall time (time in a counted function is
    # its own; on a loaded machine less of it is running time): the top row, with most of
    # the time and a bar share to match
    spin = rows["KinoTraceTest.StatsWidgetSample.spin/1"]
    assert spin.calls > 1 and spin.time_us > 0
    assert spin.time_share > 0.5
    assert hd(snapshot.rows).key == "KinoTraceTest.StatsWidgetSample.spin/1"

    # alloc allocated the list: 2 words a cell at least
    assert rows["KinoTraceTest.StatsWidgetSample.alloc/1"].memory_words >= 4_000

    # per-process drill-down: every call came from the worker
    assert [%{pid: pid, calls: 200, time_share: 1.0}] =
             rows["KinoTraceTest.StatsWidgetSample.light/1"].processes

    assert pid == inspect(worker)

    {payload, _controller} = StatsController.connect(controller)
    assert payload.status == "running" and payload.interval == 1_000
    assert payload.snapshot.totals == snapshot.totals

    assert payload |> JSON.encode!() |> JSON.decode!() |> get_in(["snapshot", "totals", "calls"]) ==
             snapshot.totals.calls
  end

  defp rows_private_calls(rows) do
    rows
    |> Map.drop(
      ~w(KinoTraceTest.StatsWidgetSample.light/1 KinoTraceTest.StatsWidgetSample.heavy/1 KinoTraceTest.StatsWidgetSample.alloc/1)
    )
    |> Map.values()
    |> Enum.map(& &1.calls)
    |> Enum.sum()
  end

  test "unchanged figures send only a tick; new calls send a snapshot" do
    stats = start()
    {controller, _} = StatsController.init(stats, interval: 250, lifeline: false)
    Sample.in_process(fn -> Sample.light(1) end)

    {:ok, [{:broadcast, "snapshot", _}, _], controller} =
      StatsController.handle_info(controller, :refresh)

    {:ok, [{:broadcast, "tick", tick}, {:send_after, :refresh, 250}], controller} =
      StatsController.handle_info(controller, :refresh)

    assert tick.status == "running" and is_integer(tick.elapsed_us) and is_integer(tick.taken_at)

    Sample.in_process(fn -> Sample.light(2) end)

    {:ok, [{:broadcast, "snapshot", %{snapshot: s}}, _], _} =
      StatsController.handle_info(controller, :refresh)

    assert Enum.find(s.rows, &(&1.key == "KinoTraceTest.StatsWidgetSample.light/1")).calls == 2
  end

  test "reset zeroes the counters and broadcasts the empty table" do
    stats = start()
    {controller, _} = StatsController.init(stats, lifeline: false)
    workload()

    {[{:broadcast, "snapshot", %{snapshot: s}}], controller} =
      StatsController.handle_event(controller, "reset", %{})

    assert s.rows == [] and s.totals.calls == 0

    Sample.in_process(fn -> Sample.light(1) end)

    {[{:broadcast, "snapshot", %{snapshot: s}}], _} =
      StatsController.handle_event(controller, "refresh", %{})

    assert [%{key: "KinoTraceTest.StatsWidgetSample.light/1", calls: 1}] = s.rows
  end

  test "stop ends the session, keeps the last figures and stops reading" do
    stats = start()
    {controller, _} = StatsController.init(stats, lifeline: false)
    workload()

    {effects, controller} = StatsController.handle_event(controller, "stop", %{})

    assert [
             {:broadcast, "snapshot", _},
             {:broadcast, "status", %{status: "stopped", snapshot: last}}
           ] = effects

    assert last.totals.calls >= 202
    refute Process.alive?(stats.server)

    assert {:ok, [], ^controller} = StatsController.handle_info(controller, :refresh)
    assert {[], ^controller} = StatsController.handle_event(controller, "reset", %{})
    assert StatsController.handle_info(controller, :other) == :unknown
  end

  test "a session whose owner exited renders as stopped" do
    parent = self()

    Sample.in_process(fn ->
      send(parent, {:stats, Kino.Trace.stats([@sample], pids: :new)})
    end)

    assert_receive {:stats, stats}
    ref = Process.monitor(stats.server)
    assert_receive {:DOWN, ^ref, _, _, _}, 5_000

    {controller, []} = StatsController.init(stats, lifeline: false)
    {payload, _} = StatsController.connect(controller)
    assert payload.status == "stopped"
    assert payload.snapshot.rows == []
  end

  test "the session ends when the process holding the widget exits" do
    stats = start()
    holder = spawn(fn -> receive(do: (:never -> :ok)) end)
    ref = Process.monitor(stats.server)

    KinoTrace.Widget.Lifeline.start(stats, holder)
    Process.exit(holder, :kill)
    assert_receive {:DOWN, ^ref, :process, _, _}, 2_000
  end
end
