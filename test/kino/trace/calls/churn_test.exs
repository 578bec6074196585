defmodule KinoTraceTest.Hot do
  @moduledoc false
  # What the churn test's loops call: f/1 calls g/1, which calls :ets.insert/2.
  def f(x), do: g(x) + 1

  def g(x) do
    :ets.insert(:kino_trace_churn_test, {rem(x, 100), x})
    x
  end

  # Calls f/1 in a loop until killed.
  def loop(x \\ 0) do
    f(x)
    loop(x + 1)
  end
end

defmodule Kino.Trace.Calls.ChurnTest do
  # Issue 36 item 2: with the traced functions hot, stop/1 took seconds (9-17 of 160 hit
  # the client's 5 s timeout, which kills the session, and info/1 then raised instead of
  # giving the final info) and calls/2 took up to 8 s: ending a session and setting
  # patterns wait for the whole VM, and stop/1 waited for a queue of them.
  # async: false: traces of every process, and loops that keep the machine busy.
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias KinoTraceTest.Hot

  @moduletag timeout: 300_000

  setup do
    owner = spawn(fn -> Process.sleep(:infinity) end)
    :ets.new(:kino_trace_churn_test, [:public, :named_table, write_concurrency: true, heir: :none])
    :ets.give_away(:kino_trace_churn_test, owner, nil)
    loops = for _ <- 1..4, do: spawn(fn -> Hot.loop() end)

    on_exit(fn ->
      # the loops first: they use the table
      for loop <- loops do
        ref = Process.monitor(loop)
        Process.exit(loop, :kill)
        receive(do: ({:DOWN, ^ref, :process, _, _} -> :ok))
      end

      Process.exit(owner, :kill)
    end)
    :ok
  end

  test "info/1 after a stop that had to kill the session gives the trace's final info" do
    trace = Trace.calls(["KinoTraceTest.Hot.f/1"], return: false)
    # a session that does not answer stop/1 in time is killed
    :sys.suspend(trace.session)
    ref = Process.monitor(trace.session)
    assert Trace.stop(trace) == :ok
    assert_receive {:DOWN, ^ref, :process, _, :killed}

    info = Trace.info(trace)
    assert info.status == :stopped
    assert info.patterns == ["KinoTraceTest.Hot.f/1"]
    assert is_integer(info.accepted)
  end
end
