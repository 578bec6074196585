defmodule KinoTrace.Session.DrainPacingTest do
  # async: false: the call counts below are the session's, under a real trace.
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias KinoTraceTest.Sample.Math

  doctest KinoTrace.Session.DrainPacing

  @calls 4_000

  # A steady stream of calls, one every 40 µs or so: a session that drained on every
  # wake-up would take them nearly one at a time, one wake-up each.
  test "a session drains a steady stream at most about once a millisecond, and delivers all of it" do
    {caller, trace} = traced_caller()
    resource = KinoTrace.Client.internals(trace).resource

    elapsed_us =
      run(caller, fn ->
        started = System.monotonic_time(:microsecond)

        for i <- 1..@calls do
          Math.add(i, 1)
          spin_until(System.monotonic_time(:microsecond) + 40)
        end

        System.monotonic_time(:microsecond) - started
      end)

    elapsed_ms = div(elapsed_us, 1000) + 1

    assert received(0) == @calls
    %{wakeups: wakeups, accepted: accepted} = KinoTrace.Tracer.counters(resource)
    assert accepted == @calls

    # one wake-up per drain that emptied the queue, and those are at least 1 ms apart
    assert wakeups <= elapsed_ms + 2,
           "#{wakeups} wake-ups in #{elapsed_ms} ms for #{@calls} calls"

    Trace.stop(trace)
  end

  test "events that arrive while a drain is due are delivered by it" do
    {caller, trace} = traced_caller()

    # bursts after pauses: each pause lets a drain empty the queue
    run(caller, fn ->
      for burst <- 1..20 do
        for i <- 1..10, do: Math.add(burst, i)
        # time is the subject: a pause between bursts, for a drain to fall due
        Process.sleep(2)
      end
    end)

    assert received(0) == 200
    Trace.stop(trace)
  end

  # The producer's path has no fence, so a wake-up can be missed while the session's
  # drain puts the queue to sleep (c_src/core/session_core.hpp, "Wake-up"): that drain
  # arms one more a moment later, which finds such an event. The recheck of an idle
  # queue arms nothing, or an idle session would drain every millisecond forever.
  test "a drain that puts the queue to sleep arms one recheck, and an idle recheck arms none" do
    {caller, trace} = traced_caller()
    %{session: session} = trace
    # the session's receives, in the order it takes them in (one trace session of our own)
    watch = :trace.session_create(:drain_recheck_test, self(), [])
    on_exit(fn -> :trace.session_destroy(watch) end)
    1 = :trace.process(watch, session, true, [:receive])

    # one call after an idle start: its wake-up drains at once (no pacing pending), and
    # that drain empties the queue and puts it to sleep
    run(caller, fn -> Math.add(1, 1) end)
    assert_receive {:kino_trace, _, {:events, [_]}}, 5_000
    # then the recheck, once
    assert_receive {:trace, ^session, :receive, :paced_drain}, 5_000
    # it finds the queue asleep already: nothing more is armed
    refute_receive {:trace, ^session, :receive, :paced_drain}, 200

    Trace.stop(trace)
  end

  # A process that runs what it is sent, traced (the subscriber, this test, is not).
  defp traced_caller do
    caller = spawn_link(&caller_loop/0)
    trace = Trace.calls(["KinoTraceTest.Sample.Math.add/2"], pids: caller, return: false)
    :ok = Trace.subscribe(trace)
    {caller, trace}
  end

  defp caller_loop do
    receive do
      {:run, from, fun} -> send(from, {:ran, fun.()})
    end

    caller_loop()
  end

  defp run(caller, fun) do
    send(caller, {:run, self(), fun})
    assert_receive {:ran, result}, 60_000
    result
  end

  defp spin_until(deadline) do
    if System.monotonic_time(:microsecond) < deadline, do: spin_until(deadline)
  end

  defp received(count) do
    receive do
      {:kino_trace, _, {:events, events}} -> received(count + length(events))
    after
      500 -> count
    end
  end
end
