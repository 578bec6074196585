defmodule Kino.Trace.Widget.ViewsBrowserTest do
  # Issue 25, as a Livebook user sees the widget: the header of a trace of messages or
  # processes alone (no call-pattern editor), the sequence tab of a trace of calls alone,
  # a sleep that is no message, and switching tabs during a flood. Real traces through
  # the real controller; test/browser/views.test.mjs runs the widget on them in
  # headless Chromium at 1 000 and 600 px.
  #
  # Needs Node.js, assets/node_modules and /usr/bin/chromium: tagged :browser.
  use ExUnit.Case, async: false

  alias KinoTraceTest.Browser

  alias KinoTrace.Widget.{Controller, Store}

  @moduletag :browser
  @moduletag timeout: 300_000

  test "the widget shows what each trace has, in Chromium" do
    fixture = %{
      calls: calls_fixture(),
      mixed: mixed_fixture(),
      messages: messages_fixture(),
      processes: processes_fixture(),
      screenshots: %{
        sequence_calls: Path.join(Browser.screenshot_dir(), "screenshot-sequence-calls-only.png"),
        messages_header: Path.join(Browser.screenshot_dir(), "screenshot-messages-only.png")
      }
    }

    Browser.run("views.test.mjs", fixture)
  end

  # Issue 25, "tab switch under load": a real flood (processes calling a traced function
  # in a loop, as fast as this machine goes) through the real controller, whose pushes the
  # browser replays at twice the controller's pace while tabs are switched.
  @tag timeout: 600_000
  test "switching tabs during a flood takes about as long as an idle switch, in Chromium" do
    trace = Kino.Trace.calls(["KinoTraceTest.Sample.Math.echo/1"])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)
    {connect, controller} = Controller.connect(controller)
    flooders = for _ <- 1..2, do: spawn(fn -> flood_loop(0) end)
    on_exit(fn -> Enum.each(flooders, &Process.exit(&1, :kill)) end)

    {_controller, batches} = collect(controller, trace, fn _rows -> false end, [], 30)
    Enum.each(flooders, &Process.exit(&1, :kill))
    Kino.Trace.stop(trace)

    assert length(batches) >= 30
    assert Enum.all?(batches, &(length(&1.events) > 0))
    rate = batches |> Enum.map(& &1.counters.rate) |> Enum.max()

    IO.puts(
      "flood: #{length(batches)} pushes, #{Enum.sum(Enum.map(batches, &length(&1.events)))} events, up to #{round(rate)} events/s traced"
    )

    Browser.run("flood.test.mjs", %{connect: connect, batches: batches, rate: rate})
  end

  defp flood_loop(i) do
    KinoTraceTest.Sample.Math.echo(i)
    flood_loop(i + 1)
  end

  # A trace of calls alone: the user's own process (a notebook cell's, busy) and three
  # tasks with one call each. (This process runs the controller, as the widget's own
  # process does in Livebook: kino_trace's, never traced.)
  defp calls_fixture do
    trace = Kino.Trace.calls(["SampleApp.Cache.fetch/2", "SampleApp.Repo.get/2"])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)
    {connect, controller} = Controller.connect(controller)

    user =
      Task.async(fn ->
        1..3
        |> Enum.map(fn n -> Task.async(fn -> SampleApp.Cache.fetch(:orders, n) end) end)
        |> Task.await_many()

        for id <- 1..5, do: SampleApp.Cache.fetch(:users, id)
        self()
      end)
      |> Task.await()

    {_controller, batches} =
      collect(controller, trace, &(Enum.count(&1, fn r -> r.kind == "return" end) >= 16))

    rows = Enum.flat_map(batches, & &1.events)
    assert Enum.all?(rows, &(&1.kind in ["call", "return", "exception"]))
    assert Enum.any?(rows, &(&1.pid == inspect(user)))
    %{connect: connect, batches: batches, user: inspect(user)}
  end

  # A trace of calls and messages: three tasks with one call each come first, then the
  # user's own process asks a server three times. The sequence tab draws the two that
  # talk first, not after the tasks' lanes (issue 25: the user's lane was off screen).
  defp mixed_fixture do
    server = spawn(fn -> serve(3) end)
    me = self()

    user =
      spawn(fn ->
        receive do: (:go -> :ok)

        for n <- 1..3 do
          send(server, {:get, self(), n})
          receive do: ({:reply, ^n} -> :ok)
        end

        send(me, :asked)
      end)

    trace = Kino.Trace.trace(calls: ["SampleApp.Cache.fetch/2"], messages: [user, server])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)
    {connect, controller} = Controller.connect(controller)

    1..3
    |> Enum.map(fn n -> Task.async(fn -> SampleApp.Cache.fetch(:orders, n) end) end)
    |> Task.await_many()

    {controller, calls} =
      collect(controller, trace, &(Enum.count(&1, fn r -> r.kind == "return" end) >= 3))

    send(user, :go)
    assert_receive :asked

    {_controller, messages} =
      collect(
        controller,
        trace,
        &(Enum.count(&1, fn r -> r.kind == "receive" and r.pid == inspect(user) end) >= 4)
      )

    %{connect: connect, batches: calls ++ messages, user: inspect(user), server: inspect(server)}
  end

  defp serve(0), do: :ok

  defp serve(n) do
    receive do: ({:get, from, i} -> send(from, {:reply, i}))
    serve(n - 1)
  end

  # A trace of messages alone, every message; the traced process also sleeps
  # (a receive...after that times out), which is no message. A user's
  # process sends it the jobs.
  defp messages_fixture do
    worker =
      spawn(fn ->
        receive do: ({:job, n, from} -> send(from, {:done, n}))
        # the workload: a traced receive...after that times out
        Process.sleep(5)
        receive do: ({:job, n, from} -> send(from, {:done, n}))
        receive do: (:stop -> :ok)
      end)

    trace = Kino.Trace.messages([worker])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)
    {connect, controller} = Controller.connect(controller)

    Task.async(fn ->
      send(worker, {:job, 1, self()})
      assert_receive {:done, 1}
      send(worker, {:job, 2, self()})
      assert_receive {:done, 2}
      send(worker, :stop)
    end)
    |> Task.await()

    {controller, batches} =
      collect(
        controller,
        trace,
        &Enum.any?(&1, fn r -> r.kind == "receive" and r.data == ":stop" end)
      )

    rows = Enum.flat_map(batches, & &1.events)
    assert Enum.count(rows, &(&1.kind == "send")) == 2
    assert Enum.count(rows, &(&1.kind == "receive")) == 3
    refute Enum.any?(rows, &(&1.data == ":timeout"))

    ids = Enum.map(Store.rows(controller.store), & &1.id)

    {[{:reply, "mermaid", mermaid}], _} =
      Controller.handle_event(controller, "get_mermaid", %{"ids" => ids})

    refute mermaid.source =~ "timeout"

    %{connect: connect, batches: batches, mermaid: mermaid, worker: inspect(worker)}
  end

  # A trace of process events alone.
  defp processes_fixture do
    trace = Kino.Trace.processes(:new)
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)
    {connect, _controller} = Controller.connect(controller)
    %{connect: connect}
  end

  # The controller's pushes ("events" payloads) until `done?` accepts the rows so far, or
  # there are `pushes` of them: every trace batch and flush handled as the widget's
  # process would.
  defp collect(controller, trace, done?, batches \\ [], pushes \\ nil) do
    rows = Enum.flat_map(batches, & &1.events)

    if done?.(rows) or (pushes != nil and length(batches) >= pushes) do
      {controller, batches}
    else
      id = trace.id

      message =
        receive do
          {:kino_trace, ^id, _} = message -> message
          :flush -> :flush
        after
          10_000 -> flunk("the trace's events did not arrive: #{length(rows)} rows so far")
        end

      {:ok, effects, controller} = Controller.handle_info(controller, message)

      pushed =
        Enum.flat_map(effects, fn
          {:send_after, :flush, _ms} ->
            send(self(), :flush)
            []

          {:broadcast, "events", payload} ->
            [payload]

          _ ->
            []
        end)

      collect(controller, trace, done?, batches ++ pushed, pushes)
    end
  end
end
