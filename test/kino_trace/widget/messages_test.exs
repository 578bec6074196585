defmodule KinoTrace.Widget.MessagesTest do
  # The widget's payloads for message and process events, from real traces of a
  # ping-pong workload (KinoTraceTest.SequenceSample): every kind renders, with exact
  # contents, and the controller pushes them and expands them like calls.
  use ExUnit.Case, async: true

  import KinoTraceTest.Helpers, only: [await_events: 2]

  alias KinoTrace.Widget.{Controller, Payload}
  alias KinoTraceTest.SequenceSample

  defp run_traced(rounds) do
    sample = SequenceSample.start(rounds)

    trace = SequenceSample.trace(sample)

    on_exit(fn -> Kino.Trace.stop(trace) end)
    SequenceSample.go(sample)
    assert_receive {:sequence_done, _}, 5_000

    events =
      await_events(trace, fn events ->
        Enum.any?(events, &(&1.kind == :exit and &1.pid == sample.pong)) and
          Enum.count(events, &(&1.kind == :receive and &1.pid == sample.ping)) >= rounds + 1
      end)

    {trace, sample, events}
  end

  # issue 25: the widget shows the editor for what the trace has (no call-pattern
  # editor for a trace of messages or processes alone): the connect payload says what.
  test "the connect payload says what the trace traces: calls, message targets and pattern, process targets" do
    me = self()

    cases = [
      {fn -> Kino.Trace.calls(["Enum.sum/1"]) end,
       %{calls: true, messages: nil, message_pattern: nil, processes: nil}},
      {fn -> Kino.Trace.messages([me], pattern: "{:ok, _}") end,
       %{calls: false, messages: inspect(me), message_pattern: "{:ok, _}", processes: nil}},
      {fn -> Kino.Trace.messages(:all) end,
       %{calls: false, messages: ":all", message_pattern: nil, processes: nil}},
      {fn -> Kino.Trace.processes(:new) end,
       %{calls: false, messages: nil, message_pattern: nil, processes: ":new"}},
      {fn -> Kino.Trace.trace(calls: ["Enum.sum/1"], processes: [me]) end,
       %{calls: true, messages: nil, message_pattern: nil, processes: "#{inspect(me)}"}}
    ]

    for {start, expected} <- cases do
      trace = start.()
      {controller, _} = Controller.init(trace, lifeline: false)
      {connect, _} = Controller.connect(controller)
      Kino.Trace.stop(trace)
      KinoTraceTest.WireSchema.check_connect!(connect)
      assert connect.trace == expected
    end
  end

  test "every kind of a real message and process trace renders as a row" do
    {_trace, %{ping: ping, pong: pong}, events} = run_traced(3)
    rows = Payload.events(events)

    kinds = rows |> Enum.map(& &1.kind) |> MapSet.new()

    for kind <- ~w(call return send receive register spawn link unlink exit) do
      assert kind in kinds, "no #{kind} row among #{inspect(MapSet.to_list(kinds))}"
    end

    ping_s = inspect(ping)
    pong_s = inspect(pong)

    # the pinger's sends, with the message as code and the receiver as peer
    pings = for r <- rows, r.kind == "send", r.pid == ping_s, do: {r.data, r.peer}

    assert {"{:ping, #{ping_s}, 1}", pong_s} in pings
    assert {"{:ping, #{ping_s}, 3}", pong_s} in pings
    assert {":stop", pong_s} in pings

    # the server's side: receives carry the message, sends the reply and the pinger
    assert Enum.any?(
             rows,
             &(&1.kind == "receive" and &1.pid == pong_s and &1.data == "{:ping, #{ping_s}, 2}" and
                 &1.peer == nil)
           )

    assert Enum.any?(
             rows,
             &(&1.kind == "send" and &1.pid == pong_s and &1.data == "{:pong, 20}" and
                 &1.peer == ping_s)
           )

    assert Enum.any?(
             rows,
             &(&1.kind == "receive" and &1.pid == ping_s and &1.data == "{:pong, 30}")
           )

    # lifecycle: the registered name, the spawned and linked helper, the exit reason
    assert [register] = Enum.filter(rows, &(&1.kind == "register"))
    assert register.data == ":kino_trace_sequence_pong" and register.pid == pong_s

    assert [spawn] = Enum.filter(rows, &(&1.kind == "spawn"))
    assert spawn.data =~ "KinoTraceTest.SequenceSample"
    assert [link] = Enum.filter(rows, &(&1.kind == "link"))
    assert link.peer == spawn.peer and link.pid == pong_s
    assert [exit] = Enum.filter(rows, &(&1.kind == "exit" and &1.pid == pong_s))
    assert exit.data == "{:shutdown, :done}"

    # calls in the same trace still render as calls, message rows have no call fields
    assert Enum.any?(
             rows,
             &(&1.kind == "call" and &1.call == "KinoTraceTest.SequenceSample.reply(2)")
           )

    assert Enum.any?(rows, &(&1.kind == "return" and &1.result == "20"))

    for r <- rows, r.kind not in ["call", "return", "exception"] do
      assert r.call == nil and r.mfa == nil and r.result == nil and r.exception == nil
      assert r.remote == false and r.node == Atom.to_string(node())

      assert is_binary(r.data) or
               r.kind in ["link", "unlink", "getting_linked", "getting_unlinked"]
    end

    # every row crosses the JSON boundary as it is
    assert rows |> JSON.encode!() |> JSON.decode!() |> length() == length(rows)
  end

  test "full/2 renders a message whole, with its kind and peer" do
    {_trace, %{ping: ping, pong: pong}, events} = run_traced(1)

    send_event = Enum.find(events, &(&1.kind == :send and &1.pid == ping and is_tuple(&1.data)))
    full = Payload.full(send_event)

    assert full.kind == "send"
    assert full.peer == inspect(pong)
    assert full.data == inspect({:ping, ping, 1})
    assert full.cut == false
    refute Map.has_key?(full, :args)

    exit_event = Enum.find(events, &(&1.kind == :exit))
    assert Payload.full(exit_event).data == "{:shutdown, :done}"
  end

  test "a big message is cut in the row and whole in full/2" do
    rows =
      Payload.events([
        %Kino.Trace.Event{
          id: 1,
          kind: :send,
          pid: self(),
          peer: self(),
          data: {:batch, Enum.to_list(1..500)}
        }
      ])

    assert [%{truncated: true, data: data}] = rows
    assert String.ends_with?(data, "...]}")

    full =
      Payload.full(%Kino.Trace.Event{
        id: 1,
        kind: :send,
        pid: self(),
        data: {:batch, Enum.to_list(1..500)}
      })

    assert full.data =~ "500]}"
  end

  test "peer_name names a registered local receiver; remote marks other nodes" do
    Process.register(self(), :kino_trace_payload_peer)

    on_exit(fn ->
      if Process.whereis(:kino_trace_payload_peer),
        do: Process.unregister(:kino_trace_payload_peer)
    end)

    row =
      Payload.event(%Kino.Trace.Event{
        id: 1,
        kind: :send,
        node: node(),
        pid: self(),
        peer: self(),
        data: :hi
      })

    assert row.peer_name == ":kino_trace_payload_peer"
    assert row.remote == false

    row =
      Payload.event(%Kino.Trace.Event{
        id: 2,
        kind: :receive,
        node: :other@host,
        pid: self(),
        data: :hi
      })

    assert row.remote == true and row.node == "other@host" and row.peer_name == nil
  end

  test "the controller pushes message rows and expands them on get_term" do
    sample = SequenceSample.start(2)

    trace = Kino.Trace.trace(messages: [sample.ping, sample.pong], processes: [sample.pong])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, interval: 10, lifeline: false)
    SequenceSample.go(sample)
    assert_receive {:sequence_done, _}, 5_000

    rows = collect_rows(controller, fn rows -> Enum.any?(rows, &(&1.kind == "exit")) end)
    assert Enum.count(rows, &(&1.kind == "send")) >= 5
    assert Enum.any?(rows, &(&1.kind == "receive" and &1.data == "{:pong, 20}"))

    {controller, _} = Controller.init(trace, lifeline: false)
    {connect, controller} = Controller.connect(controller)
    send_row = Enum.find(connect.events, &(&1.kind == "send" and &1.data == "{:pong, 10}"))
    assert send_row

    {[{:reply, "term", full}], _} =
      Controller.handle_event(controller, "get_term", %{"id" => send_row.id})

    assert full.id == send_row.id and full.kind == "send" and full.data == "{:pong, 10}"
    assert full.peer == inspect(sample.ping)
  end

  defp collect_rows(controller, done?, rows \\ []) do
    receive do
      message ->
        case Controller.handle_info(controller, message) do
          {:ok, effects, controller} ->
            new =
              Enum.flat_map(effects, fn
                {:send_after, msg, ms} ->
                  Process.send_after(self(), msg, ms)
                  []

                {:broadcast, "events", %{events: events}} ->
                  events

                _ ->
                  []
              end)

            rows = rows ++ new
            if done?.(rows), do: rows, else: collect_rows(controller, done?, rows)

          :unknown ->
            collect_rows(controller, done?, rows)
        end
    after
      5_000 -> flunk("rows never came: #{inspect(Enum.map(rows, & &1.kind))}")
    end
  end
end
