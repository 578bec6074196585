defmodule KinoTrace.ClientTest do
  # async: false: the traces and the stats session below count calls of every process
  use ExUnit.Case, async: false

  alias KinoTrace.Client

  describe "a trace that has ended" do
    setup do
      trace = Kino.Trace.calls(["KinoTraceTest.Sample.Math.add/2"], pids: self())
      Kino.Trace.stop(trace)
      %{trace: trace}
    end

    test "is {:error, :ended} to the try_ forms, which the controllers use", %{trace: trace} do
      assert Client.try_subscribe(trace, self()) == {:error, :ended}
      assert Client.try_events(trace, 10) == {:error, :ended}
      assert Client.try_set_patterns(trace, ["Enum.sum/1"]) == {:error, :ended}
      assert Client.try_pause(trace) == {:error, :ended}
      assert Client.try_resume(trace) == {:error, :ended}
      assert Client.request(trace, :tracer) == {:error, :ended}
      # the info it left when it ended; none for a trace that left none (an id no trace
      # has: Client.Final's doctest keeps one for -1)
      assert {:ok, %{status: :stopped}} = Client.try_info(trace)
      assert Client.try_info(%{trace | id: make_ref()}) == {:error, :ended}
    end

    test "raises ArgumentError to the API's users", %{trace: trace} do
      assert_raise ArgumentError, Client.ended_message(), fn -> Kino.Trace.events(trace) end
      assert_raise ArgumentError, Client.ended_message(), fn -> Kino.Trace.pause(trace) end
      assert_raise ArgumentError, Client.ended_message(), fn -> Kino.Trace.subscribe(trace) end

      assert_raise ArgumentError, Client.ended_message(), fn ->
        Client.info(%{trace | id: make_ref()})
      end
    end
  end

  test "a stats session that has ended is {:error, :ended} to try_stats/2, an ArgumentError to the API" do
    stats = Kino.Trace.Stats.start(["KinoTraceTest.Sample.Math.add/2"], pids: self())
    assert {:ok, %Kino.Trace.Stats.Snapshot{}} = Client.try_stats(stats.server, :snapshot)
    Kino.Trace.Stats.stop(stats)

    assert Client.try_stats(stats.server, :snapshot) == {:error, :ended}
    assert Client.try_stats(stats.server, :reset) == {:error, :ended}

    assert_raise ArgumentError, "the stats session has ended (its process is gone)", fn ->
      Kino.Trace.Stats.snapshot(stats)
    end
  end
end
