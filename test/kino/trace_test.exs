defmodule Kino.TraceTest do
  # Every trace here follows only processes the test owns (`pids: self()` or a worker),
  # so these tests run concurrently. Traces on every process are in session_test.exs.
  use ExUnit.Case, async: true

  import KinoTraceTest.Helpers

  alias Kino.Trace
  alias Kino.Trace.{Cut, Event}
  alias KinoTraceTest.Sample.{Math, Other, Worker}

  @math "KinoTraceTest.Sample.Math"

  describe "pattern forms, end to end" do
    test "a module name as a string traces every function of it, private ones too" do
      trace = Trace.calls([@math], pids: self())
      assert Math.secret(3) == 7
      assert Other.ping(1) == {:pong, 1}

      assert calls(Trace.events(trace)) == [{:secret, [3]}, {:hidden, [3]}]
    end

    test "Mod.fun traces every arity, Mod.fun/2 one arity" do
      trace = Trace.calls(["#{@math}.add"], pids: self())
      Math.add(1, 2)
      Math.double(5)
      Math.echo(:no)
      assert calls(Trace.events(trace)) == [{:add, [1, 2]}, {:add, [5, 5]}]

      trace = Trace.calls(["#{@math}.add/2"], pids: self())
      Math.add(3, 4)
      Math.echo(:no)
      assert calls(Trace.events(trace)) == [{:add, [3, 4]}]
    end

    test "Mod.fun/* traces every arity" do
      trace = Trace.calls(["#{@math}.fact/*"], pids: self())
      Math.fact(1)
      Math.add(1, 1)
      assert calls(Trace.events(trace)) == [{:fact, [1]}, {:fact, [0]}]
    end

    # BIFs such as :ets.insert/2 are in session_test.exs: on OTP 27.3 any other trace
    # session ending drops a session's BIF trace patterns (erlang/otp#10349).
    test "Erlang functions, with and without arity" do
      trace = Trace.calls([":lists.duplicate/2"], pids: self())
      assert :lists.duplicate(2, :x) == [:x, :x]
      :lists.reverse([1])

      assert [
               %Event{kind: :call, module: :lists, function: :duplicate, arity: 2, args: [2, :x]},
               %Event{kind: :return, return: [:x, :x]}
             ] = Trace.events(trace)

      # without an arity: every arity, the private helper duplicate/3 too
      trace = Trace.calls([":lists.duplicate"], pids: self(), return: false)
      :lists.duplicate(1, :y)

      assert Enum.map(Trace.events(trace), &{&1.arity, &1.args}) == [
               {2, [1, :y]},
               {3, [1, :y, []]},
               {3, [0, :y, [:y]]}
             ]
    end

    test "a module atom, a capture and an MFA tuple" do
      trace = Trace.calls([Other, &Math.echo/1, {Math, :lookup, 2}], pids: self())
      Other.ping(1)
      Math.echo(:hi)
      Math.lookup(:users, 1)
      Math.add(1, 1)

      assert calls(Trace.events(trace)) == [{:ping, [1]}, {:echo, [:hi]}, {:lookup, [:users, 1]}]

      assert Trace.patterns(trace) == [
               "KinoTraceTest.Sample.Other",
               "#{@math}.echo/1",
               "#{@math}.lookup/2"
             ]
    end

    test "argument patterns with literals and _ keep only the matching calls" do
      trace = Trace.calls(["#{@math}.lookup(:users, _)"], pids: self())
      Math.lookup(:users, 1)
      Math.lookup(:posts, 2)
      Math.lookup(:users, "x")
      assert calls(Trace.events(trace)) == [{:lookup, [:users, 1]}, {:lookup, [:users, "x"]}]
    end

    test "a variable used twice must bind equal values" do
      trace = Trace.calls(["#{@math}.add(x, x)"], pids: self())
      Math.add(2, 3)
      Math.add(2, 2)
      assert calls(Trace.events(trace)) == [{:add, [2, 2]}]
    end

    test "guards: length, type checks, comparisons, and/or/not, arithmetic" do
      trace =
        Trace.calls(
          [
            "#{@math}.first(list) when length(list) > 2",
            "#{@math}.echo({:ok, n}) when is_integer(n) and n > 10",
            "#{@math}.lookup(a, b) when is_atom(a) or (is_integer(b) and not (b == 3))",
            "#{@math}.add(a, b) when a * 2 + b == 10"
          ],
          pids: self()
        )

      Math.first([1, 2, 3])
      Math.first([1])
      Math.echo({:ok, 11})
      Math.echo({:ok, 5})
      Math.echo({:ok, "11"})
      Math.echo(:other)
      Math.lookup(:t, "k")
      Math.lookup("t", 4)
      Math.lookup("t", 3)
      Math.add(4, 2)
      Math.add(1, 1)

      assert calls(Trace.events(trace)) == [
               {:first, [[1, 2, 3]]},
               {:echo, [{:ok, 11}]},
               {:lookup, [:t, "k"]},
               {:lookup, ["t", 4]},
               {:add, [4, 2]}
             ]
    end

    test "maps and lists in argument patterns" do
      trace =
        Trace.calls(
          ["#{@math}.echo(%{id: id}) when id > 0", "#{@math}.first([h | _]) when h == :x"],
          pids: self()
        )

      Math.echo(%{id: 1, name: "a"})
      Math.echo(%{id: 0})
      Math.echo(%{name: "b"})
      Math.first([:x, :y])
      Math.first([:y, :x])

      assert calls(Trace.events(trace)) == [{:echo, [%{id: 1, name: "a"}]}, {:first, [[:x, :y]]}]
    end

    test "two argument patterns on one function trace calls matching either" do
      trace =
        Trace.calls(["#{@math}.lookup(:users, _)", "#{@math}.lookup(:posts, _)"],
          pids: self(),
          return: false
        )

      Math.lookup(:users, 1)
      Math.lookup(:posts, 2)
      Math.lookup(:tags, 3)
      assert calls(Trace.events(trace)) == [{:lookup, [:users, 1]}, {:lookup, [:posts, 2]}]
    end

    test "a whole module and an argument pattern on one of its functions: the module wins" do
      for patterns <- [[@math, "#{@math}.echo(:only)"], ["#{@math}.echo(:only)", @math]] do
        trace = Trace.calls(patterns, pids: self(), return: false)
        Math.echo(:only)
        Math.echo(:other)
        Math.add(1, 2)

        assert calls(Trace.events(trace)) == [{:echo, [:only]}, {:echo, [:other]}, {:add, [1, 2]}],
               "patterns #{inspect(patterns)}"
      end
    end

    test "several forms mixed in one list" do
      trace =
        Trace.calls(
          ["#{@math}.add/2", Other, &Math.echo/1, {Math, :fact, 1}, "#{@math}.lookup(:users, _)"],
          pids: self(),
          return: false
        )

      Math.add(1, 2)
      Other.pong(1)
      Math.echo(1)
      Math.fact(0)
      Math.lookup(:posts, 1)
      Math.lookup(:users, 1)
      Math.first([1])

      assert calls(Trace.events(trace)) == [
               {:add, [1, 2]},
               {:pong, [1]},
               {:echo, [1]},
               {:fact, [0]},
               {:lookup, [:users, 1]}
             ]
    end
  end

  describe "options" do
    test ":pids with a pid traces only that process" do
      worker = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: worker)
      Math.echo(:from_test)
      Worker.run(worker, fn -> Math.echo(:from_worker) end)

      assert [
               %Event{kind: :call, pid: ^worker, args: [:from_worker]},
               %Event{kind: :return, pid: ^worker}
             ] =
               Trace.events(trace)
    end

    test ":pids with a registered name, and the event carries the name" do
      name = :"kino_trace_test_worker_#{System.unique_integer([:positive])}"
      worker = Worker.start(name)
      trace = Trace.calls([&Math.echo/1], pids: name)
      Worker.run(worker, fn -> Math.echo(1) end)
      Math.echo(2)

      assert [%Event{pid: ^worker, name: ^name, args: [1]}, %Event{kind: :return, name: ^name}] =
               Trace.events(trace)
    end

    test ":pids with a list of pids and names" do
      name = :"kino_trace_test_worker_#{System.unique_integer([:positive])}"
      named = Worker.start(name)
      other = Worker.start()
      untraced = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: [name, other], return: false)

      for w <- [named, other, untraced], do: Worker.run(w, fn -> Math.echo(w) end)

      assert Enum.map(Trace.events(trace), & &1.pid) == [named, other]
    end

    test ":children traces processes spawned by a traced process only when true" do
      for children <- [true, false] do
        worker = Worker.start()
        trace = Trace.calls([&Math.echo/1], pids: worker, children: children, return: false)
        parent = self()

        child =
          Worker.run(worker, fn ->
            spawn(fn ->
              Math.echo(:in_child)
              send(parent, {:child_done, self()})
            end)
          end)

        assert_receive {:child_done, ^child}, 5_000
        Worker.run(worker, fn -> Math.echo(:in_worker) end)

        events = Trace.events(trace)

        if children do
          assert [{child, [:in_child]}, {worker, [:in_worker]}] ==
                   Enum.map(events, &{&1.pid, &1.args})
        else
          assert [{worker, [:in_worker]}] == Enum.map(events, &{&1.pid, &1.args})
        end
      end
    end

    test ":return true gives return events, false only calls" do
      trace = Trace.calls([&Math.echo/1], pids: self())
      Math.echo(:a)
      assert [%Event{kind: :call}, %Event{kind: :return, return: :a}] = Trace.events(trace)

      trace = Trace.calls([&Math.echo/1], pids: self(), return: false)
      Math.echo(:a)
      assert [%Event{kind: :call}] = Trace.events(trace)
    end

    test ":exceptions reports exceptions raised out of traced calls" do
      trace = Trace.calls(["#{@math}.boom/1"], pids: self())
      assert Math.safe_boom("bad") == {:rescued, "bad"}

      assert [
               %Event{kind: :call, args: ["bad"]},
               %Event{kind: :exception, exception: {:error, %ArgumentError{message: "bad"}}}
             ] =
               Trace.events(trace)

      trace = Trace.calls(["#{@math}.boom/1"], pids: self(), exceptions: false)
      Math.safe_boom("bad")
      assert [%Event{kind: :call}] = Trace.events(trace)
    end

    # return: false with exceptions: true (the default) sets {:exception_trace}, which
    # makes the VM report every return too; the native tracer discards those in
    # enabled, so they never count against :limit, :rate or the :queue caps.
    test ":limit counts only the events the user sees when returns are off" do
      trace = Trace.calls([&Math.echo/1], pids: self(), return: false, limit: 4)
      for i <- 1..10, do: Math.echo(i)
      assert Enum.map(Trace.events(trace), & &1.args) == [[1], [2], [3], [4]]
    end

    test ":exceptions without :return gives exceptions but no returns" do
      trace =
        Trace.calls(["#{@math}.boom/1", "#{@math}.echo/1"],
          pids: self(),
          return: false,
          exceptions: true
        )

      Math.echo(1)
      Math.safe_boom("x")
      assert [:call, :call, :exception] == Enum.map(Trace.events(trace), & &1.kind)
    end

    test ":caller records the caller's MFA" do
      trace = Trace.calls([@math], pids: self(), caller: true)
      Math.secret(1)
      events = Trace.events(trace)
      hidden = Enum.find(events, &(&1.kind == :call and &1.function == :hidden))
      assert hidden.caller == {Math, :secret, 1}

      trace = Trace.calls([@math], pids: self())
      Math.secret(1)
      assert Enum.all?(Trace.events(trace), &(&1.caller == nil))
    end

    test ":local traces private calls only when true" do
      trace = Trace.calls([@math], pids: self(), local: false, return: false)
      Math.secret(1)
      assert calls(Trace.events(trace)) == [{:secret, [1]}]

      trace = Trace.calls([@math], pids: self(), local: true, return: false)
      Math.secret(1)
      assert calls(Trace.events(trace)) == [{:secret, [1]}, {:hidden, [1]}]
    end

    test ":local false refuses a private function by name" do
      assert_raise ArgumentError,
                   ~r/#{@math}.hidden\/1 is private; it can only be traced with local: true/,
                   fn ->
                     Trace.calls(["#{@math}.hidden/1"], pids: self(), local: false)
                   end
    end

    test ":limit gives exactly that many events, then the trace ends" do
      worker = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: worker, limit: 5)
      :ok = Trace.subscribe(trace)
      Worker.run(worker, fn -> for i <- 1..10, do: Math.echo(i) end)

      id = trace.id
      assert_receive {:kino_trace, ^id, {:status, :limit_reached}}, 5_000
      events = Trace.events(trace)
      assert length(events) == 5
      assert Enum.map(events, & &1.kind) == [:call, :return, :call, :return, :call]
      assert Enum.map(Enum.filter(events, &(&1.kind == :call)), & &1.args) == [[1], [2], [3]]

      info = Trace.info(trace)
      assert info.status == :limit_reached
      assert info.traced == false
      assert info.accepted == 5
      assert info.limit == 5

      # tracing has ended: more calls leave no trace
      Worker.run(worker, fn -> Math.echo(:later) end)
      assert length(Trace.events(trace)) == 5
      assert Trace.info(trace).accepted == 5
    end

    test ":rate drops and counts what is over the rate, the trace keeps running" do
      trace =
        Trace.calls([&Math.echo/1],
          pids: self(),
          rate: {4, 600_000},
          return: false,
          exceptions: false
        )

      for i <- 1..50, do: Math.echo(i)

      events = Trace.events(trace)
      info = Trace.info(trace)
      assert Enum.map(events, & &1.args) == [[1], [2], [3], [4]]
      assert info.accepted == 4
      assert info.dropped.rate == 46
      assert info.dropped.queue_full == 0
      assert info.status == :running
      assert info.traced
    end

    test ":queue caps drop and count what does not fit while the session is busy" do
      trace =
        Trace.calls([&Math.echo/1],
          pids: self(),
          queue: [events: 10],
          return: false,
          exceptions: false
        )

      backend = KinoTrace.Client.internals(trace).backend
      # the session cannot drain while suspended: the queue fills up
      :sys.suspend(trace.session)

      try do
        for i <- 1..30, do: Math.echo(i)
        # every call has been taken or dropped before the session drains (the pure-Erlang
        # tracer is a process that may still be working through them)
        KinoTraceTest.Helpers.wait_until(fn ->
          %{accepted: accepted, dropped_queue_full: full} =
            KinoTrace.Backend.counters(backend)

          accepted + full == 30
        end)
      after
        :sys.resume(trace.session)
      end

      events = Trace.events(trace)
      info = Trace.info(trace)
      assert Enum.map(events, &hd(&1.args)) == Enum.to_list(1..10)
      assert info.accepted == 10
      assert info.dropped.queue_full == 20
      assert info.status == :running

      # once drained, there is room again
      Math.echo(:again)
      assert [%Event{args: [:again]}] = Trace.events(trace, 1)
    end

    test ":queue byte cap" do
      trace =
        Trace.calls([&Math.echo/1],
          pids: self(),
          queue: [bytes: 2_000],
          return: false,
          exceptions: false
        )

      :sys.suspend(trace.session)

      try do
        for _ <- 1..50, do: Math.echo(String.duplicate("x", 200))
      after
        :sys.resume(trace.session)
      end

      info = Trace.info(trace)
      assert info.accepted in 1..49
      assert info.dropped.queue_full == 50 - info.accepted
      assert length(Trace.events(trace)) == info.accepted
    end

    test "term caps cut large terms into Kino.Trace.Cut, shown as ..." do
      trace =
        Trace.calls([&Math.echo/1],
          pids: self(),
          max_items: 3,
          max_binary: 4,
          max_depth: 3,
          return: false
        )

      Math.echo(Enum.to_list(1..10))
      Math.echo(String.duplicate("a", 10))
      Math.echo({1, 2, 3, 4, 5})
      Math.echo(%{a: 1, b: 2, c: 3, d: 4})
      Math.echo([[[[[:deep]]]]])
      Math.echo([1, 2])

      [list, bin, tuple, map, deep, small] =
        Enum.map(Trace.events(trace), fn %Event{args: [arg]} -> arg end)

      assert [1, 2, 3, %Cut{kind: :items}] = list
      assert inspect(list) == "[1, 2, 3, ...]"
      assert %Cut{kind: :binary, value: "aaaa", size: 10} = bin
      assert inspect(bin) == ~S("aaaa" <> ...)
      assert %Cut{kind: :tuple, value: [1, 2, 3], size: 5} = tuple
      assert inspect(tuple) == "{1, 2, 3, ...}"
      assert %Cut{kind: :map, size: 4, value: kept} = map
      assert map_size(kept) == 3
      assert inspect(map) =~ ~r/^%\{.*, \.\.\.\}$/
      assert Cut.cut?(deep)
      assert inspect(deep) =~ "..."
      assert small == [1, 2]
      refute Cut.cut?(small)
    end

    test ":max_bytes caps the whole event" do
      trace =
        Trace.calls([&Math.echo/1], pids: self(), max_bytes: 64, max_items: 1_000, return: false)

      Math.echo(Enum.to_list(1..500))
      [%Event{args: [arg]}] = Trace.events(trace)
      assert Cut.cut?(arg)
      assert length(List.flatten(inspect(arg, limit: :infinity) |> String.split(","))) < 500
    end

    test ":timeout ends tracing after the given time" do
      worker = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: worker, timeout: 50)
      :ok = Trace.subscribe(trace)
      id = trace.id
      assert_receive {:kino_trace, ^id, {:status, :timeout}}, 5_000

      Worker.run(worker, fn -> Math.echo(:late) end)
      info = Trace.info(trace)
      assert info.status == :timeout
      refute info.traced
      assert Trace.events(trace) == []
      assert info.accepted == 0
    end

    test ":force allows tracing kino_trace's own modules" do
      assert_raise ArgumentError, ~r/refusing to trace Kino.Trace.Cut/, fn ->
        Trace.calls(["Kino.Trace.Cut.cut?/1"], pids: self())
      end

      worker = Worker.start()
      trace = Trace.calls(["Kino.Trace.Cut.cut?/1"], pids: worker, force: true)
      Worker.run(worker, fn -> Cut.cut?(:x) end)

      assert [%Event{function: :cut?, args: [:x]}, %Event{kind: :return, return: false}] =
               Trace.events(trace)
    end

    test ":history keeps only the most recent events" do
      trace =
        Trace.calls([&Math.echo/1], pids: self(), history: 3, return: false, exceptions: false)

      for i <- 1..7, do: Math.echo(i)
      assert Enum.map(Trace.events(trace), & &1.args) == [[5], [6], [7]]
      assert Trace.info(trace).delivered == 7
    end
  end

  describe "pairing, durations and depth" do
    test "a return pairs with its call and has a duration within the wall time" do
      trace = Trace.calls(["#{@math}.busy/1"], pids: self())
      t0 = System.monotonic_time(:nanosecond)
      Math.busy(20_000)
      wall = System.monotonic_time(:nanosecond) - t0

      [call, return] = Trace.events(trace)
      assert %Event{kind: :call, depth: 0, call_id: nil, duration: nil} = call
      assert %Event{kind: :return, return: 200_010_000, depth: 0} = return
      assert return.call_id == call.id
      assert return.duration > 0
      assert return.duration <= wall
      assert return.duration == return.monotonic - call.monotonic
      assert return.id > call.id
      assert call.pid == self()
      assert call.node == node()
      assert {call.module, call.function, call.arity} == {Math, :busy, 1}
      # system time in microseconds, close to now
      assert abs(call.time - System.os_time(:microsecond)) < 60_000_000
    end

    test "recursive calls nest: depth 0, 1, 2, ... and returns pair inside out" do
      trace = Trace.calls(["#{@math}.fact/1"], pids: self())
      assert Math.fact(3) == 6
      events = Trace.events(trace)

      assert Enum.map(events, &{&1.kind, &1.depth}) == [
               {:call, 0},
               {:call, 1},
               {:call, 2},
               {:call, 3},
               {:return, 3},
               {:return, 2},
               {:return, 1},
               {:return, 0}
             ]

      {calls, returns} = Enum.split(events, 4)
      assert Enum.map(calls, & &1.args) == [[3], [2], [1], [0]]
      assert Enum.map(returns, & &1.return) == [1, 1, 2, 6]
      assert Enum.map(returns, & &1.call_id) == Enum.map(Enum.reverse(calls), & &1.id)
      durations = Enum.map(returns, & &1.duration)
      assert Enum.all?(durations, &(&1 > 0))
      # the outer call lasts at least as long as the inner ones
      assert durations == Enum.sort(durations)
    end

    test "exceptions pair with their call, also through levels that do not catch" do
      trace =
        Trace.calls(["#{@math}.boom/1", "#{@math}.safe_boom/1", "#{@math}.toss/1"], pids: self())

      assert Math.safe_boom("oops") == {:rescued, "oops"}
      assert catch_throw(Math.toss(:ball)) == :ball

      [c1, c2, ex, ret, c3, thrown] = Trace.events(trace)
      assert {c1.function, c1.depth, c2.function, c2.depth} == {:safe_boom, 0, :boom, 1}

      assert %Event{
               kind: :exception,
               function: :boom,
               depth: 1,
               exception: {:error, %ArgumentError{}}
             } = ex

      assert ex.call_id == c2.id
      assert ex.duration > 0

      assert %Event{kind: :return, function: :safe_boom, return: {:rescued, "oops"}, depth: 0} =
               ret

      assert ret.call_id == c1.id
      assert %Event{kind: :call, function: :toss, depth: 0} = c3
      assert %Event{kind: :exception, exception: {:throw, :ball}, depth: 0} = thrown
      assert thrown.call_id == c3.id
    end

    test "pairing is per process" do
      w1 = Worker.start()
      w2 = Worker.start()
      trace = Trace.calls(["#{@math}.fact/1"], pids: [w1, w2])
      Worker.run(w1, fn -> Math.fact(1) end)
      Worker.run(w2, fn -> Math.fact(0) end)

      events = Trace.events(trace)
      by_id = Map.new(events, &{&1.id, &1})

      for %Event{kind: :return} = r <- events do
        call = Map.fetch!(by_id, r.call_id)
        assert call.pid == r.pid
        assert call.depth == r.depth
      end

      assert Enum.map(Enum.filter(events, &(&1.pid == w2)), &{&1.kind, &1.depth}) == [
               {:call, 0},
               {:return, 0}
             ]
    end
  end

  describe "reading a trace" do
    test "events/2 returns the last n events, oldest first" do
      trace = Trace.calls([&Math.echo/1], pids: self(), return: false)
      for i <- 1..5, do: Math.echo(i)
      assert Enum.map(Trace.events(trace, 2), & &1.args) == [[4], [5]]
      assert Enum.map(Trace.events(trace), & &1.args) == [[1], [2], [3], [4], [5]]
      ids = Enum.map(Trace.events(trace), & &1.id)
      assert ids == Enum.sort(ids) and length(Enum.uniq(ids)) == 5
    end

    test "info/1 counters add up" do
      trace = Trace.calls([&Math.echo/1], pids: self())
      for i <- 1..10, do: Math.echo(i)
      Trace.events(trace)
      info = Trace.info(trace)

      assert info.accepted == 20
      assert info.accepted == info.delivered + info.queued + info.discarded
      assert info.delivered == 20
      assert info.dropped == %{rate: 0, queue_full: 0, max_events: 0, closed: 0, no_memory: 0}
      assert info.status == :running
      assert info.patterns == ["#{@math}.echo/1"]
      assert is_float(info.rate)
      assert info.id == trace.id
    end

    test "stream/1 is live and ends when the trace stops" do
      worker = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: worker, return: false)
      task = Task.async(fn -> trace |> Trace.stream() |> Enum.map(& &1.args) end)
      wait_until(fn -> Trace.info(trace).subscribers == 1 end)

      Worker.run(worker, fn -> Math.echo(1) end)
      Worker.run(worker, fn -> Math.echo(2) end)
      Worker.run(worker, fn -> Math.echo(3) end)
      refute Task.yield(task, 50)
      assert Trace.stop(trace) == :ok
      assert Task.await(task, 5_000) == [[1], [2], [3]]
    end

    test "stream/1 can be taken from while the trace runs" do
      worker = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: worker, return: false)
      task = Task.async(fn -> trace |> Trace.stream() |> Enum.take(2) end)
      wait_until(fn -> Trace.info(trace).subscribers == 1 end)
      Worker.run(worker, fn -> for i <- 1..4, do: Math.echo(i) end)

      assert [%Event{args: [1]}, %Event{args: [2]}] = Task.await(task, 5_000)
      # the stream unsubscribed when done; the trace runs on
      wait_until(fn -> Trace.info(trace).subscribers == 0 end)
      assert Trace.info(trace).status == :running
    end

    test "stream/1 of an ended trace is empty" do
      trace = Trace.calls([&Math.echo/1], pids: self(), limit: 1)
      Math.echo(1)
      wait_until(fn -> Trace.info(trace).status == :limit_reached end)
      assert Enum.to_list(Trace.stream(trace)) == []
    end

    test "set_patterns/2 applies good entries, reports bad ones, and new calls follow" do
      trace = Trace.calls(["#{@math}.add/2"], pids: self(), return: false)
      Math.add(1, 1)

      results =
        Trace.set_patterns(trace, [
          "KinoTraceTest.Sample.Other.ping/1",
          "#{@math}.nope/9",
          "Nope.Missing"
        ])

      assert [
               {"KinoTraceTest.Sample.Other.ping/1", :ok},
               {"#{@math}.nope/9", {:error, nope}},
               {"Nope.Missing", {:error, missing}}
             ] = results

      assert nope =~ "nope"
      assert missing =~ "unknown module Nope.Missing"
      assert Trace.patterns(trace) == ["KinoTraceTest.Sample.Other.ping/1"]

      Math.add(2, 2)
      Other.ping(:p)
      assert calls(Trace.events(trace)) == [{:add, [1, 1]}, {:ping, [:p]}]
    end

    test "set_patterns/2 takes text with one pattern per line" do
      trace = Trace.calls(["#{@math}.add/2"], pids: self(), return: false)

      assert [{"#{@math}.echo/1", :ok}, {"#{@math}.first(list) when length(list) > 1", :ok}] =
               Trace.set_patterns(
                 trace,
                 "#{@math}.echo/1\n\n# a comment\n#{@math}.first(list) when length(list) > 1\n"
               )

      Math.echo(1)
      Math.first([1])
      Math.first([1, 2])
      Math.add(1, 1)
      assert calls(Trace.events(trace)) == [{:echo, [1]}, {:first, [[1, 2]]}]
    end

    test "pause/1 and resume/1" do
      trace = Trace.calls([&Math.echo/1], pids: self(), return: false)
      Math.echo(1)
      assert Trace.pause(trace) == :ok
      assert Trace.info(trace).status == :paused
      Math.echo(2)
      assert Trace.resume(trace) == :ok
      assert Trace.info(trace).status == :running
      Math.echo(3)

      assert Enum.map(Trace.events(trace), & &1.args) == [[1], [3]]
    end

    test "set_patterns/2 while paused applies on resume" do
      trace = Trace.calls([&Math.echo/1], pids: self(), return: false)
      :ok = Trace.pause(trace)
      [{_, :ok}] = Trace.set_patterns(trace, [&Other.ping/1])
      Other.ping(1)
      :ok = Trace.resume(trace)
      Other.ping(2)
      Math.echo(3)
      assert calls(Trace.events(trace)) == [{:ping, [2]}]
    end

    test "subscribe/2 delivers batches and status changes, unsubscribe/2 stops them" do
      worker = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: worker, return: false)
      id = trace.id
      assert Trace.subscribe(trace) == :ok

      Worker.run(worker, fn -> Math.echo(:one) end)
      assert_receive {:kino_trace, ^id, {:events, [%Event{args: [:one]}]}}, 5_000

      :ok = Trace.pause(trace)
      assert_receive {:kino_trace, ^id, {:status, :paused}}
      :ok = Trace.resume(trace)
      assert_receive {:kino_trace, ^id, {:status, :running}}

      assert Trace.unsubscribe(trace) == :ok
      Worker.run(worker, fn -> Math.echo(:two) end)
      assert [_, %Event{args: [:two]}] = Trace.events(trace)
      refute_received {:kino_trace, ^id, {:events, _}}

      :ok = Trace.subscribe(trace)
      :ok = Trace.stop(trace)
      assert_receive {:kino_trace, ^id, {:status, :stopped}}
    end

    test "a subscriber is not traced even when it is a traced pid" do
      trace = Trace.calls([&Math.echo/1], pids: self(), return: false)
      Math.echo(:before)
      :ok = Trace.subscribe(trace)
      Math.echo(:after)
      assert Enum.map(Trace.events(trace), & &1.args) == [[:before]]
    end

    test "stop/1 is idempotent and the trace reports it has ended" do
      trace = Trace.calls([&Math.echo/1], pids: self())
      assert Trace.stop(trace) == :ok
      assert Trace.stop(trace) == :ok
      refute Process.alive?(trace.session)

      assert_raise ArgumentError, "the trace has ended (its session process is gone)", fn ->
        Trace.events(trace)
      end

      # its final info stays
      assert %{status: :stopped, traced: false} = Trace.info(trace)
    end

    test "capture/3 returns the block's events and result" do
      capture = Trace.capture(["#{@math}.fact/1"], fn -> Math.fact(2) end)
      assert capture.result == 2

      assert Enum.map(capture.events, &{&1.kind, &1.depth}) == [
               call: 0,
               call: 1,
               call: 2,
               return: 2,
               return: 1,
               return: 0
             ]

      assert capture.patterns == ["#{@math}.fact/1"]
    end

    test "capture/3 follows spawned processes and re-raises" do
      parent = self()

      capture =
        Trace.capture([&Math.echo/1], fn ->
          spawn(fn ->
            Math.echo(:child)
            send(parent, :child_done)
          end)

          receive do
            :child_done -> :ok
          end
        end)

      assert [%Event{args: [:child]}, %Event{kind: :return}] = capture.events

      assert_raise ArgumentError, "inside", fn ->
        Trace.capture([&Math.echo/1], fn -> Math.boom("inside") end)
      end
    end
  end
end
