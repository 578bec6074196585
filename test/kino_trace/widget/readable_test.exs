defmodule KinoTrace.Widget.ReadableTest do
  # What the widget and Mermaid say of one thing, said one way (issue 39 items 7 to 10),
  # on real traces: a process's name, a GenServer request and its reply, an Erlang error,
  # two functions the compiler made in one function.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers, only: [use_fallback_tracer: 0]

  alias Kino.Trace.Event
  alias KinoTrace.Widget.{Payload, StatsPayload}
  alias KinoTraceTest.AgentSample

  doctest KinoTrace.Render, only: [process_name: 1, banner: 3, message: 2]
  doctest KinoTrace.Base.MFA, only: [labels: 1]

  # A named Agent called twice by a process: both traced, on `tracer`.
  defp agent_calls(name, tracer) do
    if tracer == :fallback, do: use_fallback_tracer()
    agent = AgentSample.start(name)
    caller = AgentSample.caller(name)
    trace = Kino.Trace.messages([name, caller])

    on_exit(fn ->
      Kino.Trace.stop(trace)
      AgentSample.stop(agent, caller)
    end)

    [0, 1] = AgentSample.go(caller)
    Agent.cast(name, fn n -> n end)
    # the cast is the agent's: its receive is in when a call after it is answered
    0 = Agent.get(name, & &1)
    {agent, caller, Kino.Trace.events(trace, 1000)}
  end

  for tracer <- [:native, :fallback] do
    test "a process named by an Elixir module reads as Elixir writes it, in rows and in Mermaid (#{tracer} tracer)" do
      {agent, _caller, events} = agent_calls(KinoTraceTest.ReadableCounter, unquote(tracer))
      rows = Payload.events(events)

      names = for %{pid: pid, name: name} <- rows, pid == inspect(agent), do: name
      assert names != [] and Enum.uniq(names) == ["KinoTraceTest.ReadableCounter"]
      assert "KinoTraceTest.ReadableCounter" in Enum.map(rows, & &1.peer_name)

      assert Kino.Trace.to_mermaid(events) =~
               ~r/participant P\d as KinoTraceTest\.ReadableCounter\n/
    end

    test "GenServer requests and replies read by what they carry; the raw message is in full/1 (#{tracer} tracer)" do
      {_agent, caller, events} = agent_calls(:kino_trace_readable_counter, unquote(tracer))
      rows = Enum.zip(Payload.events(events), events)

      sent_by_caller =
        for {%{kind: "send", pid: pid} = row, event} <- rows,
            pid == inspect(caller),
            do: {row, event}

      received = for {%{kind: "receive"} = row, _} <- rows, do: row.data

      assert [{call, call_event}, _] =
               Enum.filter(sent_by_caller, fn {row, _} ->
                 String.starts_with?(row.data, "call ")
               end)

      assert call.data =~ ~r/^call \{:get, #Function</
      assert {:"$gen_call", _, {:get, _}} = call_event.data
      assert Payload.full(call_event).data =~ ~r/^\{:"\$gen_call",\s+\{#PID</

      replies = Enum.filter(received, &String.starts_with?(&1, "reply "))
      assert Enum.sort(replies) == ["reply 0", "reply 1"]
      assert Enum.any?(received, &(&1 =~ ~r/^cast \{:cast, #Function</)), inspect(received)

      refute Enum.any?(rows, fn {row, _} ->
               row.data && row.data =~ ~r/gen_call|gen_cast|#Reference</
             end)

      [reply] = for {%{kind: "receive", data: "reply 1"}, event} <- rows, do: event
      assert Payload.full(reply).data =~ ~r/^\{\[:alias \| #Reference<[^>]+>\], 1\}$/

      mermaid = Kino.Trace.to_mermaid(events)
      assert mermaid =~ ": reply 1\n"
      refute mermaid =~ "gen_call"
    end
  end

  test "a Task's result reads as a reply" do
    me = self()
    trace = Kino.Trace.messages([me])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    7 = Task.async(fn -> 7 end) |> Task.await()
    rows = Payload.events(Kino.Trace.events(trace, 100))
    assert "reply 7" in for(%{kind: "receive", data: data} <- rows, do: data)
  end

  test "an Erlang error reads by its Elixir name in the row, the details, the printer and Mermaid" do
    trace = Kino.Trace.calls(["SampleApp.Repo.delete/1"])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    assert_raise FunctionClauseError, fn -> apply(SampleApp.Repo, :delete, [:everything]) end

    [%Event{kind: :exception, exception: {:error, :function_clause}} = event] =
      for e <- Kino.Trace.events(trace, 10), e.kind == :exception, do: e

    banner = "** (FunctionClauseError) no function clause matches"
    assert Payload.event(event).exception == banner
    full = Payload.full(event)
    assert full.exception == banner
    assert full.exception_raw == "{:error, :function_clause}"
    assert IO.iodata_to_binary(KinoTrace.Render.format_body(event)) =~ "!! " <> banner
    assert Kino.Trace.to_mermaid([event]) =~ "--xP1: !! " <> banner
  end

  test "two functions the compiler made in one function read apart in the stats, their raw names as titles" do
    stats = Kino.Trace.stats(["Enum"])
    on_exit(fn -> Kino.Trace.stop(stats) end)

    Task.async(fn ->
      for i <- 1..3, do: {Enum.reduce([i, 2], 0, &+/2), Enum.reduce(MapSet.new([i]), 0, &+/2)}
    end)
    |> Task.await()

    rows = StatsPayload.snapshot(Kino.Trace.stats_snapshot(stats)).rows
    reduce = Enum.filter(rows, &String.starts_with?(&1.name, "anonymous fn/3 in Enum.reduce/3"))
    assert length(reduce) >= 2, inspect(Enum.map(rows, &{&1.key, &1.name}))
    names = Enum.map(rows, & &1.name)
    assert names == Enum.uniq(names), inspect(names)
    for row <- reduce, do: assert(row.title == row.key)
    assert [nil] = for(%{key: "Enum.reduce/3", title: title} <- rows, do: title)
  end
end
