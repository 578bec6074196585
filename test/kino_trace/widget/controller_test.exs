defmodule KinoTrace.Widget.ControllerTest do
  # Real traces: the controller follows a live trace session, as the widget does.
  use ExUnit.Case, async: false

  alias KinoTrace.Widget.Controller
  alias KinoTraceTest.{AgentSample, WireSchema}

  @moduletag timeout: 30_000

  # The test process subscribes (so it is never traced): workloads run in a task.
  defp run(fun), do: Task.async(fun) |> Task.await()

  # Processes messages like the widget's process does (carrying out :send_after) and
  # collects what the controller sends to browsers, until `done?` holds for them.
  defp drive(controller, done?, timeout \\ 5_000) do
    deadline = System.monotonic_time(:millisecond) + timeout
    drive(controller, done?, [], deadline)
  end

  defp drive(controller, done?, sent, deadline) do
    if done?.(sent) do
      {controller, sent}
    else
      wait = max(deadline - System.monotonic_time(:millisecond), 0)

      receive do
        message ->
          case Controller.handle_info(controller, message) do
            {:ok, effects, controller} ->
              drive(controller, done?, sent ++ perform(effects), deadline)

            :unknown ->
              drive(controller, done?, sent, deadline)
          end
      after
        wait -> flunk("timed out; sent so far: #{inspect(sent, limit: 5)}")
      end
    end
  end

  # Every push and reply follows the wire's schema (assets/wire.schema.json).
  defp perform(effects) do
    WireSchema.check_effects!(effects)

    Enum.flat_map(effects, fn
      {:send_after, message, ms} ->
        Process.send_after(self(), message, ms)
        []

      other ->
        [other]
    end)
  end

  defp rows(sent), do: for({:broadcast, "events", %{events: rows}} <- sent, row <- rows, do: row)

  defp has_row?(sent, call), do: Enum.any?(rows(sent), &(&1.call == call))

  setup do
    trace = Kino.Trace.calls(["SampleApp.Cache.fetch/2", "SampleApp.Repo.get/2"])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    %{trace: trace}
  end

  test "pushes rendered rows of a real workload", %{trace: trace} do
    {controller, [{:send_after, :tick, _}]} = Controller.init(trace)
    run(fn -> SampleApp.Cache.fetch(:users, 7) end)

    done? = fn sent -> Enum.count(rows(sent), &(&1.kind == "return")) >= 2 end
    {_controller, sent} = drive(controller, done?)
    rows = rows(sent)

    fetch = Enum.find(rows, &(&1.call == "SampleApp.Cache.fetch(:users, 7)"))
    get = Enum.find(rows, &(&1.call == "SampleApp.Repo.get(:users, 7)"))
    assert fetch.kind == "call" and fetch.depth == 0
    assert get.depth == 1
    assert fetch.pid == get.pid
    assert is_integer(fetch.time)

    returns = Enum.filter(rows, &(&1.kind == "return"))
    get_return = Enum.find(returns, &(&1.call_id == get.id))
    assert get_return.result == "{:ok, %{id: 7, table: :users}}"
    assert is_integer(get_return.duration)

    assert [{:broadcast, "events", %{counters: counters}} | _] = sent
    assert counters.status == "running"
    assert counters.events >= 1
  end

  test "coalesces many batches into few bounded pushes", %{trace: trace} do
    {controller, _} = Controller.init(trace, max_batch: 50)
    run(fn -> for i <- 1..400, do: SampleApp.Repo.get(:users, i) end)

    {_controller, sent} = drive(controller, fn s -> length(rows(s)) >= 800 end)
    pushes = for {:broadcast, "events", %{events: rows}} <- sent, do: length(rows)

    assert Enum.all?(pushes, &(&1 <= 50))
    assert Enum.sum(pushes) == 800
  end

  test "at most one flush is armed at a time", %{trace: trace} do
    {controller, _} = Controller.init(trace)
    id = trace.id

    event = %Kino.Trace.Event{
      id: 1_000_000,
      kind: :call,
      module: M,
      function: :f,
      arity: 0,
      args: []
    }

    {:ok, [{:send_after, :flush, _}], controller} =
      Controller.handle_info(controller, {:kino_trace, id, {:events, [event]}})

    {:ok, [], controller} =
      Controller.handle_info(controller, {:kino_trace, id, {:events, [%{event | id: 1_000_001}]}})

    {:ok, effects, _controller} = Controller.handle_info(controller, :flush)
    assert [{:broadcast, "events", %{events: [_, _]}}] = effects
  end

  test "a trace opened from a file renders its events, stopped, and pushes none twice", %{
    trace: trace
  } do
    run(fn -> SampleApp.Cache.fetch(:users, 5) end)
    KinoTraceTest.Helpers.trace_delivered(:all)
    :ok = Kino.Trace.flush(trace)

    path =
      Path.join(
        System.tmp_dir!(),
        "kino_trace_widget_#{System.unique_integer([:positive])}.ktrace"
      )

    :ok = Kino.Trace.save(trace, path)
    opened = Kino.Trace.open(path)
    File.rm!(path)

    {controller, _} = Controller.init(opened)
    {payload, controller} = Controller.connect(controller)
    assert payload.status == "stopped"
    assert "SampleApp.Cache.fetch/2" in payload.patterns
    assert Enum.any?(payload.events, &(&1.call == "SampleApp.Cache.fetch(:users, 5)"))

    # what subscribing delivered is what it already showed: its end comes, no row again
    {_controller, sent} =
      drive(controller, fn sent -> Enum.any?(sent, &match?({:broadcast, "status", _}, &1)) end)

    refute has_row?(sent, "SampleApp.Cache.fetch(:users, 5)")
    :ok = Kino.Trace.stop(opened)
  end

  test "a browser that connects later gets the recent rows", %{trace: trace} do
    run(fn -> SampleApp.Cache.fetch(:users, 3) end)
    # events that happened before the widget existed come from the trace's history
    KinoTraceTest.Helpers.trace_delivered(:all)
    :ok = Kino.Trace.flush(trace)
    {controller, _} = Controller.init(trace)
    {payload, _controller} = Controller.connect(controller)

    assert payload.status == "running"
    assert "SampleApp.Cache.fetch/2" in payload.patterns
    assert Enum.any?(payload.events, &(&1.call == "SampleApp.Cache.fetch(:users, 3)"))
    assert payload.counters.events >= 2

    # and those are not pushed a second time
    run(fn -> SampleApp.Repo.get(:users, 4) end)
    {_controller, sent} = drive(controller, &has_row?(&1, "SampleApp.Repo.get(:users, 4)"))
    refute has_row?(sent, "SampleApp.Cache.fetch(:users, 3)")
  end

  test "set_patterns applies the good lines and reports the bad ones", %{trace: trace} do
    {controller, _} = Controller.init(trace)

    {[{:broadcast, "patterns", payload}], controller} =
      Controller.handle_event(controller, "set_patterns", %{
        "patterns" => ["SampleApp.Repo.delete/1", "SampleApp.Nope.f/1"]
      })

    assert [
             %{input: "SampleApp.Repo.delete/1", ok: true},
             %{input: "SampleApp.Nope.f/1", ok: false, error: error}
           ] =
             payload.results

    assert error =~ "SampleApp.Nope"
    assert payload.patterns == Kino.Trace.patterns(trace)
    assert Enum.any?(payload.patterns, &(&1 =~ "delete"))

    run(fn ->
      SampleApp.Repo.get(:users, 5)
      SampleApp.Repo.delete(5)
    end)

    {_controller, sent} = drive(controller, &has_row?(&1, "SampleApp.Repo.delete(5)"))
    refute has_row?(sent, "SampleApp.Repo.get(:users, 5)")
  end

  describe "a set_patterns event too large" do
    # Refused as a whole, before parsing: a reply to the sender says why, and the
    # trace keeps its patterns.
    defp refused(trace, lines) do
      {controller, _} = Controller.init(trace)
      before = Kino.Trace.patterns(trace)

      assert {[{:reply, "patterns", payload}], ^controller} =
               Controller.handle_event(controller, "set_patterns", %{"patterns" => lines})

      assert payload.results == []
      assert payload.patterns == before
      assert Kino.Trace.patterns(trace) == before
      payload.error
    end

    test "too many lines", %{trace: trace} do
      lines = List.duplicate("SampleApp.Repo.delete/1", 501)
      assert refused(trace, lines) == "not applied: 501 patterns sent, at most 500 at once"
    end

    test "a line too long", %{trace: trace} do
      long = "SampleApp.Repo.get(" <> String.duplicate("x", 4_100) <> ")"

      assert refused(trace, ["SampleApp.Repo.delete/1", long]) ==
               "not applied: the pattern starting \"SampleApp.Repo.get(xxxxxxxxxxxxxxxxxxxxx...\" " <>
                 "is 4120 bytes long, at most 4096 bytes per pattern"
    end

    test "too many bytes in all", %{trace: trace} do
      lines = List.duplicate("SampleApp.Repo.get(" <> String.duplicate("x", 4_000) <> ")", 20)

      assert refused(trace, lines) ==
               "not applied: the patterns are 80400 bytes in all, at most 65536 at once"
    end

    test "the largest event allowed is applied", %{trace: trace} do
      {controller, _} = Controller.init(trace)
      lines = List.duplicate("SampleApp.Repo.delete/1", 500)

      assert {[{:broadcast, "patterns", payload}], _controller} =
               Controller.handle_event(controller, "set_patterns", %{"patterns" => lines})

      assert length(payload.results) == 500
      assert Enum.uniq(Kino.Trace.patterns(trace)) == ["SampleApp.Repo.delete/1"]
    end
  end

  test "pause, resume and stop change the status", %{trace: trace} do
    {controller, _} = Controller.init(trace)

    status? = fn status ->
      fn sent -> Enum.any?(sent, &match?({:broadcast, "status", %{status: ^status}}, &1)) end
    end

    {[], controller} = Controller.handle_event(controller, "pause", %{})
    {controller, _} = drive(controller, status?.("paused"))
    run(fn -> SampleApp.Repo.get(:users, 9) end)

    {[], controller} = Controller.handle_event(controller, "resume", %{})
    {controller, _} = drive(controller, status?.("running"))
    run(fn -> SampleApp.Repo.get(:users, 10) end)
    {controller, sent} = drive(controller, &has_row?(&1, "SampleApp.Repo.get(:users, 10)"))
    refute has_row?(sent, "SampleApp.Repo.get(:users, 9)")

    {[], controller} = Controller.handle_event(controller, "stop", %{})
    {controller, sent} = drive(controller, status?.("stopped"))
    assert {:broadcast, "status", %{counters: %{status: "stopped"}}} = List.last(sent)

    # once stopped, requests answer without a session
    KinoTraceTest.Helpers.await_down(trace.session)
    {effects, _controller} = Controller.handle_event(controller, "pause", %{})
    assert [{:broadcast, "status", %{status: "stopped"}}] = effects

    {:ok, effects, _} = Controller.handle_info(controller, :tick)
    refute Enum.any?(effects, &match?({:send_after, :tick, _}, &1))
  end

  test "complete answers the asking browser with the completions of the line", %{trace: trace} do
    {controller, _} = Controller.init(trace)

    {[{:reply, "completions", reply}], ^controller} =
      Controller.handle_event(controller, "complete", %{
        "text" => "SampleApp.Cache.fe",
        "seq" => 3
      })

    assert %{
             seq: 3,
             prefix: "fe",
             items: [%{insert: "fetch/1"}, %{insert: "fetch/2"}, %{insert: "fetch_all/2"}]
           } = reply

    # as the browser gets it
    assert %{"seq" => 3, "prefix" => "fe", "items" => [first | _]} =
             reply |> JSON.encode!() |> JSON.decode!()

    assert first == %{
             "label" => "fetch/1",
             "insert" => "fetch/1",
             "kind" => "function",
             "detail" => "SampleApp.Cache.fetch/1"
           }

    # a request that is not one has no completions
    for request <- [
          %{},
          %{"text" => nil},
          %{"text" => ["Enum"]},
          "Enum",
          %{"text" => <<"Enum.", 0xFF>>, "seq" => "x"}
        ] do
      assert {[{:reply, "completions", %{seq: nil, prefix: "", items: []}}], ^controller} =
               Controller.handle_event(controller, "complete", request)
    end
  end

  test "get_term renders an event's full terms; clear forgets them", %{trace: trace} do
    {controller, _} = Controller.init(trace)
    run(fn -> SampleApp.Cache.fetch(:users, 11) end)
    {controller, sent} = drive(controller, &has_row?(&1, "SampleApp.Cache.fetch(:users, 11)"))
    row = Enum.find(rows(sent), &(&1.call == "SampleApp.Cache.fetch(:users, 11)"))

    {[{:reply, "term", term}], controller} =
      Controller.handle_event(controller, "get_term", %{"id" => row.id})

    assert term.id == row.id
    assert term.args == [":users", "11"]

    {[{:broadcast, "clear", %{}}], controller} = Controller.handle_event(controller, "clear", %{})

    {[{:reply, "term", term}], controller} =
      Controller.handle_event(controller, "get_term", %{"id" => row.id})

    assert term.error =~ "no longer kept"
    {payload, _} = Controller.connect(controller)
    assert payload.events == []
  end

  test "get_mermaid answers the diagram of exactly the events asked for" do
    %{reply: reply, ids: ids, events: events, controller: controller} =
      KinoTraceTest.MermaidSamples.widget_reply()

    # fetch(:users, 12) and the Repo.get it made, with their returns; not fetch(:users, 13)
    assert reply.events == length(ids) and length(ids) == 4
    assert length(events) == 8
    assert Regex.scan(~r/^  activate P1$/m, reply.source) |> length() == 2
    assert Regex.scan(~r/^  deactivate P1$/m, reply.source) |> length() == 2
    assert reply.source =~ "P1->>P1: SampleApp.Cache.fetch/2\n"
    assert reply.source =~ "P1->>P1: SampleApp.Repo.get/2\n"
    assert reply.source =~ "%{id: 12, table: :users}"
    refute reply.source =~ "id: 13"

    # ids no longer kept, too many ids, a payload of another shape
    {[{:broadcast, "clear", %{}}], cleared} = Controller.handle_event(controller, "clear", %{})

    assert {[{:reply, "mermaid", %{error: "these events are no longer kept" <> _}}], _} =
             Controller.handle_event(cleared, "get_mermaid", %{"ids" => ids})

    assert {[
              {:reply, "mermaid",
               %{error: "too many events for one diagram (20001, at most 20000)"}}
            ],
            _} =
             Controller.handle_event(controller, "get_mermaid", %{
               "ids" => Enum.to_list(1..20_001)
             })

    assert {[], _} = Controller.handle_event(controller, "get_mermaid", %{"ids" => "1,2"})
  end

  test "the trace ends when the process holding the widget exits", %{trace: trace} do
    parent = self()

    holder =
      spawn(fn ->
        Controller.init(trace)
        send(parent, :ready)
        Process.sleep(:infinity)
      end)

    assert_receive :ready
    ref = Process.monitor(trace.session)
    Process.exit(holder, :kill)
    assert_receive {:DOWN, ^ref, :process, _, _}, 5_000
  end

  test "a trace that already ended renders as stopped", %{trace: trace} do
    Kino.Trace.stop(trace)
    {controller, _} = Controller.init(trace)
    {payload, _} = Controller.connect(controller)
    assert payload.status == "stopped"
    assert payload.counters.status == "stopped"
  end

  describe "GenServer replies (sent to an alias since OTP 24)" do
    # issue 23 item 4: Kino.Trace.messages([:counter]) on a named Agent, Agent.get twice
    test "a reply to a caller not traced is a row sent to the caller, as in Mermaid" do
      name = :kino_trace_widget_counter
      agent = AgentSample.start(name)
      caller = AgentSample.caller(name)
      on_exit(fn -> AgentSample.stop(agent, caller) end)
      trace = Kino.Trace.messages([name])
      on_exit(fn -> Kino.Trace.stop(trace) end)

      {controller, _} = Controller.init(trace)
      assert AgentSample.go(caller) == [0, 1]

      {controller, sent} =
        drive(controller, &(Enum.count(rows(&1), fn row -> row.kind == "send" end) >= 2))

      replies = Enum.filter(rows(sent), &(&1.kind == "send"))
      assert Enum.map(replies, & &1.peer) == [inspect(caller), inspect(caller)]
      assert Enum.all?(replies, &(&1.pid == inspect(agent) and &1.data =~ ~r/^reply [01]$/))

      # the expanded row and a browser that connects later say the same
      {[{:reply, "term", term}], controller} =
        Controller.handle_event(controller, "get_term", %{"id" => hd(replies).id})

      assert term.peer == inspect(caller)
      {connect, _} = Controller.connect(controller)

      assert for(%{kind: "send", peer: peer} <- connect.events, do: peer) == [
               inspect(caller),
               inspect(caller)
             ]
    end

    test "a caller traced too: its receive of the reply matches the send row" do
      name = :kino_trace_widget_counter_both
      agent = AgentSample.start(name)
      caller = AgentSample.caller(name)
      on_exit(fn -> AgentSample.stop(agent, caller) end)
      trace = Kino.Trace.messages([name, caller])
      on_exit(fn -> Kino.Trace.stop(trace) end)

      {controller, _} = Controller.init(trace)
      AgentSample.go(caller)
      reply? = &(&1.data =~ ~r/^reply /)

      {_controller, sent} =
        drive(
          controller,
          &(Enum.count(rows(&1), fn row -> row.kind == "receive" and reply?.(row) end) >= 2)
        )

      rows = rows(sent)
      sends = for %{kind: "send"} = row <- rows, reply?.(row), do: {row.peer, row.data}
      receives = for %{kind: "receive"} = row <- rows, reply?.(row), do: {row.pid, row.data}
      assert length(sends) == 2 and sends == receives
    end
  end

  describe "the wire (assets/wire.schema.json)" do
    test "every payload the controller makes follows the schema", %{trace: trace} do
      {controller, _} = Controller.init(trace, max_entries: 1_000, sequence_rows: 300)
      {connect, controller} = Controller.connect(controller)
      WireSchema.check_connect!(connect)
      # what the browser holds is the server's to say (the connect payload carries it)
      assert {connect.max_entries, connect.sequence_rows} == {1_000, 300}

      run(fn ->
        SampleApp.Cache.fetch(:users, 21)

        try do
          SampleApp.Cache.fetch(:users, -1)
        rescue
          ArgumentError -> :ok
        end
      end)

      {controller, sent} =
        drive(controller, &(Enum.count(rows(&1), fn row -> row.kind == "exception" end) >= 1))

      [call | _] = rows(sent)

      requests = [
        {"set_patterns", %{"patterns" => ["SampleApp.Cache.fetch/2", "SampleApp.Repo.gte/2"]}},
        {"set_patterns", %{"patterns" => List.duplicate("Enum.map/2", 501)}},
        {"get_term", %{"id" => call.id}},
        {"get_term", %{"id" => -1}},
        {"complete", %{"text" => "SampleApp.Cache.fe", "seq" => 1}},
        {"get_mermaid", %{"ids" => [call.id]}},
        {"get_mermaid", %{"ids" => [-1]}},
        {"pause", %{}},
        {"clear", %{}}
      ]

      controller =
        Enum.reduce(requests, controller, fn {event, payload}, controller ->
          {effects, controller} = Controller.handle_event(controller, event, payload)
          assert effects != [] or event == "pause"
          WireSchema.check_effects!(effects)
          controller
        end)

      {connect, controller} = Controller.connect(controller)
      WireSchema.check_connect!(connect)
      {[], controller} = Controller.handle_event(controller, "stop", %{})

      {controller, _sent} =
        drive(controller, &Enum.any?(&1, fn e -> match?({:broadcast, "status", _}, e) end))

      {:ok, effects, _} = Controller.handle_info(controller, :tick)
      WireSchema.check_effects!(effects)
    end

    test "a payload that drifts from the schema fails the check", %{trace: trace} do
      {controller, _} = Controller.init(trace)
      {connect, _} = Controller.connect(controller)

      assert_raise ExUnit.AssertionError, ~r/connect: keep is not in the schema/, fn ->
        WireSchema.check_connect!(Map.put(connect, :keep, 10_000))
      end

      assert_raise ExUnit.AssertionError, ~r/connect: no sequence_rows/, fn ->
        WireSchema.check_connect!(Map.delete(connect, :sequence_rows))
      end

      assert_raise ExUnit.AssertionError, ~r/counters.events: expected integer/, fn ->
        WireSchema.check_event!("counters", %{connect.counters | events: "12"})
      end
    end

    test "the browser's bounds are checked options", %{trace: trace} do
      for {key, value} <- [max_entries: 0, sequence_rows: :many] do
        assert_raise ArgumentError,
                     "invalid value for #{inspect(key)}: expected a positive integer, got: #{inspect(value)}",
                     fn ->
                       Controller.init(trace, [{key, value}, lifeline: false])
                     end
      end
    end

    test "its options are checked as the API's are: each value, and a typo gets a did-you-mean",
         %{trace: trace} do
      assert_raise ArgumentError,
                   "invalid value for :interval: expected a positive integer, got: :soon",
                   fn ->
                     Controller.init(trace, interval: :soon, lifeline: false)
                   end

      assert_raise ArgumentError,
                   ~r/^unknown option :intervall \(did you mean :interval\?\)\. Known options: :interval, /,
                   fn ->
                     Controller.init(trace, intervall: 50, lifeline: false)
                   end
    end
  end
end
