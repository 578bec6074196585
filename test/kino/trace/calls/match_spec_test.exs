defmodule Kino.Trace.Calls.MatchSpecTest do
  # What the VM runs on each traced call. A pattern that takes every call and asks for
  # nothing more is set without a match spec (`true`): the same events, but the traced
  # process no longer runs a match spec on every call (row 3 of bench/RESULTS.md).
  # Patterns that need one (returns, the caller, a head or a guard) keep theirs.
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias KinoTraceTest.Sample.{Math, Worker}

  @echo "KinoTraceTest.Sample.Math.echo/1"

  defp match_spec(trace, mfa \\ {Math, :echo, 1}) do
    session = KinoTrace.Client.internals(trace).otp_session
    {:match_spec, spec} = :trace.info(session, mfa, :match_spec)
    spec
  end

  defp calls(trace), do: for(%{kind: :call} = e <- Trace.events(trace), do: {e.args, e.caller})

  test "a pattern that takes every call runs no match spec, and its calls keep their arguments" do
    worker = Worker.start()
    trace = Trace.calls([@echo], pids: worker, return: false, exceptions: false)
    assert match_spec(trace) == []

    Worker.run(worker, fn -> Math.echo({:a, [1, 2]}) end)
    assert calls(trace) == [{[{:a, [1, 2]}], nil}]
    :ok = Trace.stop(trace)
  end

  test "a BIF that takes every call still runs none after the session sets its pattern again" do
    worker = Worker.start()
    trace = Trace.calls([":ets.insert/2"], pids: worker, return: false, exceptions: false)
    assert match_spec(trace, {:ets, :insert, 2}) == []

    # the session sets its BIF patterns again on its tick (once a second; OTP 27.3's
    # erlang/otp#10349, see KinoTrace.Backend.Reaper); info/1, answered after the tick,
    # tells it was handled
    KinoTraceTest.Helpers.await_received(trace.session, :tick)
    Trace.info(trace)
    assert match_spec(trace, {:ets, :insert, 2}) == []

    table = :ets.new(:kino_trace_test, [:public])
    Worker.run(worker, fn -> :ets.insert(table, {:b, 2}) end)
    assert [{[_, {:b, 2}], nil}] = calls(trace)
    :ok = Trace.stop(trace)
  end

  test "returns, the caller and a head keep their match spec" do
    worker = Worker.start()

    for {patterns, opts, action} <- [
          {[@echo], [], {:exception_trace}},
          {[@echo], [return: false, exceptions: false, caller: true], {:message, {:caller}}},
          {["KinoTraceTest.Sample.Math.echo(:b)"], [return: false, exceptions: false], nil}
        ] do
      trace = Trace.calls(patterns, [pids: worker] ++ opts)
      assert [{head, _guards, body} | _] = match_spec(trace)
      if action, do: assert(action in body), else: assert(head == [:b])

      Worker.run(worker, fn -> Math.echo(:b) end)
      assert [{[:b], _caller}] = calls(trace)
      :ok = Trace.stop(trace)
    end
  end

  test "on the pure-Erlang tracer, a pattern that takes every call still records its arguments" do
    KinoTraceTest.Helpers.use_fallback_tracer()
    worker = Worker.start()
    trace = Trace.calls([@echo], pids: worker, return: false, exceptions: false)
    assert {:fallback, _} = Trace.info(trace).tracer

    Worker.run(worker, fn -> Math.echo({:a, [1, 2]}) end)
    :ok = Trace.flush(trace)
    assert calls(trace) == [{[{:a, [1, 2]}], nil}]
    :ok = Trace.stop(trace)
  end
end
