defmodule Kino.Trace.Assertions.LossTest do
  # A capture that lost events must say so: its calls are incomplete, so no assertion on
  # it may pass (refute_called least of all). Real traces, the real NIF.
  use ExUnit.Case, async: true
  use Kino.Trace.Assertions
  import KinoTraceTest.AssertionFailure

  alias Kino.Trace.Capture
  alias KinoTraceTest.Sample.Math

  doctest Kino.Trace.Capture

  @patterns ["KinoTraceTest.Sample.Math.echo/1", "KinoTraceTest.Sample.Math.add/2"]
  @echoes 300_000

  defp echoes_then_add(n, opts \\ []) do
    Kino.Trace.capture(
      @patterns,
      fn ->
        for i <- 1..n, do: Math.echo(i)
        Math.add(1, 2)
      end,
      opts
    )
  end

  defp total(dropped), do: dropped |> Map.values() |> Enum.sum()

  # Every assertion on an incomplete capture fails, whatever the calls say, and the
  # message says how many events were dropped, why, and how to avoid it.
  defp assert_every_assertion_fails(trace) do
    refute Capture.complete?(trace)
    dropped = total(trace.dropped)

    errors = [
      failure(do: assert_called(trace, Math.add(1, 2))),
      failure(do: assert_called(trace, Math.add(_, _), times: 1)),
      failure(do: assert_called(trace, Math.echo(_), times: 0)),
      failure(do: refute_called(trace, Math.add(_, _))),
      failure(do: refute_called(trace, Math.echo(:never))),
      failure(do: assert_returned(trace, Math.add(1, 2), 3)),
      failure(do: assert_raised_in(trace, Math.add(_, _), ArgumentError)),
      failure(do: assert_called_in_order(trace, [Math.echo(1), Math.add(1, 2)]))
    ]

    for error <- errors do
      assert error.message =~ "The capture is incomplete: "
      assert error.message =~ "No assertion on it can be trusted"
      assert error.message =~ "To capture every event:"

      if dropped > 0,
        do: assert(error.message =~ "incomplete: #{dropped} of its events were dropped")

      if trace.truncated, do: assert(error.message =~ "the trace ended before the block did")

      for {reason, n} <- trace.dropped, n > 0 do
        assert error.message =~ ~r/^    #{n} dropped .*\(#{reason}\)$/m
      end
    end

    errors
  end

  describe "the issue's scenario (echo/1 300 000 times, then add/2)" do
    # With the queue the issue ran with (the default of calls/2), the session cannot keep
    # up and most runs lose events (the issue: add/2 missing in 7 of 10 runs). Each run
    # must then either hold every event or fail every assertion, saying why. (The test
    # below makes the loss certain; here it depends on the machine.)
    @tag :slow
    @tag timeout: 300_000
    test "20 times with the issue's queue: each capture holds every event, or every assertion on it fails" do
      for run <- 1..20 do
        trace = echoes_then_add(@echoes, queue: [events: 100_000, bytes: 64 * 1024 * 1024])
        check_run(trace, run)
      end
    end

    # With the capture's defaults (a queue as big as the limit), nothing is lost.
    @tag :slow
    @tag timeout: 300_000
    test "with the capture's defaults, it holds every event" do
      trace = echoes_then_add(@echoes)
      check_run(trace, 1)
      assert Capture.complete?(trace)
    end
  end

  defp check_run(trace, run) do
    assert trace.result == 3

    # add/2 was called: refute_called must never pass, lossy capture or not.
    error = failure(do: refute_called(trace, Math.add(_, _)))

    # The counters are read after every event of the block was queued or dropped: each
    # call is held with its return (2 events), held with its return dropped, or dropped
    # (its return is then never traced: 1 event). So what the capture holds plus what
    # it dropped is the whole block. (The queue's event cap binds long before its byte
    # cap here, so no call passes the VM's check and is then dropped with its return
    # still traced.)
    calls = Enum.count(trace.events, &(&1.kind == :call))

    assert length(trace.events) + total(trace.dropped) == @echoes + 1 + calls,
           "run #{run}: #{length(trace.events)} events held, dropped #{inspect(trace.dropped)}"

    assert trace.dropped == trace.info.dropped
    assert trace.truncated == nil

    if Capture.complete?(trace) do
      assert error.message =~ "Expected no call matching"
      assert_called trace, Math.add(1, 2), times: 1
      assert_called trace, Math.echo(_), times: @echoes
      assert_returned trace, Math.add(1, 2), 3
    else
      assert trace.dropped.queue_full > 0
      assert error.message =~ "The capture is incomplete"
      assert_every_assertion_fails(trace)
    end
  end

  describe "every reason for a loss is reported" do
    test "a full queue (the session could not drain while the block ran)" do
      # The session is suspended during the block, so the queue of 10 events fills and
      # every later event is dropped: a loss on any machine. The queue holds 5 calls with
      # their returns; the other 96 calls are dropped (and their returns never traced).
      trace =
        Kino.Trace.capture(
          @patterns,
          fn ->
            sessions = suspend_own_sessions()
            for i <- 1..100, do: Math.echo(i)
            Math.add(1, 2)
            Enum.each(sessions, &:erlang.resume_process/1)
          end,
          queue: [events: 10]
        )

      assert trace.dropped == %{rate: 0, queue_full: 96, max_events: 0, closed: 0, no_memory: 0}
      assert trace.truncated == nil
      assert length(trace.events) == 10

      [error | _] = assert_every_assertion_fails(trace)

      assert error.message == """
             The capture is incomplete: 96 of its events were dropped. No assertion on it \
             can be trusted: a call the capture lacks may still have happened, and counts \
             may be short.

                 96 dropped because the capture's queue was full (the block made events \
             faster than they were collected) (queue_full)

             To capture every event:

               * trace fewer calls: give Kino.Trace.capture/3 narrower patterns (a function \
             rather than a whole module, argument patterns)
               * or give it a bigger queue: the queue: [events: n, bytes: n] option \
             (now queue: [events: 10, bytes: 268435456])\
             """
    end

    test "the limit: the trace ends before the block, later calls are not traced" do
      trace = echoes_then_add(1_000, limit: 100)

      # 50 calls with their returns; then the trace ends.
      assert length(trace.events) == 100
      assert trace.truncated == :limit
      assert trace.dropped.rate == 0 and trace.dropped.queue_full == 0

      [error | _] = assert_every_assertion_fails(trace)
      assert error.message =~ "at its limit of 100 events"
      assert error.message =~ "raise its limit: option (now limit: 100)"
    end

    test "the timeout: the trace ends before the block" do
      trace =
        Kino.Trace.capture(
          @patterns,
          fn ->
            Math.echo(1)
            # time is the subject: the block outlasts the capture's timeout, which must
            # leave the block time to make its first call on a loaded machine (50 ms did not)
            Process.sleep(1_500)
            Math.add(1, 2)
          end,
          timeout: 300
        )

      assert trace.truncated == :timeout
      assert [%{function: :echo}, %{function: :echo}] = trace.events

      [error | _] = assert_every_assertion_fails(trace)
      assert error.message =~ "at its timeout of 300 ms"

      assert error.message =~
               "raise the timeout: option of Kino.Trace.capture/3 (now timeout: 300)"
    end

    test "a timeout the block did not reach is no loss" do
      trace = echoes_then_add(10, timeout: 60_000)
      assert Capture.complete?(trace)
      assert_called trace, Math.add(1, 2)
    end

    test "the rate limit" do
      # 50 events at once, then one per hour: 25 calls with their returns
      trace = echoes_then_add(1_000, rate: {50, 3_600_000})

      assert trace.dropped == %{
               rate: 1_001 - 25,
               queue_full: 0,
               max_events: 0,
               closed: 0,
               no_memory: 0
             }

      assert length(trace.events) == 50

      [error | _] = assert_every_assertion_fails(trace)

      assert error.message =~
               "976 dropped over the capture's rate (now rate: {50, 3600000}) (rate)"

      assert error.message =~ "leave out the rate: option"
    end
  end

  describe "a complete capture" do
    test "has nothing dropped, and its assertions behave as usual" do
      trace = echoes_then_add(1_000)

      assert trace.dropped == %{rate: 0, queue_full: 0, max_events: 0, closed: 0, no_memory: 0}
      assert trace.truncated == nil
      assert Capture.complete?(trace)
      assert Capture.loss_report(trace) == nil
      assert length(trace.events) == 2 * 1_001
      assert_called trace, Math.echo(_), times: 1_000
      refute_called trace, Math.echo(0)

      assert failure(do: refute_called(trace, Math.add(1, 2))).message =~
               "Expected no call matching"
    end

    test "a list of events, or a map without :dropped, says nothing about loss" do
      trace = echoes_then_add(10)

      assert_called trace.events, Math.add(1, 2)
      assert_called %{events: trace.events}, Math.add(1, 2)
    end
  end

  # The capture's own session: the one under kino_trace's supervisor that monitors this
  # process (other tests' sessions monitor theirs).
  defp suspend_own_sessions do
    {:monitored_by, watchers} = Process.info(self(), :monitored_by)

    sessions =
      for {_, pid, _, _} <- DynamicSupervisor.which_children(KinoTrace.SessionSupervisor),
          pid in watchers,
          do: pid

    assert sessions != [], "the capture's session was not found"
    Enum.each(sessions, &:erlang.suspend_process/1)
    sessions
  end
end
