defmodule Kino.Trace.SlowCallsTest do
  # Slow calls kept whole (issue 38.2): real traces on both tracers, against waits of
  # known, distinct times (time is the subject: which call is slowest).
  use ExUnit.Case, async: false

  alias KinoTrace.Limits
  alias KinoTraceTest.Sample.Timing

  doctest KinoTrace.Latency.SlowCalls
  doctest KinoTrace.Render.SlowCalls
  doctest KinoTrace.Latency.Kept
  doctest KinoTrace.Widget.SlowPayload

  @tracers [:native, :fallback]

  # b(n) waits n ms, then calls leaf/0 twice
  @b_and_leaf ["KinoTraceTest.Sample.Timing.b/1", "KinoTraceTest.Sample.Timing.leaf/0"]

  # A trace of `patterns` in this process, with `opts`.
  defp trace_self(patterns, opts), do: Kino.Trace.calls(patterns, [pids: self()] ++ opts)

  # What `trace` kept of slow calls, and its events; the trace stopped.
  defp report_and_stop(trace) do
    report = Kino.Trace.slow_calls(trace)
    events = Kino.Trace.events(trace)
    :ok = Kino.Trace.stop(trace)
    {report, events}
  end

  # b(n) for each n of `ns`, captured with the leaves.
  defp capture_b(ns), do: Kino.Trace.capture(@b_and_leaf, fn -> for n <- ns, do: Timing.b(n) end)

  defp ids(events), do: Enum.map(events, &{&1.kind, &1.function})

  # The call ids of `function`'s ends in `events`, slowest first: what the trace measured
  # (the machine is loaded: a short wait may take longer than a long one).
  defp by_duration(events, function) do
    for(e <- events, e.kind in [:return, :exception], e.function == function, do: e)
    |> Enum.sort_by(& &1.duration, :desc)
    |> Enum.map(& &1.call_id)
  end

  for tracer <- @tracers do
    test "slowest: k keeps each function's k slowest calls whole: arguments, result, duration, process, events (#{tracer})" do
      KinoTraceTest.Helpers.use_tracer(unquote(tracer))

      trace = trace_self(@b_and_leaf, slowest: 2)

      # b(n) waits n ms, then calls leaf twice
      for n <- [1, 30, 2, 20, 3], do: Timing.b(n)
      {report, events} = report_and_stop(trace)

      assert [b30, b20] = report.slowest[{Timing, :b, 1}]
      assert [b30.call_id, b20.call_id] == events |> by_duration(:b) |> Enum.take(2)
      assert b30.result == {:return, :ok} and b30.pid == self()
      assert b30.duration >= b20.duration and b20.duration >= 3_000_000
      call = Enum.find(events, &(&1.id == b30.call_id))
      assert b30.args == call.args

      assert ids(b30.events) == [
               {:call, :b},
               {:call, :leaf},
               {:return, :leaf},
               {:call, :leaf},
               {:return, :leaf},
               {:return, :b}
             ]

      assert {hd(b30.events).id, List.last(b30.events).id} == {b30.call_id, b30.end_id}
      assert b30.events_cut == false
      assert length(report.slowest[{Timing, :leaf, 0}]) == 2
      # what the trace kept as it went is what its events give afterwards
      assert Kino.Trace.slow_calls(events, slowest: 2).slowest == report.slowest
      assert {report.slower_than, report.over, report.untracked} == {[], 0, 0}
    end

    test "slower_than: ms keeps every call over it, an exception too, and counts them (#{tracer})" do
      KinoTraceTest.Helpers.use_tracer(unquote(tracer))

      trace =
        trace_self(["KinoTraceTest.Sample.Timing.wait/1", "KinoTraceTest.Sample.Timing.fail/1"],
          slower_than: 15
        )

      for ms <- [1, 20, 2, 25], do: Timing.wait(ms)
      catch_error(Timing.fail(18))
      {report, events} = report_and_stop(trace)

      over =
        for e <- events, e.kind in [:return, :exception], e.duration >= 15_000_000, do: e.call_id

      # at least the waits of 20 and 25 ms and the exception after 18 ms, in their order
      assert Enum.map(report.slower_than, & &1.call_id) == over and length(over) >= 3

      assert Enum.filter(Enum.map(report.slower_than, & &1.args), &(&1 in [[20], [25], [18]])) ==
               [[20], [25], [18]]

      assert {report.over, report.left_out} == {length(over), 0}
      assert {:exception, {:error, %ArgumentError{}}} = List.last(report.slower_than).result
      assert report.slowest == %{}
    end

    test "calls traced without returns (a tail-call loop) keep nothing open (#{tracer})" do
      KinoTraceTest.Helpers.use_tracer(unquote(tracer))

      trace =
        trace_self(
          ["KinoTraceTest.Sample.Timing.looping/1", "KinoTraceTest.Sample.Timing.count_down/1"],
          slowest: 1
        )

      Timing.looping(1_000)
      %{slowest: %{{Timing, :looping, 1} => [loop]}} = Kino.Trace.slow_calls(trace)
      # the loop's 1 001 calls opened nothing, and looping's end closed it
      assert KinoTrace.Client.internals(trace).slow_open_calls == 0
      :ok = Kino.Trace.stop(trace)

      # its events are bounded: the first ones, and its end
      assert length(loop.events) == Limits.default(:slow_call_events) and loop.events_cut
      assert {hd(loop.events).kind, List.last(loop.events).id} == {:call, loop.end_id}
      assert loop.args == [1_000] and loop.result == {:return, :ok}
    end
  end

  test "over the bound, the newest calls over the threshold are kept and the others counted" do
    trace = Kino.Trace.calls(["Enum.sum/1"], pids: self(), slower_than: 0)
    bound = Limits.default(:slower_than_kept)
    for i <- 1..(bound + 3), do: Enum.sum([i])
    report = Kino.Trace.slow_calls(trace)
    events = Kino.Trace.events(trace, 2)
    :ok = Kino.Trace.stop(trace)

    assert {length(report.slower_than), report.over, report.left_out} == {bound, bound + 3, 3}
    assert List.last(report.slower_than).end_id == List.last(events).id
  end

  test "a call the history no longer has keeps its arguments, without its events" do
    trace = trace_self(@b_and_leaf, slowest: 1, history: 3)

    Timing.b(2)
    %{slowest: %{{Timing, :b, 1} => [b]}} = Kino.Trace.slow_calls(trace)
    :ok = Kino.Trace.stop(trace)
    assert {b.args, b.events, b.result} == {[2], nil, {:return, :ok}}
  end

  test "a trace of several nodes (its coordinator) keeps them too" do
    plan =
      Kino.Trace.Plan.new!([calls: ["KinoTraceTest.Sample.Timing.wait/1"]],
        nodes: [node()],
        pids: self(),
        slowest: 1
      )

    {:ok, pid, id} = KinoTrace.Remote.Coordinator.start(self(), plan)
    trace = %Kino.Trace{id: id, session: pid}
    for ms <- [1, 4, 2], do: Timing.wait(ms)
    assert %{slowest: %{{Timing, :wait, 1} => [slow]}} = Kino.Trace.slow_calls(trace)
    events = Kino.Trace.events(trace)
    :ok = Kino.Trace.stop(trace)
    assert slow.call_id == hd(by_duration(events, :wait))
    assert slow.args in [[1], [4], [2]] and [:call, :return] == Enum.map(slow.events, & &1.kind)
  end

  test "a capture, a list of events and a trace without the options give those of their events" do
    capture = capture_b([1, 15, 2])

    # b(n) takes n ms and two leaves' (1 ms each): b(15) is over 12 ms
    report = Kino.Trace.slow_calls(capture, slowest: 1, slower_than: 12)
    assert [b15] = report.slowest[{Timing, :b, 1}]
    assert b15.call_id == hd(by_duration(capture.events, :b))
    assert b15 in report.slower_than
    assert length(b15.events) == 6 and hd(b15.events).id == b15.call_id

    assert Kino.Trace.slow_calls(capture.events, slowest: 1) ==
             Kino.Trace.slow_calls(capture, slowest: 1)

    # a running trace without the options: its last events, with the given ones (5 by default)
    trace = Kino.Trace.calls(["KinoTraceTest.Sample.Timing.wait/1"], pids: self())
    for ms <- [2, 12, 22, 32, 42, 52], do: Timing.wait(ms)
    assert %{slowest: %{{Timing, :wait, 1} => five}} = Kino.Trace.slow_calls(trace)

    assert Enum.map(five, & &1.call_id) ==
             trace |> Kino.Trace.events() |> by_duration(:wait) |> Enum.take(5)

    :ok = Kino.Trace.stop(trace)
  end

  test "an opened file gives the slow calls and the latency of its events (latency/2 gave :ok)" do
    capture = capture_b([1, 15, 2])

    # it kept nothing since a start (KinoTrace.Replay): its events are read
    path =
      Path.join(System.tmp_dir!(), "slow_calls_test_#{System.unique_integer([:positive])}.ktrace")

    on_exit(fn -> File.rm(path) end)
    :ok = Kino.Trace.save(capture, path)
    opened = Kino.Trace.open(path)
    assert Kino.Trace.slow_calls(opened, slowest: 1) == Kino.Trace.slow_calls(capture, slowest: 1)
    assert %{{Timing, :b, 1} => %{count: 3}} = Kino.Trace.latency(opened)
    :ok = Kino.Trace.stop(opened)
  end

  test "the printer prints them: each call as code with its end, then its events" do
    capture =
      Kino.Trace.capture(@b_and_leaf, fn -> Timing.b(1) end)

    {:ok, device} = StringIO.open("")

    :ok =
      Kino.Trace.Printer.print_slow_calls(
        Kino.Trace.slow_calls(capture, slowest: 1, slower_than: 0),
        device: device,
        colors: false
      )

    {_, printed} = StringIO.contents(device)
    lines = String.split(printed, "\n", trim: true)

    assert "KinoTraceTest.Sample.Timing.b/1: the 1 slowest" in lines

    assert Enum.any?(
             lines,
             &(&1 =~ ~r/^  \S+ (µs|ms) #PID<[\d.]+> KinoTraceTest.Sample.Timing.b\(1\) -> :ok$/)
           )

    assert Enum.any?(
             lines,
             &(&1 =~ ~r/^    #PID<[\d.]+>   KinoTraceTest.Sample.Timing.leaf\(\)$/)
           )

    assert "3 calls over the threshold" in lines
  end

  describe "KinoTrace.Latency.SlowCalls on events" do
    alias Kino.Trace.Event
    alias KinoTrace.Latency.SlowCalls

    defp call(id, pid, depth),
      do: %Event{
        id: id,
        kind: :call,
        pid: pid,
        module: M,
        function: :f,
        arity: 1,
        args: [id],
        depth: depth
      }

    defp ret(id, call_id, pid, d, extra \\ []),
      do:
        struct!(
          %Event{
            id: id,
            kind: :return,
            pid: pid,
            module: M,
            function: :f,
            arity: 1,
            call_id: call_id,
            duration: d,
            return: id
          },
          extra
        )

    test "events lost before an event forget the process's open calls; an end without its call keeps no arguments" do
      pid = self()
      acc = SlowCalls.new(slowest: 3) |> SlowCalls.add([call(1, pid, 0), call(2, pid, 1)], nil)
      assert SlowCalls.open_calls(acc) == 2
      # the return of call 2 comes after a loss: the open calls are forgotten
      acc = SlowCalls.add(acc, [ret(5, 2, pid, 100, lost: true)], nil)
      assert SlowCalls.open_calls(acc) == 0
      %{slowest: %{{M, :f, 1} => [slow]}, untracked: 1} = SlowCalls.report(acc)
      assert {slow.args, slow.result, slow.duration} == {nil, {:return, 5}, 100}
    end

    test "the kept calls hold at most :slow_kept_events events in all; past it, calls are kept without them" do
      budget = Limits.default(:slow_kept_events)
      per_call = Limits.default(:slow_call_events)
      pid = self()
      tree = fn _call_id, e -> List.duplicate(e, per_call) end
      n = div(budget, per_call) + 100

      acc =
        for i <- 1..n, reduce: SlowCalls.new(slower_than: 0) do
          acc ->
            SlowCalls.add(acc, [call(2 * i - 1, pid, 0), ret(2 * i, 2 * i - 1, pid, 1_000)], tree)
        end

      %{slower_than: kept} = SlowCalls.report(acc)
      {with_events, without} = Enum.split_with(kept, &is_list(&1.events))
      assert {length(with_events), length(without)} == {div(budget, per_call), 100}
      assert Enum.all?(without, &(&1.events_cut and &1.args != nil))

      # the calls left out past :slower_than_kept give their events' room back
      more = Limits.default(:slower_than_kept)

      acc =
        for i <- (n + 1)..(n + more), reduce: acc do
          acc ->
            SlowCalls.add(acc, [call(2 * i - 1, pid, 0), ret(2 * i, 2 * i - 1, pid, 1_000)], tree)
        end

      %{slower_than: kept} = SlowCalls.report(acc)
      held = kept |> Enum.map(&length(&1.events || [])) |> Enum.sum()
      assert held <= budget and held > budget - 2 * per_call
    end

    test "at most :slow_open_calls open calls are kept in all; the others end without arguments, counted" do
      max = Limits.default(:slow_open_calls)
      pid = self()
      # one process's calls, each inside the one before
      calls = for id <- 1..(max + 1), do: call(id, pid, id - 1)
      acc = SlowCalls.new(slowest: 1) |> SlowCalls.add(calls, nil)
      assert SlowCalls.open_calls(acc) == max
      # the innermost call was not kept: its end has no arguments
      acc = SlowCalls.add(acc, [ret(max + 2, max + 1, pid, 10_000)], nil)
      assert %{slowest: %{{M, :f, 1} => [%{args: nil}]}, untracked: 1} = SlowCalls.report(acc)
      # a kept one's end frees its place
      acc = SlowCalls.add(acc, [ret(max + 3, max, pid, 20_000)], nil)
      assert SlowCalls.open_calls(acc) == max - 1
      assert %{slowest: %{{M, :f, 1} => [%{args: [^max]}]}} = SlowCalls.report(acc)
    end
  end

  test "latency and slow calls give the tracer nothing more than return: true: the same flags, match specs and limits" do
    # (issue 38.5: no per-call work in the traced process beyond return: true; the
    # session does their work as it decodes, KinoTrace.Latency.Kept)
    patterns = ["KinoTraceTest.Sample.Timing.b/1", "KinoTraceTest.Sample.Timing"]
    plain = Kino.Trace.Plan.new!([calls: patterns], pids: self(), return: true)

    kept =
      Kino.Trace.Plan.new!([calls: patterns],
        pids: self(),
        latency: true,
        slowest: 5,
        slower_than: 1
      )

    assert Map.drop(kept, [:options]) == Map.drop(plain, [:options])

    assert Enum.sort(Keyword.drop(kept.options, [:latency, :slowest, :slower_than])) ==
             Enum.sort(Keyword.drop(plain.options, [:latency, :slowest, :slower_than]))
  end

  test "bad options are refused with a clear error, before anything is traced" do
    for {opts, message} <- [
          {[slowest: 0], "invalid value for :slowest: expected a positive integer, got: 0"},
          {[slowest: 101], "invalid value for :slowest: expected at most 100, got: 101"},
          {[slower_than: -1],
           "invalid value for :slower_than: expected a number of milliseconds (0 or more), got: -1"},
          {[slower_than: "5"],
           "invalid value for :slower_than: expected a number of milliseconds (0 or more), got: \"5\""}
        ] do
      error =
        assert_raise ArgumentError, fn ->
          Kino.Trace.calls(["Enum.sum/1"], [pids: self()] ++ opts)
        end

      assert error.message == message
      error = assert_raise ArgumentError, fn -> Kino.Trace.slow_calls([], opts) end
      assert error.message == message
    end

    assert_raise ArgumentError, ~r/expected a Kino.Trace, a Kino.Trace.Capture or a list/, fn ->
      Kino.Trace.slow_calls(:nope)
    end
  end
end
