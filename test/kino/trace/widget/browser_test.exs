defmodule Kino.Trace.Widget.BrowserTest do
  # Runs a real trace on a sample workload, builds the widget's payloads with the real
  # Elixir code (KinoTrace.Widget.Controller and Payload), writes them to a JSON file
  # and runs the widget in headless Chromium on them (test/browser/widget.test.mjs).
  #
  # Needs Node.js, assets/node_modules (`npm ci` in assets/) and /usr/bin/chromium:
  # tagged :browser.
  use ExUnit.Case, async: false

  alias KinoTraceTest.Browser

  alias KinoTrace.Widget.{Controller, Payload, StatsController, Store}
  alias KinoTraceTest.{AgentSample, SequenceSample, StatsWidgetSample}

  @moduletag :browser
  @moduletag timeout: 300_000

  test "the widget works in Chromium on payloads from a real trace" do
    trace =
      Kino.Trace.calls([
        "SampleApp.Cache.fetch/2",
        "SampleApp.Cache.put/3",
        "SampleApp.Repo.get/2",
        "SampleApp.Repo.delete/1"
      ])

    on_exit(fn -> Kino.Trace.stop(trace) end)

    # small pushes, so the browser gets several
    {controller, _effects} = Controller.init(trace, max_batch: 64)
    {connect, controller} = Controller.connect(controller)

    run_workload()
    {controller, pushes} = Browser.collect(controller)
    assert returns(pushes) > 100

    # A pattern edit with one bad line (a typo), as the widget's textarea sends it.
    lines = [
      "SampleApp.Cache.fetch/2",
      "SampleApp.Repo.gte/2",
      "SampleApp.Repo.get(:users, id) when id > 2"
    ]

    {[{:broadcast, "patterns", pattern_reply}], controller} =
      Controller.handle_event(controller, "set_patterns", %{"patterns" => lines})

    assert [%{ok: true}, %{ok: false}, %{ok: true}] = pattern_reply.results

    # Full terms for every kept event, as the "get_term" replies would be.
    terms =
      for row <- Store.rows(controller.store), into: %{} do
        {:ok, event} = Store.fetch(controller.store, row.id)
        {to_string(row.id), Payload.full(event)}
      end

    # The server's answers to the completion requests the browser test makes as it
    # types these lines, one per character.
    completions =
      for line <- ["SampleApp.Cache.fe", ":ets.ins", "Enum.map_join(", "SampleApp.Re"],
          n <- 1..String.length(line),
          text = String.slice(line, 0, n),
          into: %{} do
        {[{:reply, "completions", reply}], _} =
          Controller.handle_event(controller, "complete", %{"text" => text, "seq" => 0})

        {text, Map.delete(reply, :seq)}
      end

    assert Enum.map(completions["SampleApp.Cache.fe"].items, & &1.insert) == [
             "fetch/1",
             "fetch/2",
             "fetch_all/2"
           ]

    fixture = %{
      connect: connect,
      batches: for({:broadcast, "events", payload} <- pushes, do: payload),
      pattern_lines: lines,
      pattern_reply: pattern_reply,
      terms: terms,
      completions: completions,
      screenshot: Path.join(Browser.screenshot_dir(), "screenshot.png"),
      screenshot_completion: Path.join(Browser.screenshot_dir(), "screenshot-completion.png")
    }

    Browser.run("widget.test.mjs", fixture)
  end

  test "message rows, the sequence tab and the stats widget work in Chromium on real traces" do
    # 1. A ping-pong of 250 rounds (500 messages), with the server's reply/1 calls and
    #    its lifecycle, through the real controller.
    rounds = 250
    sample = SequenceSample.start(rounds)

    trace = SequenceSample.trace(sample)

    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _effects} = Controller.init(trace, max_batch: 256)
    {connect, controller} = Controller.connect(controller)
    SequenceSample.go(sample)
    assert_receive {:sequence_done, _}, 10_000
    {controller, pushes} = Browser.collect(controller)

    {controller, pushes} =
      Browser.collect_more(controller, pushes, fn rows ->
        Enum.any?(rows, &(&1.kind == "exit"))
      end)

    rows = for {:broadcast, "events", %{events: events}} <- pushes, row <- events, do: row
    assert Enum.count(rows, &(&1.kind == "send")) >= 2 * rounds

    terms =
      for row <- Store.rows(controller.store), into: %{} do
        {:ok, event} = Store.fetch(controller.store, row.id)
        {to_string(row.id), Payload.full(event)}
      end

    # The "Copy as Mermaid" reply for every kept event (the browser asks for the rows in
    # view, which only it knows: the check there is that it asks for those, copies the
    # reply and that Mermaid parses it).
    ids = Enum.map(Store.rows(controller.store), & &1.id)

    {[{:reply, "mermaid", mermaid}], _controller} =
      Controller.handle_event(controller, "get_mermaid", %{"ids" => ids})

    assert mermaid.source =~ "left out (max_messages: 200)"

    # 2. A stats session on a small workload in three processes, through the real
    #    stats controller: the empty start, then a refresh with the figures.
    stats = Kino.Trace.stats(["KinoTraceTest.StatsWidgetSample"], pids: :new)
    on_exit(fn -> Kino.Trace.stop(stats) end)
    {stats_controller, _} = StatsController.init(stats, lifeline: false)
    {stats_connect, stats_controller} = StatsController.connect(stats_controller)

    workers =
      for {n, ms, cells} <- [{300, 2, 20_000}, {1_200, 6, 2_000}, {50, 1, 80_000}] do
        StatsWidgetSample.in_process(fn ->
          for i <- 1..n, do: StatsWidgetSample.light(i)
          StatsWidgetSample.heavy(ms)
          StatsWidgetSample.alloc(cells)
        end)
      end

    {:ok, [{:broadcast, "snapshot", stats_update} | _], _} =
      StatsController.handle_info(stats_controller, :refresh)

    assert length(stats_update.snapshot.rows) >= 4

    fixture = %{
      messages: %{
        connect: connect,
        batches: for({:broadcast, "events", payload} <- pushes, do: payload),
        terms: terms,
        mermaid: mermaid,
        ping: inspect(sample.ping),
        pong: inspect(sample.pong),
        rounds: rounds
      },
      stats: %{
        connect: stats_connect,
        update: stats_update,
        workers: Enum.map(workers, &inspect/1)
      },
      screenshots: %{
        sequence: Path.join(Browser.screenshot_dir(), "screenshot-sequence.png"),
        messages: Path.join(Browser.screenshot_dir(), "screenshot-messages.png"),
        stats: Path.join(Browser.screenshot_dir(), "screenshot-stats.png")
      }
    }

    Browser.run("messages.test.mjs", fixture)
  end

  test "GenServer replies and cut structs from real traces, as a Livebook user sees them" do
    # issue 23 item 4: Kino.Trace.messages([:counter]) on a named Agent called twice, by
    # a process not traced, then by one traced too
    replies = %{
      untraced: replies_fixture(:kino_trace_browser_counter, false),
      # an Elixir module's name: the lane reads as Mermaid writes it (issue 39 item 7)
      traced: replies_fixture(KinoTraceTest.BrowserCounter, true)
    }

    # issue 23 item 5: a function taking a struct with more fields than :max_items, of a
    # module this node has and of one it does not
    trace = Kino.Trace.calls(["KinoTraceTest.CutStruct.take/1"], max_items: 5)
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _effects} = Controller.init(trace)
    {connect, controller} = Controller.connect(controller)

    Task.async(fn ->
      KinoTraceTest.CutStruct.take(KinoTraceTest.CutStruct.new())
      KinoTraceTest.CutStruct.take(KinoTraceTest.CutStruct.unknown())
    end)
    |> Task.await()

    {controller, pushes} = Browser.collect(controller)

    {controller, pushes} =
      Browser.collect_more(
        controller,
        pushes,
        &(Enum.count(&1, fn row -> row.kind == "return" end) >= 2)
      )

    structs = %{
      connect: connect,
      batches: for({:broadcast, "events", payload} <- pushes, do: payload),
      terms: terms(controller),
      # how each reads: the struct, with the fields the tracer kept, and a cut mark
      shown:
        for(
          %{kind: "call", id: id} <- Store.rows(controller.store),
          {:ok, %{args: [%Kino.Trace.Cut{kind: :map, value: kept}]}} <- [
            Store.fetch(controller.store, id)
          ],
          do: KinoTraceTest.CutStruct.shown(kept)
        )
    }

    assert length(structs.shown) == 2

    Browser.run("real_use.test.mjs", %{replies: replies, structs: structs, stats: stats_fixture()})
  end

  # issue 39 item 5: Pause froze the view by pausing the trace, so the calls made
  # meanwhile were never recorded. Now the browser's Pause asks nothing of the server: the
  # pushes of a click on it, replayed through the real controller, leave the trace
  # recording, and what it records reaches the paused widget, which shows it on Resume.
  # The trace's own pause is in the menu beside it: its pushes pause recording.
  test "Pause freezes the view while the trace records; the menu beside it pauses tracing" do
    trace = Kino.Trace.calls(["SampleApp.Cache.fetch/2"])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _effects} = Controller.init(trace, lifeline: false)
    {connect, controller} = Controller.connect(controller)

    pushed_out = Path.join(Browser.tmp_dir(), "pushed.json")

    Browser.run("pause.test.mjs", %{phase: "click", connect: connect, pushed_out: pushed_out})
    controller = replay(controller, pushed_out)
    assert Kino.Trace.info(trace).status == :running

    calls = 20
    fetch_all(calls)
    {controller, pushes} = Browser.collect(controller)

    {controller, pushes} =
      Browser.collect_more(
        controller,
        pushes,
        &(Enum.count(&1, fn row -> row.kind == "call" end) >= calls)
      )

    batches = for {:broadcast, "events", payload} <- pushes, do: payload
    assert batches |> Enum.flat_map(& &1.events) |> Enum.count(&(&1.kind == "call")) == calls

    Browser.run("pause.test.mjs", %{
      phase: "view",
      connect: connect,
      batches: batches,
      calls: calls,
      pushed_out: pushed_out
    })

    _controller = replay(controller, pushed_out)
    assert %{status: :paused, accepted: accepted} = Kino.Trace.info(trace)
    fetch_all(calls)
    assert Kino.Trace.info(trace).accepted == accepted
  end

  # What the browser pushed (the harness's record), through the controller as Kino would.
  defp replay(controller, pushed_out) do
    pushed_out
    |> File.read!()
    |> JSON.decode!()
    |> Enum.reduce(controller, fn %{"event" => event, "payload" => payload}, controller ->
      {_effects, controller} = Controller.handle_event(controller, event, payload || %{})
      controller
    end)
  end

  defp fetch_all(n) do
    Task.async(fn -> for id <- 1..n, do: SampleApp.Cache.fetch(:pause, id) end) |> Task.await()
  end

  # issue 23 item 2: Kino.Trace.stats(["Enum"]) open beside its own busy stats widget (the
  # widget's process, where Kino runs the controller, refreshing again and again) and a
  # user's process calling Enum.map/2: the widget's own calls are in no row.
  defp stats_fixture do
    stats = Kino.Trace.stats(["Enum"])
    on_exit(fn -> Kino.Trace.stop(stats) end)
    me = self()

    widget =
      spawn_link(fn ->
        {controller, _} = StatsController.init(stats, lifeline: false)
        {connect, controller} = StatsController.connect(controller)
        send(me, {:widget, self(), connect})

        receive do
          :refresh ->
            # the last snapshot of 20 refreshes (one with nothing new is a "tick")
            {update, _} =
              Enum.reduce(1..20, {nil, controller}, fn _, {update, c} ->
                {:ok, effects, c} = StatsController.handle_info(c, :refresh)

                {Enum.find_value(
                   effects,
                   update,
                   &(match?({:broadcast, "snapshot", _}, &1) && elem(&1, 2))
                 ), c}
              end)

            send(me, {:update, update})
        end
      end)

    assert_receive {:widget, ^widget, connect}

    user =
      Task.async(fn ->
        for i <- 1..50, do: Enum.map([i, i + 1], &(&1 * 2))
        # two functions the compiler made in Enum.reduce/3 (issue 39 item 10)
        for i <- 1..3, do: {Enum.reduce([i, 2], 0, &+/2), Enum.reduce(MapSet.new([i]), 0, &+/2)}
        self()
      end)
      |> Task.await()

    send(widget, :refresh)
    assert_receive {:update, update}, 10_000
    rows = update.snapshot.rows
    map = Enum.find(rows, &(&1.key == "Enum.map/2"))
    assert map, "no Enum.map/2 row: #{inspect(Enum.map(rows, & &1.key))}"
    assert inspect(user) in Enum.map(map.processes, & &1.pid)
    %{connect: connect, update: update, widget: inspect(widget), user: inspect(user)}
  end

  defp replies_fixture(name, caller_traced?) do
    agent = AgentSample.start(name)
    caller = AgentSample.caller(name)
    on_exit(fn -> AgentSample.stop(agent, caller) end)
    trace = Kino.Trace.messages(if caller_traced?, do: [name, caller], else: [name])
    on_exit(fn -> Kino.Trace.stop(trace) end)

    {controller, _effects} = Controller.init(trace)
    {connect, controller} = Controller.connect(controller)
    [0, 1] = AgentSample.go(caller)
    {controller, pushes} = Browser.collect(controller)
    replied = if caller_traced?, do: "receive", else: "send"
    # a reply reads by what it carries (issue 39 item 8)
    reply? = &(&1.kind == replied and &1.data =~ ~r/^reply /)

    {controller, pushes} =
      Browser.collect_more(controller, pushes, &(Enum.count(&1, reply?) >= 2))

    %{
      connect: connect,
      batches: for({:broadcast, "events", payload} <- pushes, do: payload),
      terms: terms(controller),
      agent_name: KinoTrace.Render.process_name(name),
      mermaid: Kino.Trace.to_mermaid(Kino.Trace.events(trace, 1000)),
      agent: inspect(agent),
      caller: inspect(caller),
      # the test process starts the caller and is told when it is done
      parent: inspect(self())
    }
  end

  defp terms(controller) do
    for row <- Store.rows(controller.store), into: %{} do
      {:ok, event} = Store.fetch(controller.store, row.id)
      {to_string(row.id), Payload.full(event)}
    end
  end

  # A small app at work: several processes reading through a cache, misses, a
  # not-found, exceptions raised out of nested calls, evictions.
  defp run_workload do
    tasks =
      for worker <- 1..4 do
        Task.async(fn ->
          for id <- 1..6 do
            SampleApp.Cache.fetch(:users, id)
            SampleApp.Cache.fetch(:users, id)
          end

          SampleApp.Cache.fetch(:orders, 0)
          SampleApp.Cache.fetch_all(:orders, [worker, worker + 10])

          try do
            SampleApp.Cache.fetch(:users, -worker)
          rescue
            ArgumentError -> :ok
          end

          # an Erlang error: {:error, :function_clause} (issue 39 item 9)
          if worker == 1 do
            try do
              apply(SampleApp.Repo, :delete, [:everything])
            rescue
              FunctionClauseError -> :ok
            end
          end

          SampleApp.Cache.evict(:users, worker)
        end)
      end

    Task.await_many(tasks)
  end

  defp returns(pushes) do
    for {:broadcast, "events", %{events: rows}} <- pushes,
        row <- rows,
        row.kind in ["return", "exception"],
        reduce: 0 do
      n -> n + 1
    end
  end
end
