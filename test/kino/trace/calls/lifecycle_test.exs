defmodule Kino.Trace.Calls.LifecycleTest do
  # A trace after stop/1, a stream that ends, and kino_trace not started (as in a
  # release's `bin/app eval`). async: false: one test stops the application.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers

  alias Kino.Trace
  alias KinoTraceTest.Sample.Math

  test "info/1 after stop/1 gives the final info with status :stopped" do
    trace = Trace.calls([&Math.echo/1], pids: self())
    Math.echo(1)
    events_after(trace)
    :ok = Trace.stop(trace)
    refute Process.alive?(trace.session)

    info = Trace.info(trace)
    assert info.status == :stopped
    assert info.accepted == 2
    assert info.delivered == 2
    assert info.traced == false
  end

  test "a stream of a stopped trace is empty" do
    trace = Trace.calls([&Math.echo/1], pids: self())
    :ok = Trace.stop(trace)
    assert Enum.to_list(Trace.stream(trace)) == []
  end

  test "a stream halted early traces its reader again, as before" do
    trace = Trace.calls([&Math.echo/1], return: false)
    me = self()
    subscribers = Trace.info(trace).subscribers

    spawn(fn ->
      # once the reader has subscribed
      wait_until(fn -> Trace.info(trace).subscribers > subscribers end)
      Math.echo(:from_other)
      send(me, :sent)
    end)

    assert [%{args: [:from_other]}] = trace |> Trace.stream() |> Enum.take(1)
    assert_receive :sent
    # the reader, no longer subscribed, is traced again
    Math.echo(:from_reader)
    events = events_after(trace)
    assert Enum.any?(events, &(&1.args == [:from_reader] and &1.pid == me))
    Trace.stop(trace)
  end

  test "traces start when the application is not running (a release's bin/app eval)" do
    on_exit(fn -> {:ok, _} = Application.ensure_all_started(:kino_trace) end)
    :ok = Application.stop(:kino_trace)
    refute Process.whereis(KinoTrace.SessionSupervisor)

    capture = Trace.capture([&Math.echo/1], fn -> Math.echo(7) end)
    assert [%{kind: :call, args: [7]}, %{kind: :return, return: 7}] = capture.events
    assert Process.whereis(KinoTrace.SessionSupervisor)
  end
end
