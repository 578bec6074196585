defmodule Kino.Trace.Calls.BifTest do
  # OTP 27.3 (erlang/otp#10349): ending any trace session switched off the tracing of
  # BIFs in every other session. kino_trace keeps its own traces of BIFs whole.
  # async: false: counts trace sessions and runs many traces at once itself.
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias Kino.Trace.Event
  alias KinoTraceTest.Sample.{Math, Worker}

  @moduletag timeout: 300_000

  test "a BIF stays traced when another trace ends" do
    worker = Worker.start()
    trace = Trace.calls([":ets.insert/2"], pids: worker)
    other = Trace.calls([&Math.echo/1], pids: self())
    Trace.stop(other)
    table = :ets.new(:kino_trace_test, [:public])
    Worker.run(worker, fn -> :ets.insert(table, {:a, 1}) end)
    assert [%Event{function: :insert}, %Event{kind: :return}] = Trace.events(trace)
    Trace.stop(trace)
  end

  test "a BIF is traced again within a second when another tool ends its trace session" do
    worker = Worker.start()
    trace = Trace.calls([":ets.insert/2"], pids: worker, return: false)
    table = :ets.new(:kino_trace_test, [:public])

    other = :trace.session_create(:another_tool, spawn(fn -> Process.sleep(:infinity) end), [])
    :trace.session_destroy(other)
    # the session sets its BIF patterns again on its tick (once a second); info/1,
    # answered after the tick, tells it was handled
    KinoTraceTest.Helpers.await_received(trace.session, :tick)
    Trace.info(trace)

    Worker.run(worker, fn -> :ets.insert(table, {:b, 2}) end)
    assert [%Event{function: :insert, args: [_, {:b, 2}]}] = Trace.events(trace)
    Trace.stop(trace)
  end

  @tag :slow
  test "parked sessions are bounded: past 1 000 they are destroyed and the traces of BIFs told to set their patterns again" do
    # the count starts from nothing parked: the sessions of earlier tests' traces of BIFs
    # are destroyed once the last of those traces has ended
    KinoTraceTest.Helpers.wait_until(fn -> KinoTrace.Session.Reaper.parked() == 0 end)
    # and no session of an earlier test is still ending, nor the reaper's canary (it goes
    # when the last trace that watches ends): its destroy, parked too while the trace of
    # BIFs below runs, would take the count past 1 000 early
    KinoTraceTest.Helpers.wait_until(fn ->
      Enum.all?(:trace.session_info(:all), fn
        {name, _} when name in [:kino_trace, :kino_trace_canary, :kino_trace_stats] -> false
        _ -> true
      end)
    end)
    me = self()
    bif_trace = spawn(fn -> receive(do: (:reassert_bifs -> send(me, :told))) end)
    KinoTrace.Session.Reaper.bif_trace(bif_trace)
    tracer = spawn(fn -> Process.sleep(:infinity) end)

    sessions = for i <- 1..1_001, do: :trace.session_create(:"kino_trace_reaper_test_#{rem(i, 3)}", tracer, [])
    Enum.each(Enum.take(sessions, 1_000), &KinoTrace.Session.Reaper.destroy/1)
    assert KinoTrace.Session.Reaper.parked() == 1_000
    assert Enum.all?(Enum.take(sessions, 3), &(elem(&1, 1) in :trace.session_info(:all)))

    KinoTrace.Session.Reaper.destroy(List.last(sessions))
    assert KinoTrace.Session.Reaper.parked() == 0
    assert_receive :told, 5_000
    assert Enum.all?(sessions, &(elem(&1, 1) not in :trace.session_info(:all)))
    KinoTrace.Session.Reaper.bif_trace_ended(bif_trace)
    Process.exit(tracer, :kill)
  end

  # As in four async test modules, each capturing :ets.insert/2 thirty times: every
  # capture ending used to switch the others' BIF tracing off (9-15 of 30 missed).
  @tag :slow
  test "four processes capturing :ets.insert/2 thirty times each at once miss nothing, twenty runs in a row" do
    table = :ets.new(:kino_trace_bif_test, [:public])

    for run <- 1..20 do
      missed =
        1..4
        |> Enum.map(fn task ->
          Task.async(fn ->
            Enum.count(1..30, fn i ->
              key = {run, task, i}
              capture = Trace.capture([":ets.insert/2"], fn -> :ets.insert(table, {key, i}) end)
              not Enum.any?(capture.events, &match?(%Event{kind: :call, args: [_, {^key, _}]}, &1))
            end)
          end)
        end)
        |> Enum.map(&Task.await(&1, 60_000))

      assert missed == [0, 0, 0, 0], "run #{run}: captures missed per process: #{inspect(missed)}"
    end

    # every session parked meanwhile is destroyed once no trace of BIFs runs
    assert KinoTrace.Session.Reaper.parked() == 0
    assert for({:kino_trace, _} = s <- :trace.session_info(:all), do: s) == []
  end
end
