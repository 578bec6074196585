defmodule KinoTrace.Tracer.LocalFallbackTest do
  # This node on the pure-Erlang tracer, as on a machine that could not build the native
  # one: `config :kino_trace, tracer: :fallback` (the application environment, so not
  # async: it is global while a test here runs).
  use ExUnit.Case, async: false
  use Kino.Trace.Assertions

  import KinoTraceTest.Helpers
  alias Kino.Trace, as: Trace
  alias KinoTraceTest.Sample.Math

  @root Path.expand("../../..", __DIR__)
  @math "KinoTraceTest.Sample.Math"

  # The API's own suites, run again, whole, on the fallback tracer, in a VM of their own
  # whose application environment says `tracer: :fallback` from the start. Left out:
  # suites of the native layer itself (tracer, bounds, cleanup read the native session)
  # and the floods whose numbers are the native tracer's (the fallback's mailbox guard
  # drops under them, as the README says, and captures then report the loss), and tests
  # tagged :native_timing (they stop a trace right after its calls, which the native
  # tracer has queued by then, the fallback maybe not).
  @suites ~w(
    test/kino/trace_test.exs
    test/kino/trace/assertions_test.exs
    test/kino/trace/assertions/untraced_test.exs
    test/kino/trace/calls/messages_test.exs
    test/kino/trace/calls/lifecycle_test.exs
    test/kino/trace/calls/caller_return_to_test.exs
    test/kino/trace/calls/self_tracing_test.exs
    test/kino/trace/calls/own_work_test.exs
    test/kino_trace/session_test.exs
    test/kino/trace/calls/bif_test.exs
    test/kino_trace/widget/payload_test.exs
    test/kino_trace/widget/messages_test.exs
    test/kino/trace/printer_test.exs
    test/kino/trace/stats_test.exs
    test/kino_trace/tracer/local_fallback_test.exs
  )

  setup do
    KinoTraceTest.Helpers.use_fallback_tracer()
  end

  @tag :slow
  @tag timeout: 600_000
  @tag :fallback_suites
  test "the API's suites pass on the fallback tracer" do
    if System.get_env("KINO_TRACE_FALLBACK_RUN") do
      # (this module, inside that run: the run is the outer test's)
      assert Trace.info(Trace.calls([@math])).tracer == {:fallback, reason()}
    else
      {out, status} =
        System.cmd(
          "mix",
          [
            "test",
            "--no-compile",
            "--exclude",
            "fallback_suites",
            "--exclude",
            "native_timing" | @suites
          ],
          cd: @root,
          stderr_to_stdout: true,
          env: [
            {"MIX_ENV", "test"},
            {"KINO_TRACE_FALLBACK_RUN", "1"},
            {"ELIXIR_ERL_OPTIONS", "-kino_trace tracer fallback"}
          ]
        )

      assert status == 0, out
      # ExUnit's closing line: "N tests, 0 failures" (up to Elixir 1.19), or
      # "Result: N passed (...)" (1.20; "Result: M/N passed" when some failed)
      assert out =~ ~r{\d+ tests, 0 failures|Result: \d+ passed}
    end
  end

  test "events/2 and info/1 answer with every call made before them, from any process" do
    trace = Trace.calls(["KinoTraceTest.Sample.Math.echo/1"], return: false, limit: nil)
    parent = self()

    # the calls' trace messages travel to the fallback tracer as signals: a request that
    # came right after them must still see them all
    for round <- 1..300 do
      spawn(fn ->
        Math.echo(round)
        send(parent, {:called, round})
      end)

      Math.echo(round)
      assert_receive {:called, ^round}
      assert Trace.info(trace).accepted == 2 * round
      assert [%{args: [^round]}, %{args: [^round]}] = Trace.events(trace, 2)
    end

    Trace.stop(trace)
  end

  defp reason, do: "the application environment sets kino_trace's :tracer to :fallback"

  test "info/1 says which tracer runs and why; calls, returns and durations come through it" do
    trace = Trace.calls([@math], return: true)
    assert Math.double(2) == 4
    trace_delivered(self())

    assert %{tracer: {:fallback, why}, fallback: %{received: 4, switched_off: 0}} =
             Trace.info(trace)

    assert why == reason()

    assert [
             %{kind: :call, function: :double, depth: 0},
             %{kind: :call, function: :add, depth: 1},
             %{kind: :return, function: :add, return: 4, duration: d1},
             %{kind: :return, function: :double, return: 4, duration: d2}
           ] = Trace.events(trace, 10)

    assert is_integer(d1) and is_integer(d2) and d2 >= d1
    Trace.stop(trace)
  end

  test "capture/3 and the assertions, with the untraced receivers named" do
    {:ok, agent} = Agent.start_link(fn -> 0 end)

    capture =
      Trace.capture([@math], fn ->
        Math.add(1, 2)
        Agent.get(agent, & &1)
        Task.await(Task.async(fn -> Math.echo(:child) end))
      end)

    assert capture.info.tracer == {:fallback, reason()}
    assert Kino.Trace.Capture.complete?(capture)
    assert_called capture, Math.add(1, 2)
    assert_returned capture, Math.echo(:child), :child
    refute_called capture, Math.double(_)
    assert agent in capture.untraced_receivers
  end

  test "limits: the :limit ends the trace at its count, counted as on the native tracer" do
    trace = Trace.calls([@math], return: false, limit: 3)
    for i <- 1..10, do: Math.echo(i)
    trace_delivered(self())
    wait_until(fn -> Trace.info(trace).status == :limit_reached end)
    info = Trace.info(trace)
    assert info.accepted == 3
    assert length(Trace.events(trace, 10)) == 3
    assert info.traced == false
  end

  # The fallback's mailbox guard switches the session's process flags off under a flood
  # (the default is 10 000 messages; 50 here, through the plan's limits) and asks the
  # session to set them again once its mailbox is empty: the trace goes on.
  test "after the mailbox guard switched tracing off, the session sets the flags again" do
    parent = self()
    plan = Kino.Trace.Plan.new!([calls: [@math]], return: false, pids: [self()])
    trace = Trace.run(%{plan | limits: Map.put(plan.limits, :mailbox, 50)})

    for i <- 1..20_000, do: Math.echo(i)
    trace_delivered(self())
    wait_until(fn -> Trace.info(trace).fallback.switched_off > 0 end)

    # once the flags are back, new calls are traced again, of this process only
    wait_until(fn ->
      Math.double(7)
      trace_delivered(parent)
      Enum.any?(Trace.events(trace, 50), &(&1.function == :double))
    end)

    spawn_link(fn -> send(parent, {:other, Math.echo(:other)}) end)
    assert_receive {:other, :other}
    info = Trace.info(trace)
    assert info.dropped.queue_full > 0
    refute Enum.any?(Trace.events(trace, 100_000), &(&1.args == [:other]))
    Trace.stop(trace)
  end

  test "the native layer's functions say the tracer is not there; roundtrip/2 falls back" do
    if KinoTrace.Tracer.loaded?() do
      # here the native tracer is loaded: its roundtrip and the fallback's cut alike
      assert KinoTrace.Tracer.roundtrip(Enum.to_list(1..100), %{max_items: 3}) ==
               :kino_trace_fallback.roundtrip(Enum.to_list(1..100), %{max_items: 3})
    else
      assert_raise RuntimeError, ~r/native tracer is not available/, fn ->
        KinoTrace.Tracer.new_session(self(), %{})
      end
    end
  end

  test "bad limits are refused by the fallback's checks, in the same words" do
    Application.put_env(:kino_trace, :tracer, :fallback)

    assert_raise ArgumentError,
                 ~r/invalid value for :rate: expected a period of at most 86400000 ms/,
                 fn ->
                   Trace.calls([@math], rate: {1, 86_400_001})
                 end
  end
end
