defmodule Kino.Trace.StatsTest do
  # Not async: sessions with `pids: :all` count calls from every process, and these
  # tests share the sample module.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers, only: [wait_until: 1]

  alias Kino.Trace.Stats
  alias Kino.Trace.Stats.{Row, Snapshot}
  alias KinoTraceTest.StatsSample, as: S

  @tick {S, :tick, 1}

  # Sessions end when their owner (the test process) exits; wait for that, so the next
  # test (here or in another synchronous module) starts with none left.
  setup do
    on_exit(fn -> wait_until(fn -> stats_servers() == [] end) end)
  end

  defp stats_servers do
    for {_, pid, _, [KinoTrace.Stats.Server]} <-
          DynamicSupervisor.which_children(KinoTrace.SessionSupervisor),
        is_pid(pid),
        do: pid
  end

  defp session_alive?(stats) do
    weak = Stats.info(stats).session
    Enum.member?(:trace.session_info(:all), weak)
  end

  describe "counts" do
    test "are exact for 1000 calls from each of 2 processes, with a per-process breakdown" do
      stats = Stats.start(["KinoTraceTest.StatsSample.tick/1"])
      p1 = S.in_process(fn -> S.ticks(1000) end)
      p2 = S.in_process(fn -> S.ticks(1000) end)

      snapshot = Stats.snapshot(stats)
      assert %Snapshot{calls: 2000, rows: [row]} = snapshot
      assert %Row{mfa: @tick, calls: 2000} = row

      assert Enum.sort(Enum.map(row.processes, &{&1.pid, &1.calls})) ==
               Enum.sort([{p1, 1000}, {p2, 1000}])

      assert row.per_call_us == row.time_us / 2000
      Stats.stop(stats)
    end

    test "count only the given pids" do
      worker = S.worker()
      stats = Stats.start([&S.tick/1], pids: worker)
      S.ticks(10)
      S.run_in(worker, fn -> S.ticks(7) end)
      S.in_process(fn -> S.ticks(5) end)

      assert %Row{calls: 7, processes: [%{pid: ^worker, calls: 7}]} =
               Snapshot.row(Stats.snapshot(stats), @tick)
    end

    test "pids: :new counts only processes spawned later; children: true follows spawns" do
      old = S.worker()
      new_only = Stats.start([@tick], pids: :new)
      S.ticks(2)
      S.run_in(old, fn -> S.ticks(3) end)
      S.in_process(fn -> S.ticks(4) end)
      assert Stats.snapshot(new_only).calls == 4

      parent = S.worker()
      family = Stats.start([@tick], pids: parent, children: true)

      S.run_in(parent, fn ->
        S.ticks(1)
        S.in_process(fn -> S.ticks(5) end)
      end)

      assert %Row{calls: 6, processes: processes} = Snapshot.row(Stats.snapshot(family), @tick)
      assert length(processes) == 2
    end

    test "with time and memory off still count, per process, and honour :pids" do
      worker = S.worker()
      stats = Stats.start([@tick], pids: [worker], time: false, memory: false)
      S.ticks(3)
      S.run_in(worker, fn -> S.ticks(4) end)

      snapshot = Stats.snapshot(stats)
      assert %Snapshot{time?: false, memory?: false, time_us: nil, memory_words: nil} = snapshot

      assert %Row{calls: 4, time_us: nil, memory_words: nil, per_call_us: nil} =
               Snapshot.row(snapshot, @tick)

      # every process: still per process (call_count, which counts in kino_trace's own
      # processes too, is never used)
      all = Stats.start([@tick], time: false, memory: false)
      assert Stats.info(all).counters == [:call_time]
      S.ticks(3)
      me = self()

      assert %Row{calls: 3, time_us: nil, processes: [%{pid: ^me, calls: 3}]} =
               Snapshot.row(Stats.snapshot(all), @tick)
    end

    test "a module pattern counts private functions with local: true, only exported ones with local: false" do
      local = Stats.start([S])
      global = Stats.start([S], local: false)
      S.in_process(fn -> S.outer(1) end)

      # The test process is counted too (it calls in_process/1 and, starting `global`,
      # module_info/1): look at the workload's functions only.
      names = fn stats ->
        for %{mfa: {_, f, _} = mfa} <- Stats.snapshot(stats).rows, f in [:outer, :inner], do: mfa
      end

      assert Enum.sort(names.(local)) == [{S, :inner, 1}, {S, :outer, 1}]
      assert names.(global) == [{S, :outer, 1}]
    end

    test "reset sets the counters to zero and restarts the clock" do
      stats = Stats.start([@tick])
      S.in_process(fn -> S.ticks(10) end)
      KinoTraceTest.Helpers.wait_until(fn -> Stats.snapshot(stats).calls >= 10 end)
      before = Stats.snapshot(stats)
      assert before.calls == 10
      assert :ok = Stats.reset(stats)

      after_reset = Stats.snapshot(stats)
      assert %Snapshot{calls: 0, rows: []} = after_reset
      assert after_reset.elapsed_us < before.elapsed_us

      S.in_process(fn -> S.ticks(2) end)
      assert Stats.snapshot(stats).calls == 2
    end
  end

  describe "the compiler's functions (__info__/1, module_info/0,1...)" do
    test "a module-wide session leaves them out; a pattern that names one counts it" do
      worker = S.worker()
      stats = Stats.start(["KinoTraceTest.StatsSample"], pids: worker)
      named = Stats.start(["KinoTraceTest.StatsSample.__info__/1"], pids: worker)

      S.run_in(worker, fn ->
        S.__info__(:functions)
        S.module_info(:exports)
        S.tick(1)
      end)

      mfas = stats |> Stats.snapshot() |> Map.fetch!(:rows) |> Enum.map(& &1.mfa)
      assert {S, :tick, 1} in mfas
      refute Enum.any?(mfas, fn {_, f, _} -> f in [:__info__, :module_info] end), inspect(mfas)
      assert [%Row{mfa: {S, :__info__, 1}, calls: 1}] = Stats.snapshot(named).rows
      Stats.stop(stats)
      Stats.stop(named)
    end
  end

  describe "time and memory" do
    test "are present, and ordered as the workload makes them" do
      stats =
        Stats.start([
          "KinoTraceTest.StatsSample.tick/1",
          "KinoTraceTest.StatsSample.busy/1",
          "KinoTraceTest.StatsSample.alloc/1",
          "KinoTraceTest.StatsSample.nap/1"
        ])

      S.in_process(fn ->
        for _ <- 1..3 do
          S.busy(5)
          S.tick(1)
          S.alloc(10_000)
          S.nap(5)
        end
      end)

      snapshot = Stats.snapshot(stats)
      row = &Snapshot.row(snapshot, {S, &1, 1})
      busy = row.(:busy)
      tick = row.(:tick)
      alloc = row.(:alloc)
      nap = row.(:nap)

      assert Enum.all?([busy, tick, alloc, nap], &(&1.calls == 3))
      assert busy.time_us > 0 and alloc.time_us > 0
      assert busy.time_us > tick.time_us
      # Time is running time: a sleeping function waits, it does not run.
      assert busy.time_us > nap.time_us
      assert hd(snapshot.rows).mfa in [{S, :busy, 1}, {S, :alloc, 1}]

      # 10 000 list cells are 20 000 words per call.
      assert alloc.memory_words >= 3 * 20_000
      assert alloc.memory_words > tick.memory_words
      assert alloc.memory_words > busy.memory_words

      assert snapshot.time_us == Enum.sum(Enum.map(snapshot.rows, & &1.time_us))
      assert_in_delta Enum.sum(Enum.map(snapshot.rows, & &1.time_share)), 1.0, 1.0e-9

      assert Enum.map(snapshot.rows, & &1.time_us) ==
               Enum.sort(Enum.map(snapshot.rows, & &1.time_us), :desc)
    end

    test "memory: false and time: false leave their figures out" do
      stats = Stats.start([{S, :alloc, 1}], memory: false)
      S.in_process(fn -> S.alloc(100) end)

      assert %Row{calls: 1, memory_words: nil, memory_share: nil} =
               row = Snapshot.row(Stats.snapshot(stats), {S, :alloc, 1})

      assert is_integer(row.time_us)

      stats = Stats.start([{S, :alloc, 1}], time: false)
      S.in_process(fn -> S.alloc(100) end)

      assert %Row{calls: 1, time_us: nil, memory_words: words} =
               Snapshot.row(Stats.snapshot(stats), {S, :alloc, 1})

      assert words >= 200
    end
  end

  describe "two sessions on one function" do
    test "restricted to different pids, each counts its own calls, and reset of one leaves the other" do
      w1 = S.worker()
      w2 = S.worker()
      s1 = Stats.start([@tick], pids: w1)
      s2 = Stats.start([@tick], pids: w2)

      S.run_in(w1, fn -> S.ticks(100) end)
      S.run_in(w2, fn -> S.ticks(50) end)

      assert %Row{calls: 100, processes: [%{pid: ^w1}]} = Snapshot.row(Stats.snapshot(s1), @tick)
      assert %Row{calls: 50, processes: [%{pid: ^w2}]} = Snapshot.row(Stats.snapshot(s2), @tick)

      Stats.reset(s1)
      assert Stats.snapshot(s1).calls == 0
      assert Stats.snapshot(s2).calls == 50

      S.run_in(w1, fn -> S.ticks(1) end)
      assert Stats.snapshot(s1).calls == 1
      assert Stats.snapshot(s2).calls == 50

      Stats.stop(s2)
      S.run_in(w1, fn -> S.ticks(1) end)
      assert Stats.snapshot(s1).calls == 2
    end

    test "on all processes, both count every call, beside a call trace" do
      s1 = Stats.start([@tick])
      s2 = Stats.start([@tick], memory: false)
      trace = Kino.Trace.calls([@tick])

      S.in_process(fn -> S.ticks(20) end)

      assert Stats.snapshot(s1).calls == 20
      assert Stats.snapshot(s2).calls == 20
      Kino.Trace.stop(trace)
    end
  end

  describe "ending" do
    test "stop destroys the trace session and is idempotent" do
      stats = Stats.start([@tick])
      assert session_alive?(stats)
      weak = Stats.info(stats).session
      ref = Process.monitor(stats.server)

      assert :ok = Stats.stop(stats)
      assert_receive {:DOWN, ^ref, :process, _, _}
      KinoTrace.Backend.Reaper.sync()
      refute Enum.member?(:trace.session_info(:all), weak)
      assert :ok = Stats.stop(stats)

      assert_raise ArgumentError, "the stats session has ended (its process is gone)", fn ->
        Stats.snapshot(stats)
      end
    end

    test "stop returns once the server is gone, and ends one that does not answer" do
      stats = Stats.start([@tick])
      assert :ok = Stats.stop(stats)
      refute Process.alive?(stats.server)

      stuck = Stats.start([@tick])
      :ok = :sys.suspend(stuck.server)
      assert :ok = Stats.stop(stuck)
      refute Process.alive?(stuck.server)
    end

    test "the owner's exit destroys the trace session" do
      test = self()

      owner =
        spawn(fn ->
          stats = Stats.start([@tick])
          send(test, {:stats, stats, Stats.info(stats).session})
          receive do: (:never -> :ok)
        end)

      assert_receive {:stats, stats, weak}, 5_000
      assert Enum.member?(:trace.session_info(:all), weak)
      ref = Process.monitor(stats.server)
      Process.exit(owner, :kill)

      assert_receive {:DOWN, ^ref, :process, _, _}, 5_000
      KinoTrace.Backend.Reaper.sync()
      refute Enum.member?(:trace.session_info(:all), weak)
    end

    test "the server is a child of the session supervisor and is never counted" do
      stats = Stats.start([S], pids: :all)

      children =
        for {_, pid, _, _} <- DynamicSupervisor.which_children(KinoTrace.SessionSupervisor),
            do: pid

      assert stats.server in children
      assert {:flags, []} = :trace.info(session_handle(stats), stats.server, :flags)
    end
  end

  defp session_handle(stats), do: KinoTrace.Client.internals(stats.server).otp_session

  describe "bad input" do
    test "bad patterns raise before anything is counted" do
      assert_raise ArgumentError,
                   ~r/invalid trace pattern "Enumm": unknown module Enumm; did you mean Enum\?/,
                   fn ->
                     Stats.start(["Enumm"])
                   end

      assert_raise ArgumentError,
                   ~r/invalid trace pattern "Enum.mpa\/2": Enum.mpa\/2 is not a function; did you mean Enum.map\/2\?/,
                   fn ->
                     Stats.start(["Enum.mpa/2"])
                   end

      assert_raise ArgumentError, "no trace patterns given", fn -> Stats.start([]) end
    end

    test "argument patterns and guards are refused" do
      message =
        ~s{invalid stats pattern "KinoTraceTest.StatsSample.tick(x) when x > 1": statistics count every call, } <>
          ~s{so argument patterns and guards are not supported; use "KinoTraceTest.StatsSample.tick/1"}

      assert_raise ArgumentError, message, fn ->
        Stats.start(["KinoTraceTest.StatsSample.tick(x) when x > 1"])
      end
    end

    test "bad options name the option" do
      assert_raise ArgumentError, "invalid value for :time: expected a boolean, got: 1", fn ->
        Stats.start([@tick], time: 1)
      end

      assert_raise ArgumentError,
                   ~r/^unknown option :memroy \(did you mean :memory\?\)\. Known options: :pids/,
                   fn ->
                     Stats.start([@tick], memroy: false)
                   end

      assert_raise ArgumentError,
                   ~r/^invalid value for :pids: expected :all, :new, :existing/,
                   fn ->
                     Stats.start([@tick], pids: "me")
                   end

      assert_raise ArgumentError,
                   "invalid value for :pids: no process is registered as :no_such_name_here",
                   fn ->
                     Stats.start([@tick], pids: :no_such_name_here)
                   end

      assert_raise ArgumentError, "expected options to be a keyword list, got: :all", fn ->
        Stats.start([@tick], :all)
      end
    end

    test "private functions need local: true" do
      assert_raise ArgumentError, ~r/KinoTraceTest.StatsSample.inner\/1/, fn ->
        Stats.start(["KinoTraceTest.StatsSample.inner/1"], local: false)
      end
    end
  end

  describe "print" do
    test "prints a table of the session" do
      stats = Stats.start([@tick, {S, :alloc, 1}])

      S.in_process(fn ->
        S.ticks(3)
        S.alloc(10)
      end)

      output = ExUnit.CaptureIO.capture_io(fn -> Stats.print(stats) end)
      assert output =~ ~r/^2 functions, 4 calls in /

      assert output =~
               ~r/FUNCTION\s+CALLS\s+TIME µs\s+PER CALL\s+%TIME\s+MEMORY words\s+PER CALL\n/

      assert output =~ ~r/KinoTraceTest.StatsSample.tick\/1\s+3\s/
      assert output =~ ~r/KinoTraceTest.StatsSample.alloc\/1\s+1\s/
      assert output =~ ~r/TOTAL\s+4\s+\d+\s+100.00\s+\d+\n$/
    end
  end
end
