defmodule KinoTrace.Tracer.AliasesTest do
  # KinoTrace.Tracer.Aliases, the rule that sends a reply to a process alias to the alias's
  # owner, on a real trace of a plain alias, and its bound on a long trace. (GenServer
  # replies on real traces: mermaid_test.exs and widget_controller_test.exs.)
  use ExUnit.Case, async: true

  import KinoTraceTest.Helpers, only: [await_events: 2]

  alias Kino.Trace.Event
  alias KinoTrace.Tracer.Aliases

  test "a message to a plain alias goes to the process that received it" do
    parent = self()

    owner =
      spawn(fn ->
        send(parent, {:alias, :erlang.alias()})

        receive do
          message -> send(parent, {:got, message})
        end
      end)

    assert_receive {:alias, ref}
    sender = spawn(fn -> receive(do: (:go -> send(ref, :hello))) end)
    trace = Kino.Trace.messages([owner, sender])
    on_exit(fn -> Kino.Trace.stop(trace) end)

    send(sender, :go)
    assert_receive {:got, :hello}

    events =
      await_events(trace, &Enum.any?(&1, fn e -> e.kind == :receive and e.data == :hello end))

    assert [%Event{peer: ^ref}] = for(%Event{kind: :send, data: :hello} = e <- events, do: e)

    {resolved, _} = Aliases.resolve(Aliases.new(), events)

    assert [%Event{pid: ^sender, peer: ^owner}] =
             for(%Event{kind: :send, data: :hello} = e <- resolved, do: e)

    source = Kino.Trace.to_mermaid(events)
    refute source =~ ~r/participant P\d+ as #35;Reference/
    assert source =~ ~r/^  P\d+->>P\d+: :hello$/m
  end

  test "a long trace's owners are bounded, the newest kept" do
    caller = self()
    requests = for _ <- 1..10_500, do: make_ref()

    events =
      for ref <- requests,
          do: %Event{
            kind: :receive,
            pid: caller,
            data: {:"$gen_call", {caller, [:alias | ref]}, :get}
          }

    {_, state} = Aliases.resolve(Aliases.new(), events)
    assert map_size(state.owners) == 10_000

    reply = fn ref -> %Event{kind: :send, peer: ref, data: {[:alias | ref], :ok}} end

    {[newest, oldest], _} =
      Aliases.resolve(state, [reply.(List.last(requests)), reply.(hd(requests))])

    assert newest.peer == caller
    assert oldest.peer == hd(requests)
  end
end
