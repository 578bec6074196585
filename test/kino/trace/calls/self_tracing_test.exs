defmodule Kino.Trace.Calls.SelfTracingTest do
  # Traces must never feed on kino_trace's own work, a failed start leaves nothing,
  # a reloaded module stays traced, and one slow start holds up no other trace.
  # async: false: counts every message on the node.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers

  alias Kino.Trace
  alias KinoTraceTest.Sample.Math

  @moduletag timeout: 120_000

  defp accepted_over(traces, ms) do
    before = Enum.map(traces, &Trace.info(&1).accepted)
    # time is the subject: a rate of events over a window, on an idle node
    Process.sleep(ms)
    Enum.zip_with(traces, before, fn t, n -> Trace.info(t).accepted - n end)
  end

  test "two traces of every process's messages do not feed each other" do
    a = Trace.messages(:all)
    b = Trace.messages(:all)
    # a first window lets the start settle; the second is measured
    _ = accepted_over([a, b], 200)
    [na, nb] = accepted_over([a, b], 1_000)
    # An idle node sends a few messages a second; each session's wake-up recorded by the
    # other made them wake each other forever.
    assert na + nb < 500, "#{na} + #{nb} events in 1 s on an idle node"
    Trace.stop(a)
    Trace.stop(b)
  end

  test "printing every message to the console does not keep the trace running on its own output" do
    # The printer writes to the group leader, which passes it on to the console's I/O
    # processes (user_drv and its writer): their messages must not be traced.
    trace = Trace.messages(:all, print: [colors: false, time: false])
    _ = accepted_over([trace], 200)
    [n] = accepted_over([trace], 1_000)
    Trace.stop(trace)
    assert n < 200, "#{n} events in 1 s on an idle node"
  end

  test "sessions ending: ERTS's trace cleaner, which then hears from every process, is not traced" do
    # After a trace session ends, ERTS's trace cleaner sends every process a clean signal
    # and receives each one's ack: a message per process, per session ended (in a full
    # test run, 93 627 events in 1 s in the test above).
    [cleaner] =
      for pid <- Process.list(),
          Process.info(pid, :initial_call) == {:initial_call, {:erts_trace_cleaner, :start, 0}},
          do: pid

    idle = for _ <- 1..2_000, do: spawn(fn -> receive(do: (:stop -> :ok)) end)
    on_exit(fn -> Enum.each(idle, &Process.exit(&1, :kill)) end)
    trace = Trace.messages(:all, limit: 100_000)

    for _ <- 1..3,
        do: :trace.session_destroy(:trace.session_create(:self_tracing_test, self(), []))

    # its sweeps done: waiting for work, nothing queued
    wait_until(fn ->
      Process.info(cleaner, [:status, :message_queue_len]) == [
        status: :waiting,
        message_queue_len: 0
      ]
    end)

    :ok = Trace.flush(trace)
    from_cleaner = Enum.count(Trace.events(trace, 100_000), &(&1.pid == cleaner))
    Trace.stop(trace)
    assert from_cleaner == 0
  end

  test "kino_trace's own processes are left out of every trace, also those started later" do
    trace = Trace.calls(["Enum.map/2"], return: false)
    # a process kino_trace runs, registered after the trace started
    internal =
      spawn(fn ->
        KinoTrace.Internal.register(self())

        receive do
          :go -> Enum.map([1], & &1)
        end

        receive do
          :never -> :ok
        end
      end)

    wait_until(fn -> internal in KinoTrace.Internal.pids() end)
    send(internal, :go)
    Enum.map([2], & &1)
    events = events_after(trace)
    assert [%{pid: pid, args: [[2], _]}] = Enum.filter(events, &(&1.kind == :call))
    assert pid == self()
    Process.exit(internal, :kill)
    Trace.stop(trace)
  end

  # A widget's process, driven as Kino drives it: every message goes to the controller,
  # whose timers are set as it asks.
  defp widget(controller, init) do
    spawn(fn ->
      {state, effects} = init.()
      widget_loop(controller, state, effects)
    end)
  end

  defp widget_loop(controller, state, effects) do
    for {:send_after, message, ms} <- effects, do: Process.send_after(self(), message, ms)

    receive do
      message ->
        case controller.handle_info(state, message) do
          {:ok, effects, state} -> widget_loop(controller, state, effects)
          :unknown -> widget_loop(controller, state, [])
        end
    end
  end

  @tag :slow
  test "with two trace widgets and a stats widget open on Enum, a trace of Enum.map/2 sees only the user's calls" do
    w1 =
      widget(KinoTrace.Widget.Controller, fn ->
        KinoTrace.Widget.Controller.init(Trace.calls(["Enum"]), interval: 10)
      end)

    w2 =
      widget(KinoTrace.Widget.Controller, fn ->
        KinoTrace.Widget.Controller.init(Trace.calls(["Enum"]), interval: 10)
      end)

    s =
      widget(KinoTrace.Widget.StatsController, fn ->
        KinoTrace.Widget.StatsController.init(Trace.stats(["Enum"]), interval: 50)
      end)

    # the widgets are up (their controllers are running)
    wait_until(fn -> Enum.all?([w1, w2, s], &(&1 in KinoTrace.Internal.pids())) end)

    trace = Trace.calls(["Enum.map/2"], return: false)
    for i <- 1..3, do: Enum.map([i], & &1)
    # the widgets tick (each trace widget once, the stats widget every 50 ms) between the
    # user's calls
    await_received([w1, w2], :tick)
    await_received(s, :refresh, 5)
    for i <- 4..6, do: Enum.map([i], & &1)

    events = events_after(trace)
    pids = events |> Enum.map(& &1.pid) |> Enum.uniq()

    assert pids == [self()],
           "calls from #{inspect(pids -- [self()])} (kino_trace's own) were traced: #{length(events)} events"

    assert length(events) == 6
    Trace.stop(trace)
    Enum.each([w1, w2, s], &Process.exit(&1, :kill))
  end

  test "a dead pid as a target raises ArgumentError naming it, and leaves no session" do
    dead = spawn(fn -> :ok end)
    ref = Process.monitor(dead)
    assert_receive {:DOWN, ^ref, :process, _, _}
    sessions = kino_sessions()

    all_sessions = :trace.session_info(:all)

    starts = [
      fn -> Trace.messages([dead]) end,
      fn -> Trace.processes([dead]) end,
      fn -> Trace.calls([&Math.echo/1], pids: dead) end,
      fn -> Trace.stats([&Math.echo/1], pids: dead) end
    ]

    for start <- starts do
      error = assert_raise ArgumentError, start
      assert error.message =~ inspect(dead)
      assert error.message =~ "not alive"
      # none added (sessions of earlier tests may still be ending meanwhile)
      assert kino_sessions() -- sessions == []
      assert :trace.session_info(:all) -- all_sessions == []
    end
  end

  test "a traced module that is reloaded is traced again" do
    source = """
    defmodule KinoTraceTest.Reloaded do
      def f(x), do: x
    end
    """

    Code.compile_string(source)
    trace = Trace.calls(["KinoTraceTest.Reloaded.f/1"], return: false)
    apply(KinoTraceTest.Reloaded, :f, [1])
    assert [%{args: [1]}] = events_after(trace)

    Code.put_compiler_option(:ignore_module_conflict, true)

    try do
      Code.compile_string(source)
    after
      Code.put_compiler_option(:ignore_module_conflict, false)
    end

    wait_until(fn ->
      apply(KinoTraceTest.Reloaded, :f, [2])
      Enum.any?(events_after(trace), &(&1.args == [2]))
    end)

    assert Trace.info(trace).reapplied >= 1
    Trace.stop(trace)
  end

  test "a module pattern is not applied again while nothing was reloaded" do
    # its probe must be a function the pattern traces, not a compiler-generated one
    trace = Trace.calls(["KinoTraceTest.Sample.Math"], pids: self(), return: false)
    # two re-apply checks (one a tick) pass with nothing reloaded
    await_received(trace.session, :tick, 2)
    assert Trace.info(trace).reapplied == 0
    Trace.stop(trace)
  end

  test "a trace with thousands of patterns does not hold up other traces starting" do
    idle = spawn(fn -> Process.sleep(:infinity) end)

    patterns =
      for m <-
            [
              Enum,
              String,
              Map,
              Keyword,
              Stream,
              Path,
              Range,
              Date,
              NaiveDateTime,
              DateTime,
              Calendar.ISO,
              URI,
              Version,
              Base
            ] ++
              [
                :lists,
                :maps,
                :string,
                :unicode,
                :filename,
                :io_lib,
                :calendar,
                :queue,
                :sets,
                :gb_trees,
                :gb_sets,
                :dict,
                :orddict,
                :proplists,
                :digraph
              ],
          {f, a} <- m.module_info(:exports),
          f != :module_info,
          not String.starts_with?(Atom.to_string(f), "MACRO-"),
          do: {m, f, a}

    # only those traced without a warning (not inlined by the compiler)
    patterns = for {p, {:ok, _, []}} <- KinoTrace.Pattern.parse_each(patterns), do: p

    assert length(patterns) > 1_000
    children = DynamicSupervisor.count_children(KinoTrace.SessionSupervisor).active

    big =
      Task.async(fn ->
        :timer.tc(fn -> Trace.calls(patterns, pids: idle, return: false) end)
      end)

    # the big trace's session is starting
    wait_until(
      fn -> DynamicSupervisor.count_children(KinoTrace.SessionSupervisor).active > children end,
      1_000
    )

    {small_us, small} = :timer.tc(fn -> Trace.calls([&Math.echo/1], return: false) end)
    {big_us, big_trace} = Task.await(big, 60_000)

    assert small_us < big_us / 2,
           "a one-pattern trace took #{div(small_us, 1000)} ms to start while a #{length(patterns)}-pattern one took #{div(big_us, 1000)} ms"

    Trace.stop(small)
    Trace.stop(big_trace)
    Process.exit(idle, :kill)
  end
end
