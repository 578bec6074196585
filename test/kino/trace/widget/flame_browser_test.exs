defmodule Kino.Trace.Widget.FlameBrowserTest do
  # Issue 38 in headless Chromium: the Flame tab (renders, zoom on click, search
  # highlight, hover numbers, a process picked, 100 000 distinct stacks under 100 ms an
  # interaction) and the latency columns of the trace widget's Stats tab (with its links
  # to the slow calls the trace keeps, `slowest: 3`) and of the stats widget (with each
  # process's distribution in its drill-down). Payloads are made by the real controllers from real traces (the 100 000
  # stacks by the real KinoTrace.Widget.FlamePayload from events of that shape);
  # test/browser/flame.test.mjs drives the widgets on them.
  #
  # Needs Node.js, assets/node_modules and /usr/bin/chromium: tagged :browser.
  use ExUnit.Case, async: false

  alias Kino.Trace.Event
  alias KinoTrace.Widget.{Controller, FlamePayload, StatsController}
  alias KinoTraceTest.Browser
  alias KinoTraceTest.Sample.Timing

  @moduletag :browser
  @moduletag timeout: 300_000

  test "the Flame tab and the latency columns, in Chromium" do
    # (a capture of its own, before the widget's trace of the same functions starts)
    no_return = no_return_flame()
    trace = Kino.Trace.calls(["KinoTraceTest.Sample.Timing"], slowest: 3)
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)
    {connect, controller} = Controller.connect(controller)

    workers =
      for n <- [1, 3] do
        Task.async(fn ->
          Process.register(self(), :"flame_worker_#{n}")
          for _ <- 1..n, do: Timing.run()
          Timing.looping(20)
          self()
        end)
      end
      |> Task.await_many()

    {controller, pushes} =
      Browser.collect_more(
        controller,
        [],
        &(Enum.count(&1, fn r -> r.kind == "return" end) >= 8 * 4 + 2 * 1)
      )

    {[{:reply, "flame", flame}], controller} =
      Controller.handle_event(controller, "get_flame", %{})

    per_process =
      Map.new(workers, fn pid ->
        {[{:reply, "flame", one}], _} =
          Controller.handle_event(controller, "get_flame", %{"process" => inspect(pid)})

        {inspect(pid), one}
      end)

    {:ok, effects, _} = Controller.handle_info(controller, :tick)
    [latency] = for {:broadcast, "latency", payload} <- effects, do: payload

    # the slow calls each Stats tab row links to, as the controller answers them
    slow_calls =
      Map.new(latency.rows, fn %{mfa: mfa} ->
        {[{:reply, "slow_calls", reply}], _} =
          Controller.handle_event(controller, "get_slow_calls", %{"mfa" => mfa})

        {mfa, reply}
      end)

    # b/1 ran 4 times (1 + 3 runs): its 3 slowest kept, each with its leaves beneath it
    b = latency.rows |> Enum.find(&(&1.mfa == "KinoTraceTest.Sample.Timing.b/1"))
    assert b.slow == 3
    assert [%{events: [_, _, _, _, _, _]} | _] = slow_calls[b.mfa].slowest

    %{
      connect: connect,
      batches: for({:broadcast, "events", payload} <- pushes, do: payload),
      flame: flame,
      per_process: per_process,
      latency: latency,
      slow_calls: slow_calls,
      no_return: no_return,
      big: big_flame(),
      stats: stats_fixture(),
      screenshots: %{
        flame: Path.join(Browser.screenshot_dir(), "screenshot-flame.png"),
        latency: Path.join(Browser.screenshot_dir(), "screenshot-latency.png"),
        slow_calls: Path.join(Browser.screenshot_dir(), "screenshot-slow-calls.png")
      }
    }
    |> then(&Browser.run("flame.test.mjs", &1))
  end

  # Timing.run/0's call trees with run's return left out (a call still running): the
  # frame `run/0 [no return]` over the calls it made.
  defp no_return_flame do
    capture = Kino.Trace.capture(["KinoTraceTest.Sample.Timing"], fn -> Timing.run() end)
    open = Enum.reject(capture.events, &(&1.kind == :return and &1.function == :run))
    payload = FlamePayload.build(open)
    assert [frame] = Enum.map(payload.no_return, &Enum.at(payload.frames, &1))
    assert frame == "KinoTraceTest.Sample.Timing.run/0 [no return]"
    payload
  end

  # A stats session with latency: true, through the real stats controller.
  defp stats_fixture do
    stats = Kino.Trace.stats(["KinoTraceTest.Sample.Timing"], pids: :new, latency: true)
    on_exit(fn -> Kino.Trace.stop(stats) end)
    {stats_controller, _} = StatsController.init(stats, lifeline: false)
    {connect, stats_controller} = StatsController.connect(stats_controller)

    waits = [
      List.duplicate(1, 12) ++ List.duplicate(2, 4) ++ [5, 5],
      List.duplicate(1, 6) ++ List.duplicate(3, 3) ++ [20]
    ]

    for waits <- waits do
      Task.async(fn -> for ms <- waits, do: Timing.wait(ms) end)
    end
    |> Task.await_many()

    # (the session's latency trace delivers what is queued before it answers)
    {:ok, [{:broadcast, "snapshot", update} | _], _} =
      StatsController.handle_info(stats_controller, :refresh)

    wait = Enum.find(update.snapshot.rows, &(&1.function == "wait"))
    assert %{count: 28, unknown: 0} = wait.latency
    # each process's own distribution, for the drill-down
    assert wait.processes |> Enum.map(& &1.latency.count) |> Enum.sort() == [10, 18]
    %{connect: connect, update: update}
  end

  # 100 000 distinct stacks: the call trees of one process whose calls nest up to 16
  # deep over 400 functions, as events (a call and its return each), through the real
  # FlamePayload.
  defp big_flame do
    funs = for i <- 0..399, do: String.to_atom("f#{i}")
    pid = self()
    :rand.seed(:exsss, {38, 3, 100})
    events = roots(103_000, [], 1, funs, pid)
    payload = FlamePayload.build(Enum.reverse(events))
    assert div(length(payload.nodes), 4) - 1 >= 100_000
    payload
  end

  defp roots(left, events, _id, _funs, _pid) when left <= 0, do: events

  defp roots(left, events, id, funs, pid) do
    {events, id, left, _d} = grow(left, 0, events, id, funs, pid)
    roots(left, events, id, funs, pid)
  end

  # Calls in preorder, each return after its children's, its duration theirs plus a
  # self time: {events newest first, next id, calls left, duration}.
  defp grow(left, depth, events, id, funs, pid) do
    children = if depth >= 16 or left <= 1, do: 0, else: Enum.random(1..4)
    fun = Enum.at(funs, :rand.uniform(400) - 1)

    call = %Event{
      id: id,
      kind: :call,
      pid: pid,
      module: M,
      function: fun,
      arity: depth,
      depth: depth
    }

    {events, next, left, below} =
      Enum.reduce(1..children//1, {[call | events], id + 1, left - 1, 0}, fn
        _, {events, next, left, below} when left <= 0 ->
          {events, next, left, below}

        _, {events, next, left, below} ->
          {events, next, left, d} = grow(left, depth + 1, events, next, funs, pid)
          {events, next, left, below + d}
      end)

    duration = below + 1_000 + :rand.uniform(1_000)

    ret = %Event{
      id: next,
      kind: :return,
      pid: pid,
      module: M,
      function: fun,
      arity: depth,
      depth: depth,
      call_id: id,
      duration: duration
    }

    {[ret | events], next + 1, left, duration}
  end
end
