defmodule KinoTraceTest.MessagesHelper do
  @moduledoc false
  def work(x), do: x * 2
end

defmodule Kino.Trace.Calls.MessagesTest do
  # Message and process-lifecycle tracing on this node, with exact event contents.
  use ExUnit.Case, async: true

  import KinoTraceTest.Helpers, only: [await_events: 2, trace_delivered: 1]

  alias Kino.Trace.{Event, Printer}

  defp echo_server do
    spawn(fn ->
      receive do
        {from, msg} -> send(from, {:echo, msg})
      end

      receive do
        :stop -> exit(:finished)
      end
    end)
  end

  test "send and receive of the given processes, with exact contents" do
    server = echo_server()
    trace = Kino.Trace.messages([server])
    me = self()

    send(server, {me, :hello})
    assert_receive {:echo, :hello}

    events = await_events(trace, &(length(&1) >= 2))

    assert [
             %Event{kind: :receive, pid: ^server, data: {^me, :hello}, peer: nil},
             %Event{kind: :send, pid: ^server, data: {:echo, :hello}, peer: ^me}
           ] = Enum.take(events, 2)

    assert Enum.all?(events, &(&1.node == node() and is_integer(&1.time)))
    Kino.Trace.stop(trace)
  end

  # Receives :go, times out in a receive...after, then receives :timeout and :stop.
  defp sleeper(me) do
    spawn(fn ->
      receive do: (:go -> :ok)
      after_timeout()
      receive do: (:timeout -> :ok)
      receive do: (:stop -> send(me, :slept))
    end)
  end

  # the workload: a receive...after that times out, the event these tests are about
  defp after_timeout, do: Process.sleep(1)

  # issue 25: a sleep (a receive...after that times out) was traced as
  # "receive :timeout", in the printer, the widget and Mermaid alike; no message was
  # received. A message :timeout that a process sends is still one.
  for pattern <- [nil, "_", "x when is_atom(x)"] do
    test "a receive...after that times out is no received message (pattern: #{inspect(pattern)})" do
      me = self()

      sleeper = sleeper(me)

      opts = if unquote(pattern), do: [pattern: unquote(pattern)], else: []
      trace = Kino.Trace.messages([sleeper], opts)
      send(sleeper, :go)
      send(sleeper, :timeout)
      send(sleeper, :stop)
      assert_receive :slept

      events =
        await_events(trace, &Enum.any?(&1, fn e -> e.kind == :receive and e.data == :stop end))

      Kino.Trace.stop(trace)

      assert for(%Event{kind: :receive, data: data} <- events, do: data) == [:go, :timeout, :stop]
    end
  end

  # issue 25: "leave it out unless asked for": with timeouts: true a receive...after
  # that times out is traced, as what it is (kind :timeout, "after timeout") in the
  # printer, the widget's payload and Mermaid; a :timeout message sent is a receive.
  for {pattern, agent} <- [{nil, :auto}, {"{:never, _}", :auto}, {nil, :fallback}] do
    test "timeouts: true traces an after timeout as one (pattern: #{inspect(pattern)}, agent: #{agent})" do
      me = self()

      sleeper = sleeper(me)

      opts =
        [timeouts: true, agent: unquote(agent)] ++
          if(unquote(pattern), do: [pattern: unquote(pattern)], else: [])

      trace = Kino.Trace.messages([sleeper], opts)
      send(sleeper, :go)
      send(sleeper, :timeout)
      send(sleeper, :stop)
      assert_receive :slept
      events = await_events(trace, &Enum.any?(&1, fn e -> e.kind == :timeout end))
      Kino.Trace.stop(trace)

      [timeout] = for %Event{kind: :timeout} = e <- events, do: e
      assert %Event{pid: ^sleeper, data: nil} = timeout

      received = for %Event{kind: :receive, data: data} <- events, do: data

      if unquote(pattern),
        do: assert(received == []),
        else: assert(:timeout in received and :go in received)

      assert IO.iodata_to_binary(Printer.format(timeout, colors: false)) =~
               ~r/ #PID<[^>]+> after timeout$/

      assert %{kind: "timeout", data: nil} = KinoTrace.Widget.Payload.event(timeout)
      assert Kino.Trace.Mermaid.diagram([timeout]) =~ ~r/Note over \w+: after timeout/
    end
  end

  test "capture/3 with messages: true takes timeouts: true too" do
    sleep = &after_timeout/0
    assert [] = Kino.Trace.capture(["Enum.sum/1"], sleep, messages: true).events

    assert [%Event{kind: :timeout}] =
             Kino.Trace.capture(["Enum.sum/1"], sleep, messages: true, timeouts: true).events
  end

  test "timeouts: false (the default) and a bad :timeouts value" do
    assert KinoTrace.Plan.Options.validate!([])[:timeouts] == false

    assert_raise ArgumentError,
                 "invalid value for :timeouts: expected a boolean, got: :yes",
                 fn ->
                   Kino.Trace.messages([self()], timeouts: :yes)
                 end
  end

  test "message patterns keep only matching messages" do
    server = echo_server()
    trace = Kino.Trace.messages([server], pattern: "{:echo, n} when is_integer(n) and n > 10")
    me = self()

    send(server, {me, 42})
    assert_receive {:echo, 42}
    events = await_events(trace, &(&1 != []))

    # the receive of {me, 42} does not match the pattern; the send of {:echo, 42} does
    assert [%Event{kind: :send, data: {:echo, 42}, peer: ^me}] = events
    Kino.Trace.stop(trace)
  end

  test "a message pattern that does not match sends nothing" do
    server = echo_server()
    trace = Kino.Trace.messages([server], pattern: "{:echo, n} when n > 100")
    send(server, {self(), 1})
    assert_receive {:echo, 1}
    # every trace message of the server is delivered, and the session has taken it in
    trace_delivered(server)
    :ok = Kino.Trace.flush(trace)
    assert Kino.Trace.events(trace) == []
    assert Kino.Trace.info(trace).accepted == 0
  end

  test "process lifecycle: spawn, link, register, unregister, exit with reason, children followed" do
    parent = self()

    root =
      spawn(fn ->
        receive do
          :go -> :ok
        end

        child = spawn_link(fn -> receive(do: (:stop -> exit(:child_done))) end)
        Process.register(self(), :kino_trace_lifecycle_root)
        Process.unregister(:kino_trace_lifecycle_root)
        Process.flag(:trap_exit, true)
        send(child, :stop)
        receive(do: ({:EXIT, ^child, _} -> :ok))
        send(parent, {:child, child})
        exit(:root_done)
      end)

    trace = Kino.Trace.processes([root], children: true)
    send(root, :go)
    assert_receive {:child, child}

    events =
      await_events(trace, fn events ->
        Enum.count(events, &(&1.kind == :exit)) == 2
      end)

    kinds = for e <- events, e.pid == root, do: e.kind
    assert :spawn in kinds and :link in kinds and :register in kinds and :unregister in kinds

    assert Enum.any?(events, &match?(%Event{kind: :spawn, pid: ^root, peer: ^child}, &1))

    assert Enum.any?(
             events,
             &match?(%Event{kind: :register, pid: ^root, data: :kino_trace_lifecycle_root}, &1)
           )

    assert Enum.any?(events, &match?(%Event{kind: :exit, pid: ^root, data: :root_done}, &1))
    # the child was followed (children: true): its own exit arrives too
    assert Enum.any?(events, &match?(%Event{kind: :exit, pid: ^child, data: :child_done}, &1))
    assert Enum.any?(events, &match?(%Event{kind: :spawned, pid: ^child, peer: ^root}, &1))
    refute Enum.any?(events, &(&1.kind in [:call, :send, :receive]))
  end

  test "one trace combines calls, messages and process events" do
    server = echo_server()

    trace =
      Kino.Trace.trace(
        [calls: ["KinoTraceTest.MessagesHelper.work/1"], messages: [server], processes: [server]],
        pids: [server]
      )

    me = self()

    send(server, {me, :combined})
    assert_receive {:echo, :combined}
    send(server, :stop)
    KinoTraceTest.MessagesHelper.work(1)

    events = await_events(trace, &Enum.any?(&1, fn e -> e.kind == :exit end))
    kinds = events |> Enum.map(& &1.kind) |> Enum.uniq()
    assert :receive in kinds and :send in kinds and :exit in kinds
    Kino.Trace.stop(trace)
  end

  test "capture records messages and lifecycle events too" do
    capture =
      Kino.Trace.capture(
        ["KinoTraceTest.MessagesHelper.work/1"],
        fn ->
          task = Task.async(fn -> KinoTraceTest.MessagesHelper.work(2) end)
          Task.await(task)
        end,
        messages: true,
        processes: true
      )

    assert capture.result == 4
    kinds = capture.events |> Enum.map(& &1.kind) |> MapSet.new()
    assert MapSet.subset?(MapSet.new([:call, :return, :spawn, :send, :receive, :exit]), kinds)
    assert Enum.any?(capture.events, &match?(%Event{kind: :call, function: :work, args: [2]}, &1))
  end

  test "a capture's messages are the block's own, not kino_trace's bookkeeping around it" do
    me = self()
    echo = spawn(fn -> receive do: ({from, msg} -> send(from, {:echo, msg})) end)

    capture =
      Kino.Trace.capture(
        ["KinoTraceTest.MessagesHelper.work/1"],
        fn ->
          send(echo, {me, :hello})
          receive do: ({:echo, :hello} -> :ok)
        end,
        messages: true
      )

    mine = for %Event{pid: ^me} = e <- capture.events, do: {e.kind, e.peer, e.data}
    assert mine == [{:send, echo, {me, :hello}}, {:receive, nil, {:echo, :hello}}]
  end

  test "the printer shows message and process events" do
    me = self()
    send_event = %Event{kind: :send, pid: me, data: {:echo, 1}, peer: me, time: 0}
    exit_event = %Event{kind: :exit, pid: me, data: :normal, time: 0}
    text = fn e -> e |> Printer.format(colors: false, time: false) |> IO.iodata_to_binary() end
    assert text.(send_event) == "#{inspect(me)} send {:echo, 1} to #{inspect(me)}"
    assert text.(exit_event) == "#{inspect(me)} exit :normal"
  end

  test "bad targets and patterns are named" do
    assert_raise ArgumentError,
                 "invalid messages target: no process is registered as :kino_trace_nobody",
                 fn ->
                   Kino.Trace.messages(:kino_trace_nobody)
                 end

    assert_raise ArgumentError, ~r/invalid message pattern "\{:ok": syntax error/, fn ->
      Kino.Trace.messages(:all, pattern: "{:ok")
    end

    assert_raise ArgumentError, ~r/expected what to trace as a keyword list/, fn ->
      Kino.Trace.trace(calls_typo: ["Enum"])
    end

    assert_raise ArgumentError, ~r/invalid processes target/, fn ->
      Kino.Trace.processes("nope")
    end
  end
end
