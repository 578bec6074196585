defmodule KinoTrace.Widget.FlameLatencyTest do
  # The trace widget's Flame tab and latency columns on the Elixir side (issue 38.1 and
  # 38.3): real traces through the real controller, every payload checked against the
  # wire's schema.
  use ExUnit.Case, async: false

  alias KinoTrace.Widget.{Controller, FlamePayload}
  alias KinoTraceTest.Sample.Timing
  alias KinoTraceTest.{WidgetDriver, WireSchema}

  @moduletag timeout: 60_000

  doctest FlamePayload
  doctest KinoTrace.Widget.LatencyPayload

  @run "KinoTraceTest.Sample.Timing.run/0"
  @a "KinoTraceTest.Sample.Timing.a/0"
  @b "KinoTraceTest.Sample.Timing.b/1"
  @leaf "KinoTraceTest.Sample.Timing.leaf/0"

  # the trace's events are all in the widget's store: `n` returns pushed
  defp returns(sent, n) do
    rows = WidgetDriver.rows(sent)
    Enum.count(rows, &(&1.kind == "return")) >= n
  end

  # node index -> {path of frames, total, self}
  defp nodes(%{frames: frames, nodes: flat}) do
    flat
    |> Enum.chunk_every(4)
    |> Enum.with_index()
    |> Enum.reduce(%{}, fn {[parent, frame, total, self], i}, acc ->
      path = if parent < 0, do: [], else: elem(acc[parent], 0) ++ [Enum.at(frames, frame)]
      Map.put(acc, i, {path, total, self})
    end)
    |> Map.new(fn {_i, {path, total, self}} -> {path, {total, self}} end)
  end

  test "get_flame: the call tree of the events kept, totals and self times, all processes or one" do
    trace = Kino.Trace.calls(["KinoTraceTest.Sample.Timing"])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)
    # two processes run the nested pattern: the same stacks, added up
    [one, _two] =
      for _ <- 1..2,
          do:
            Task.async(fn ->
              Timing.run()
              self()
            end)
            |> Task.await()

    {controller, _} = WidgetDriver.drive(controller, &returns(&1, 16))

    {[{:reply, "flame", all}], controller} = Controller.handle_event(controller, "get_flame", %{})
    WireSchema.check_event!("flame", all)
    tree = nodes(all)

    assert Map.keys(tree) |> Enum.sort() ==
             Enum.sort([[], [@run], [@run, @a], [@run, @a, @leaf], [@run, @b], [@run, @b, @leaf]])

    # totals are the calls' inclusive times; a node's self is its total less its children's
    {root, 0} = tree[[]]
    {run, run_self} = tree[[@run]]
    assert root == run
    {a, _} = tree[[@run, @a]]
    {b, _} = tree[[@run, @b]]
    assert run_self == run - a - b
    # each run waits at least 9 ms in all (1 + 2 x (1 + 1) + 1 + 2)
    assert run >= 2 * 8_000_000
    assert {all.process, length(all.processes), all.omitted, all.no_return} == {nil, 2, 0, []}

    {[{:reply, "flame", mine}], _} =
      Controller.handle_event(controller, "get_flame", %{"process" => inspect(one)})

    assert mine.process == inspect(one)
    {just_one, _} = nodes(mine)[[@run]]
    assert just_one < run and just_one >= 8_000_000

    # a pid that reads as no process of the trace: an empty tree; a request that is no
    # text: all processes (and no atom or term is made of either)
    {[{:reply, "flame", none}], _} =
      Controller.handle_event(controller, "get_flame", %{"process" => "#PID<0.1.0>"})

    WireSchema.check_event!("flame", none)
    assert {none.process, none.nodes} == {"#PID<0.1.0>", [-1, -1, 0, 0]}

    {[{:reply, "flame", odd}], _} =
      Controller.handle_event(controller, "get_flame", %{"process" => 12})

    assert {odd.process, odd.nodes} == {nil, all.nodes}
  end

  test "a tail-call loop traced without returns: its calls are siblings marked [no return], never a deep stack" do
    capture = Kino.Trace.capture(["KinoTraceTest.Sample.Timing"], fn -> Timing.looping(50) end)
    flame = FlamePayload.build(capture.events)
    tree = nodes(flame)
    depth = tree |> Map.keys() |> Enum.map(&length/1) |> Enum.max()
    assert depth <= 2, "a stack #{depth} deep: #{inspect(Map.keys(tree))}"

    assert Enum.map(flame.no_return, &Enum.at(flame.frames, &1))
           |> Enum.all?(&(&1 =~ "[no return]"))
  end

  test "stacks past max_nodes are left out and their time counted" do
    capture = Kino.Trace.capture(["KinoTraceTest.Sample.Timing"], fn -> Timing.run() end)
    full = FlamePayload.build(capture.events)
    cut = FlamePayload.build(capture.events, nil, max_nodes: 3)
    assert div(length(cut.nodes), 4) - 1 <= 3 and cut.omitted > 0
    assert Enum.at(cut.nodes, 2) + cut.omitted == Enum.at(full.nodes, 2)
  end

  test "latency: a widget started after the calls has those of the history it shows" do
    trace = Kino.Trace.calls(["KinoTraceTest.Sample.Timing.leaf/0"])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    Task.async(fn -> for _ <- 1..3, do: Timing.leaf() end) |> Task.await()
    {controller, _} = Controller.init(trace, lifeline: false)
    {:ok, effects, _} = Controller.handle_info(controller, :tick)

    assert [%{rows: [%{mfa: @leaf, latency: %{count: 3}}]}] =
             for({:broadcast, "latency", p} <- effects, do: p)
  end

  test "latency: pushed at a tick when calls came, by function and process; nothing new, no push; clear resets" do
    trace = Kino.Trace.calls(["KinoTraceTest.Sample.Timing.leaf/0"])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)

    pid =
      Task.async(fn ->
        for _ <- 1..5, do: Timing.leaf()
        self()
      end)
      |> Task.await()

    {controller, _} = WidgetDriver.drive(controller, &returns(&1, 5))

    {effects, controller} = WidgetDriver.info(Controller, controller, :tick)
    assert [%{rows: [row], rows_omitted: 0}] = for({:broadcast, "latency", p} <- effects, do: p)
    assert {row.mfa, row.latency.count, row.latency.unknown} == {@leaf, 5, 0}
    assert row.latency.p50 >= 1000 * (1 - KinoTrace.Latency.Histogram.relative_error())
    assert row.latency.max >= row.latency.p99 and row.latency.p99 >= row.latency.p50
    assert [%{pid: p, latency: %{count: 5}}] = row.processes
    assert p == inspect(pid)

    {:ok, effects, controller} = Controller.handle_info(controller, :tick)
    assert for({:broadcast, "latency", p} <- effects, do: p) == []

    # a browser that connects gets them at the next tick
    {_, controller} = Controller.connect(controller)
    {:ok, effects, controller} = Controller.handle_info(controller, :tick)
    assert [%{rows: [_]}] = for({:broadcast, "latency", p} <- effects, do: p)

    {_, controller} = Controller.handle_event(controller, "clear", %{})
    {_, controller} = Controller.connect(controller)
    {:ok, effects, _} = Controller.handle_info(controller, :tick)
    assert [%{rows: []}] = for({:broadcast, "latency", p} <- effects, do: p)
  end
end
