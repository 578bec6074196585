defmodule Kino.Trace.Remote.CoordinatorTest do
  # The coordinator of a trace of several nodes, run here over this node alone (it
  # treats this node's session as any other's): how it holds back for a subscriber that
  # falls behind.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers, only: [wait_until: 1]

  alias Kino.Trace.{Client, Plan}
  alias Kino.Trace.Remote.Coordinator
  alias KinoTraceTest.Remote.Echo

  # More than a subscriber may fall behind (Kino.Trace.Server.Delivery.allowance/0).
  @calls 70_000
  @allowance Kino.Trace.Server.Delivery.allowance()

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
    for {:kino_trace, _tag, {:events, events}} <- messages, reduce: 0, do: (n -> n + length(events))
  end

  test "a backlogged subscriber: the coordinator holds its events without waiting, answers meanwhile, and counts what it does not send" do
    plan =
      Plan.new!([calls: ["KinoTraceTest.Remote.Echo.double/1"]],
        nodes: [node()],
        return: false,
        queue: [events: 200_000, bytes: 1_073_741_824]
      )

    {:ok, pid, id} = Coordinator.start(self(), plan)
    trace = %{id: id, session: pid}
    subscriber = stalled_subscriber()
    :ok = Client.subscribe(trace, subscriber)
    # its mailbox is past what a coordinator lets a subscriber have unread
    for i <- 1..100, do: send(subscriber, {:filler, i})

    for i <- 1..@calls, do: Echo.double(i)

    # every event reaches the coordinator (its node's session drains into it), and it
    # keeps answering requests: it holds the events for the subscriber, it does not sleep
    wait_until(fn -> Client.info(trace).queued == 0 end)
    assert length(Client.events(trace, 10)) == 10
    info = Client.info(trace)
    assert info.delivered > @allowance
    # nothing more went to the subscriber while it was behind...
    assert events_in_mailbox(subscriber) == 0
    # ...and it holds at most an allowance of them (in whole batches of up to 100): the
    # rest is counted as not sent
    held = info.delivered - info.unsent
    assert info.unsent > 0
    assert held <= @allowance and held > @allowance - 100

    # once it reads again, it gets every event held for it: none is lost uncounted
    send(subscriber, :go)
    :ok = Client.flush(trace)
    send(subscriber, {:count, self()})
    assert_receive {:counted, received}, 30_000
    assert received + Client.info(trace).unsent == info.delivered

    :ok = Client.stop(trace)
  end
end
