defmodule KinoTraceTest.PairingFlood do
  @moduledoc false
  # Now and then the caller sleeps between call and return: it wakes on whichever
  # scheduler is free (its return is then queued by another scheduler than its call),
  # and a small queue has filled meanwhile (its return is dropped).
  def f(x), do: maybe_sleep(x, 1000)

  # The same, sleeping more often.
  def g(x), do: maybe_sleep(x, 100)

  defp maybe_sleep(x, every) do
    # the workload: a call that sleeps between its call and its return
    if rem(x, every) == 0, do: Process.sleep(1)
    x + 1
  end
end

defmodule Kino.Trace.Calls.PairingTest do
  # Returns must pair with their own call even when processes move between schedulers
  # under load (their events then leave the native queue out of order), and call depth
  # must not drift when events are dropped. Real sessions, the real NIF.
  # async: false: the callers take both cores.
  use ExUnit.Case, async: false

  @moduletag :slow

  import KinoTraceTest.Helpers

  alias Kino.Trace
  alias KinoTraceTest.PairingFlood, as: Flood

  @moduletag timeout: 120_000

  @history 400_000

  # `callers` processes (more than this VM's schedulers, so they move between them)
  # make `total` calls of `fun` (Flood.f/1 or g/1) in all.
  defp run_callers(callers, total, fun) do
    per = div(total, callers)

    for c <- 0..(callers - 1) do
      Task.async(fn -> Enum.each((c * per + 1)..((c + 1) * per), fun) end)
    end
    |> Task.await_many(60_000)
  end

  # The last @history events, once the trace has delivered everything it accepted.
  defp settled_events(trace) do
    wait_until(fn -> Trace.info(trace).queued == 0 end, 3_000)
    Trace.events(trace, @history)
  end

  # Every return paired with a call in `events`: wrong pairs (another process, another
  # argument, a negative duration, or a call_id that is no call) and top-level calls
  # (the only kind here) with a depth > 0.
  defp check(events) do
    calls = for %{kind: :call} = e <- events, into: %{}, do: {e.id, e}
    first_id = hd(events).id

    wrong =
      for %{kind: :return, call_id: id} = r <- events,
          id != nil,
          id >= first_id,
          not right_pair?(calls[id], r),
          do: {calls[id] && calls[id].args, r}

    deep = for %{kind: :call, depth: d} = c <- events, d != 0, do: c
    paired = Enum.count(events, &(&1.kind == :return and &1.call_id != nil))
    {wrong, deep, paired}
  end

  defp right_pair?(%{pid: pid, args: [x]}, %{pid: pid, return: ret, duration: d}),
    do: ret == x + 1 and is_integer(d) and d >= 0

  defp right_pair?(_call, _return), do: false

  test "every return pairs with its own call (pid, argument) and a duration >= 0: 1 M calls from 3 processes" do
    # A queue that holds the whole flood: no drops, so only the order matters (the caps
    # are split between the schedulers' shards: each gets what the whole queue had).
    shards = System.schedulers() + 1

    trace =
      Trace.calls([&Flood.f/1],
        history: @history,
        queue: [events: 3_000_000 * shards, bytes: 1_000_000_000 * shards]
      )

    try do
      run_callers(3, 1_000_000, &Flood.f/1)
      events = settled_events(trace)
      {wrong, deep, paired} = check(events)
      info = Trace.info(trace)

      IO.puts(
        "\n  pairing: #{length(events)} events checked, #{paired} returns paired, #{length(wrong)} wrong, dropped #{inspect(info.dropped)}"
      )

      assert wrong == [], "#{length(wrong)} wrong pairs, e.g. #{inspect(Enum.take(wrong, 2))}"

      assert deep == [],
             "#{length(deep)} top-level calls with depth > 0, e.g. #{inspect(Enum.take(deep, 2))}"

      assert paired > 0
      assert info.dropped.queue_full == 0
      refute Enum.any?(events, & &1.lost)
    after
      Trace.stop(trace)
    end
  end

  test "after drops, top-level calls stay at depth 0 and no return pairs with a wrong call" do
    # A queue far too small for the flood, and a rate limit whose odd count leaves, in
    # every window, some call admitted and its return dropped: calls and returns are
    # dropped. (The queue alone no longer drops a return after its call: the session
    # drains fast enough that a process's call and return find room together.)
    # (200 events for each scheduler's shard: the queue's caps are split between them)
    queue = [events: 200 * (System.schedulers() + 1)]
    trace = Trace.calls([&Flood.g/1], history: @history, queue: queue, rate: {1_001, 20})

    try do
      run_callers(3, 300_000, &Flood.g/1)
      events = settled_events(trace)
      {wrong, deep, paired} = check(events)
      info = Trace.info(trace)

      IO.puts(
        "\n  drops: #{length(events)} events, #{paired} returns paired, #{length(wrong)} wrong, #{info.dropped.queue_full + info.dropped.rate} dropped"
      )

      assert info.dropped.queue_full + info.dropped.rate > 0
      # the processes that lost a return while a call was open are marked
      assert Enum.any?(events, & &1.lost)
      assert wrong == [], "#{length(wrong)} wrong pairs, e.g. #{inspect(Enum.take(wrong, 2))}"

      assert deep == [],
             "#{length(deep)} top-level calls with depth > 0, e.g. #{inspect(Enum.take(deep, 2))}"
    after
      Trace.stop(trace)
    end
  end
end
