defmodule KinoTrace.Remote.CoordinatorTest do
  # The coordinator of a trace of several nodes, run here over this node alone (it
  # treats this node's session as any other's): how it holds back for a subscriber that
  # falls behind.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers, only: [wait_until: 1]

  alias Kino.Trace.Plan
  alias KinoTrace.Client
  alias KinoTrace.Remote.Coordinator
  alias KinoTraceTest.Remote.Echo

  # More than a subscriber may fall behind (KinoTrace.Server.Delivery.allowance/0)
  # and the node's queue hold together.
  @calls 90_000
  @queue 10_000

  # A subscriber that reads nothing until it gets :go, then counts the events it gets
  # until asked.
  defp stalled_subscriber do
    spawn_link(fn ->
      receive do
        :go -> count_events(0)
      end
    end)
  end

  defp count_events(n) do
    receive do
      {:kino_trace, _tag, {:events, events}} -> count_events(n + length(events))
      {:count, from} -> send(from, {:counted, n})
      _filler -> count_events(n)
    end
  end

  defp events_in_mailbox(pid) do
    {:messages, messages} = Process.info(pid, :messages)

    for {:kino_trace, _tag, {:events, events}} <- messages,
        reduce: 0,
        do: (n -> n + length(events))
  end

  test "a backlogged subscriber: the coordinator holds its events without waiting, answers meanwhile, and its node holds back and counts" do
    plan =
      Plan.new!([calls: ["KinoTraceTest.Remote.Echo.double/1"]],
        nodes: [node()],
        return: false,
        queue: [events: @queue, bytes: 1_073_741_824]
      )

    {:ok, pid, id} = Coordinator.start(self(), plan)
    trace = %{id: id, session: pid}
    subscriber = stalled_subscriber()
    :ok = Client.subscribe(trace, subscriber)
    # its mailbox is past what a coordinator lets a subscriber have unread
    for i <- 1..100, do: send(subscriber, {:filler, i})

    for i <- 1..@calls, do: Echo.double(i)

    # the coordinator holds what its node's session delivers, and answers requests
    # meanwhile (it does not sleep), until the session holds back (what the coordinator
    # holds counts as unread, past a session's limit of 640 messages) or has delivered all
    holding_back? = fn ->
      Client.internals(trace).held_batches > 640 or Client.info(trace).queued == 0
    end

    wait_until(holding_back?)
    info = Client.info(trace)
    internals = Client.internals(trace)
    # nothing went to the subscriber while it was behind: all of it is held, none lost...
    assert events_in_mailbox(subscriber) == 0
    assert internals.held_events == info.delivered
    # ...and what the session did not take stayed in its node's queue, which dropped the
    # rest and counted it
    assert info.accepted + info.dropped.queue_full == @calls
    assert info.dropped.queue_full > 0

    # once it reads again, it gets every event its node accepted: none is lost
    send(subscriber, :go)
    :ok = Client.flush(trace)
    send(subscriber, {:count, self()})
    assert_receive {:counted, received}, 30_000
    assert received == info.accepted
    assert Client.internals(trace).held_batches == 0

    :ok = Client.stop(trace)
  end
end
