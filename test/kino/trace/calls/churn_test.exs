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
    # the bound checked here is the default :setup_wait's (test_helper.exs waits for the
    # setup in every other test)
    previous = Application.fetch_env!(:kino_trace, :setup_wait)
    Application.delete_env(:kino_trace, :setup_wait)
    on_exit(fn -> Application.put_env(:kino_trace, :setup_wait, previous) end)
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
      # the ended traces' OTP sessions destroyed before the next module runs
      KinoTrace.Backend.Reaper.sync()
    end)

    :ok
  end

  # The issue's churn, scaled down: 8 processes each start and stop 5 traces (of f/1, the
  # module, :ets.insert/2 and g/1, with a limit, a rate, returns, a 3-event queue or a
  # 5 ms timeout) while 4 processes call f/1 in a loop. The issue's bounds: 2 s for each.
  @tag :slow
  test "with the traced functions hot, calls/2 and stop/1 each return within 2 s, and info/1 then gives the final info" do
    patterns = [
      "KinoTraceTest.Hot.f/1",
      "KinoTraceTest.Hot",
      ":ets.insert/2",
      "KinoTraceTest.Hot.g/1"
    ]

    options = [
      [limit: 100],
      [rate: {1_000, 1_000}],
      [return: true],
      [queue: [events: 3]],
      [timeout: 5]
    ]

    runs =
      1..8
      |> Enum.map(fn worker ->
        Task.async(fn ->
          for i <- 1..5 do
            pattern = Enum.at(patterns, rem(worker + i, 4))
            opts = Enum.at(options, rem(worker * 5 + i, 5))
            {start_us, trace} = :timer.tc(fn -> Trace.calls([pattern], opts) end)
            {stop_us, :ok} = :timer.tc(fn -> Trace.stop(trace) end)

            %{
              pattern: pattern,
              opts: opts,
              start: div(start_us, 1_000),
              stop: div(stop_us, 1_000),
              info: Trace.info(trace)
            }
          end
        end)
      end)
      |> Task.await_many(:infinity)
      |> List.flatten()

    summary = "calls/2 #{spread(runs, :start)}, stop/1 #{spread(runs, :stop)}"
    IO.puts("churn of #{length(runs)} traces: #{summary}")
    assert Enum.filter(runs, &(&1.start > 2_000)) == [], "calls/2 took more than 2 s: #{summary}"
    assert Enum.filter(runs, &(&1.stop > 2_000)) == [], "stop/1 took more than 2 s: #{summary}"

    for %{info: info, pattern: pattern} <- runs do
      assert info.status in [:stopped, :limit_reached, :timeout]
      assert info.patterns == [pattern]
    end
  end

  defp spread(runs, key) do
    ms = runs |> Enum.map(&Map.fetch!(&1, key)) |> Enum.sort()
    at = fn q -> Enum.at(ms, min(length(ms) - 1, trunc(q * length(ms)))) end
    "p50 #{at.(0.5)} ms, p90 #{at.(0.9)} ms, max #{List.last(ms)} ms"
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

  test ":setup_wait: a trace returned before it is set up answers once it is; a bad value is an error naming it" do
    Application.put_env(:kino_trace, :setup_wait, 0)
    trace = Trace.calls(["KinoTraceTest.Hot.f/1"], pids: self(), return: false)
    # (requests wait for the setup)
    assert Trace.info(trace).patterns == ["KinoTraceTest.Hot.f/1"]
    Hot.f(1)
    :ok = Trace.flush(trace)
    assert [%{kind: :call, args: [1]}] = Trace.events(trace)
    Trace.stop(trace)

    Application.put_env(:kino_trace, :setup_wait, :soon)

    assert_raise ArgumentError, ~r/invalid :setup_wait .* got: :soon/, fn ->
      Trace.calls(["KinoTraceTest.Hot.f/1"])
    end
  end
end
