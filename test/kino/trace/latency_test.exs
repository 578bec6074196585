defmodule Kino.Trace.LatencyTest do
  # Latency distributions and flame data from real traces, against workloads of known
  # shape (issue 38.1, 38.3, 38.4).
  use ExUnit.Case, async: false

  alias KinoTrace.Latency.Histogram
  alias KinoTraceTest.Sample.Timing

  @err Histogram.relative_error()
  # scheduling jitter allowed above a wait (the machine is shared and loaded)
  @jitter_us 200_000

  defp exact(sorted, p) do
    rank = max(1, div(round(p * 1000) * length(sorted) + 99_999, 100_000))
    Enum.at(sorted, rank - 1)
  end

  defp close?(got, want), do: abs(got - want) <= want * @err

  describe "latency/2" do
    test "waits of 1, 5 and 20 ms: percentiles within the stated error of the exact ones, and of the waits" do
      waits = [{1, 60}, {5, 20}, {20, 8}]

      capture =
        Kino.Trace.capture(["KinoTraceTest.Sample.Timing.wait/1"], fn ->
          waits
          |> Enum.map(fn {ms, n} -> Task.async(fn -> for _ <- 1..n, do: Timing.wait(ms) end) end)
          |> Enum.each(&Task.await(&1, 30_000))
        end)

      assert capture.dropped |> Map.values() |> Enum.sum() == 0
      assert %{{Timing, :wait, 1} => all} = Kino.Trace.latency(capture)
      assert all.count == 88 and all.unknown == 0 and all.exceptions.count == 0

      # each wait apart, from its own events: exact percentiles from the durations
      for {ms, n} <- waits do
        calls =
          for e <- capture.events, e.kind == :call, e.args == [ms], into: MapSet.new(), do: e.id

        events = Enum.filter(capture.events, &(&1.id in calls or &1.call_id in calls))
        %{{Timing, :wait, 1} => one} = Kino.Trace.latency(events)
        durations = for(e <- events, e.kind == :return, do: e.duration / 1000) |> Enum.sort()
        assert one.count == n and length(durations) == n

        for {key, p} <- [min: 0, p50: 50, p90: 90, p99: 99, p999: 99.9, max: 100] do
          got = Map.fetch!(one, key)

          assert close?(got, exact(durations, p)),
                 "#{ms} ms, #{key}: #{got} against #{exact(durations, p)}"

          # a wait never ends early; scheduling may make it late
          assert got >= ms * 1000 * (1 - @err) and got <= ms * 1000 + @jitter_us,
                 "#{ms} ms, #{key}: #{got} µs"
        end

        assert Enum.sum(Enum.map(one.histogram, &elem(&1, 1))) == n
      end
    end

    test "exceptions are counted apart, with their own distribution" do
      capture =
        Kino.Trace.capture(["KinoTraceTest.Sample.Timing.fail/1"], fn ->
          for _ <- 1..3, do: catch_error(Timing.fail(2))
        end)

      assert %{{Timing, :fail, 1} => fail} = Kino.Trace.latency(capture)
      assert {fail.count, fail.p50, fail.unknown} == {0, nil, 0}
      assert fail.exceptions.count == 3
      assert fail.exceptions.min >= 2000 * (1 - @err) and fail.exceptions.max < 2000 + @jitter_us
    end

    test "calls without a known return are unknown, never zero: a tail-call loop and a call still open" do
      capture = Kino.Trace.capture(["KinoTraceTest.Sample.Timing"], fn -> Timing.looping(3) end)
      latency = Kino.Trace.latency(capture)
      # count_down is traced without returns (a tail-call loop): 4 calls, none measured
      assert %{count: 0, min: nil, unknown: 4} = latency[{Timing, :count_down, 1}]
      assert %{count: 1, unknown: 0} = latency[{Timing, :looping, 1}]

      # the same events without looping's return: that call is still open
      open = Enum.reject(capture.events, &(&1.kind == :return and &1.function == :looping))
      assert %{count: 0, unknown: 1} = Kino.Trace.latency(open)[{Timing, :looping, 1}]
    end

    test "a running trace with latency: true has every call since its start, beyond its history" do
      for tracer <- [:native, :fallback] do
        if tracer == :fallback, do: KinoTraceTest.Helpers.use_fallback_tracer()

        trace =
          Kino.Trace.calls(["KinoTraceTest.Sample.Timing.leaf/0"],
            pids: self(),
            latency: true,
            history: 4
          )

        for _ <- 1..30, do: Timing.leaf()
        assert %{{Timing, :leaf, 0} => leaf} = Kino.Trace.latency(trace)
        assert {leaf.count, leaf.unknown} == {30, 0}, "#{tracer}"
        assert leaf.min >= 1000 * (1 - @err) and leaf.max < 1000 + @jitter_us
        # without latency: true, the last events only (here 2 calls)
        assert %{{Timing, :leaf, 0} => %{count: 2}} =
                 Kino.Trace.latency(Kino.Trace.events(trace, 4))

        :ok = Kino.Trace.stop(trace)
      end
    end

    test "a trace of several nodes (its coordinator) keeps them too" do
      plan =
        Kino.Trace.Plan.new!([calls: ["KinoTraceTest.Sample.Timing.leaf/0"]],
          nodes: [node()],
          pids: self(),
          latency: true,
          history: 4
        )

      {:ok, pid, id} = KinoTrace.Remote.Coordinator.start(self(), plan)
      trace = %Kino.Trace{id: id, session: pid}
      for _ <- 1..12, do: Timing.leaf()
      assert %{{Timing, :leaf, 0} => %{count: 12, unknown: 0}} = Kino.Trace.latency(trace)
      :ok = Kino.Trace.stop(trace)
    end

    test "a running trace's events; a stats session with latency: true, and a clear error without" do
      trace = Kino.Trace.calls(["KinoTraceTest.Sample.Timing.leaf/0"], pids: self())
      Timing.leaf()
      Timing.leaf()
      :ok = Kino.Trace.flush(trace)
      assert %{{Timing, :leaf, 0} => %{count: 2}} = Kino.Trace.latency(trace)
      :ok = Kino.Trace.stop(trace)

      stats = Kino.Trace.stats(["KinoTraceTest.Sample.Timing.leaf/0"], pids: self())

      assert_raise ArgumentError, ~r/no duration per call: start it with latency: true/, fn ->
        Kino.Trace.latency(stats)
      end

      :ok = Kino.Trace.stop(stats)

      stats =
        Kino.Trace.stats(["KinoTraceTest.Sample.Timing.leaf/0"], pids: self(), latency: true)

      Timing.leaf()
      assert %{{Timing, :leaf, 0} => %{count: 1, unknown: 0}} = Kino.Trace.latency(stats)
      :ok = Kino.Trace.stop(stats)
    end

    test "bad input is refused with a clear error" do
      assert_raise ArgumentError, ~r/expected a Kino.Trace, a Kino.Trace.Capture or a list/, fn ->
        Kino.Trace.latency(:nope)
      end

      assert_raise ArgumentError, ~r/unknown option :lst/, fn ->
        Kino.Trace.latency([], lst: 3)
      end

      assert_raise ArgumentError, ~r/:format/, fn -> Kino.Trace.flame([], format: :svg) end
    end
  end

  # The nested pattern of Timing.run/0, its stacks (root first) and how often each is called.
  @run_stacks [
    ["KinoTraceTest.Sample.Timing.run/0"],
    ["KinoTraceTest.Sample.Timing.run/0", "KinoTraceTest.Sample.Timing.a/0"],
    [
      "KinoTraceTest.Sample.Timing.run/0",
      "KinoTraceTest.Sample.Timing.a/0",
      "KinoTraceTest.Sample.Timing.leaf/0"
    ],
    ["KinoTraceTest.Sample.Timing.run/0", "KinoTraceTest.Sample.Timing.b/1"],
    [
      "KinoTraceTest.Sample.Timing.run/0",
      "KinoTraceTest.Sample.Timing.b/1",
      "KinoTraceTest.Sample.Timing.leaf/0"
    ]
  ]

  defp run_capture do
    Kino.Trace.capture(["KinoTraceTest.Sample.Timing"], fn -> Timing.run() end)
  end

  # folded text -> %{frames => value}
  defp parse(folded) do
    for line <- String.split(folded, "\n", trim: true), into: %{} do
      # (the value is after the last space: a frame may hold one, as " [no return]")
      [value | stack] = line |> String.split(" ") |> Enum.reverse()
      stack = stack |> Enum.reverse() |> Enum.join(" ")
      {String.split(stack, ";"), String.to_integer(value)}
    end
  end

  # The inclusive time (ns) of the calls of `mfa`, from their returns.
  defp inclusive(capture, function) do
    for(e <- capture.events, e.kind == :return, e.function == function, do: e.duration)
    |> Enum.sum()
  end

  describe "flame/2" do
    test "a nested call pattern gives exactly the expected folded lines, and self times add up to each inclusive time" do
      capture = run_capture()
      stacks = capture |> Kino.Trace.flame(unit: :nanosecond) |> parse()
      assert Enum.sort(Map.keys(stacks)) == Enum.sort(@run_stacks)
      assert Enum.all?(Map.values(stacks), &(&1 > 0))

      under = fn prefix ->
        stacks
        |> Enum.filter(fn {s, _} -> List.starts_with?(s, prefix) end)
        |> Enum.map(&elem(&1, 1))
        |> Enum.sum()
      end

      [run, run_a, _, run_b, _] = @run_stacks
      # total of children + self == parent inclusive, at every level
      assert under.(run) == inclusive(capture, :run)
      assert under.(run_a) == inclusive(capture, :a)
      assert under.(run_b) == inclusive(capture, :b)

      assert stacks[run_a ++ ["KinoTraceTest.Sample.Timing.leaf/0"]] +
               stacks[run_b ++ ["KinoTraceTest.Sample.Timing.leaf/0"]] ==
               inclusive(capture, :leaf)

      # leaf waits 1 ms, 4 times: at least 4 ms of self time under the two parents
      leaf_us =
        capture
        |> Kino.Trace.flame()
        |> parse()
        |> Enum.filter(fn {s, _} -> List.last(s) =~ "leaf" end)
        |> Enum.map(&elem(&1, 1))
        |> Enum.sum()

      assert leaf_us >= 4_000 * (1 - @err) and leaf_us < 4_000 + 4 * @jitter_us
    end

    test "callgrind: per function its self time, and per callee its calls and inclusive time" do
      capture = run_capture()
      text = Kino.Trace.flame(capture, format: :callgrind, unit: :nanosecond)
      assert text =~ ~r/\A# callgrind format\nversion: 1\n/
      assert text =~ "\nevents: ns\n"

      blocks =
        text
        |> String.split("\n\n", trim: true)
        |> tl()
        |> Map.new(fn block ->
          ["fn=" <> name, "0 " <> self | calls] = String.split(block, "\n", trim: true)

          calls =
            for [
                  "cfn=" <> callee,
                  "calls=" <> count,
                  "0 " <> cost
                ] <- Enum.chunk_every(calls, 3),
                into: %{},
                do:
                  {callee,
                   {count |> String.split(" ") |> hd() |> String.to_integer(),
                    String.to_integer(cost)}}

          {name, {String.to_integer(self), calls}}
        end)

      name = &"KinoTraceTest.Sample.Timing.#{&1}"
      assert {run_self, %{} = run_calls} = blocks[name.("run/0")]

      assert run_calls == %{
               name.("a/0") => {2, inclusive(capture, :a)},
               name.("b/1") => {1, inclusive(capture, :b)}
             }

      assert run_self + inclusive(capture, :a) + inclusive(capture, :b) ==
               inclusive(capture, :run)

      leaf = name.("leaf/0")
      assert {_, %{^leaf => {2, _}}} = blocks[name.("a/0")]
      assert {_, %{^leaf => {2, _}}} = blocks[name.("b/1")]
      assert {_, leaf_calls} = blocks[name.("leaf/0")]
      assert leaf_calls == %{}

      totals =
        text
        |> String.split("\n")
        |> Enum.find_value(fn
          "totals: " <> n -> String.to_integer(n)
          _ -> nil
        end)

      assert totals == inclusive(capture, :run)
    end

    test "a tail-call loop traced without returns is marked, and makes siblings, never a deep stack" do
      capture = Kino.Trace.capture(["KinoTraceTest.Sample.Timing"], fn -> Timing.looping(50) end)
      assert [{_pid, [root]}] = KinoTrace.Render.CallTree.build(capture.events)
      assert root.mfa == {Timing, :looping, 1}
      assert length(root.children) == 51
      assert Enum.all?(root.children, &(&1.children == [] and &1.duration == nil))

      assert KinoTrace.Render.Flame.frame(hd(root.children)) ==
               "KinoTraceTest.Sample.Timing.count_down/1 [no return]"

      # the loop's time is looping's own (its calls' ends are unknown): one line
      assert [{["KinoTraceTest.Sample.Timing.looping/1"], _}] =
               capture |> Kino.Trace.flame(unit: :nanosecond) |> parse() |> Map.to_list()

      callgrind = Kino.Trace.flame(capture, format: :callgrind)

      assert callgrind =~
               "cfn=KinoTraceTest.Sample.Timing.count_down/1 [no return]\ncalls=51 0\n0 0\n"
    end

    test "a call still open keeps the calls it made under a [no return] frame" do
      capture = run_capture()
      open = Enum.reject(capture.events, &(&1.kind == :return and &1.function == :run))
      stacks = open |> Kino.Trace.flame(unit: :nanosecond) |> parse()
      marked = "KinoTraceTest.Sample.Timing.run/0 [no return]"

      assert Enum.sort(Map.keys(stacks)) ==
               @run_stacks
               |> tl()
               |> Enum.map(fn [_ | rest] -> [marked | rest] end)
               |> Enum.sort()
    end

    test "process: pid keeps one process's stacks; without it they add up over processes" do
      parent = self()

      capture =
        Kino.Trace.capture(["KinoTraceTest.Sample.Timing"], fn ->
          task = Task.async(fn -> Timing.a() end)
          Timing.leaf()
          Task.await(task)
          send(parent, {:task, task.pid})
        end)

      assert_received {:task, task_pid}

      assert Map.keys(parse(Kino.Trace.flame(capture))) |> Enum.sort() ==
               Enum.sort([
                 ["KinoTraceTest.Sample.Timing.a/0"],
                 ["KinoTraceTest.Sample.Timing.a/0", "KinoTraceTest.Sample.Timing.leaf/0"],
                 ["KinoTraceTest.Sample.Timing.leaf/0"]
               ])

      assert Map.keys(parse(Kino.Trace.flame(capture, process: task_pid))) |> Enum.sort() ==
               [
                 ["KinoTraceTest.Sample.Timing.a/0"],
                 ["KinoTraceTest.Sample.Timing.a/0", "KinoTraceTest.Sample.Timing.leaf/0"]
               ]
    end
  end

  describe "native and pure-Erlang tracers" do
    # The frames and counts of one workload: its nested pattern, an exception and a loop.
    defp shape do
      capture =
        Kino.Trace.capture(["KinoTraceTest.Sample.Timing"], fn ->
          Timing.run()
          catch_error(Timing.fail(1))
          Timing.looping(5)
        end)

      frames =
        capture |> Kino.Trace.flame(unit: :nanosecond) |> parse() |> Map.keys() |> Enum.sort()

      counts =
        Map.new(Kino.Trace.latency(capture), fn {mfa, l} ->
          {mfa, {l.count, l.exceptions.count, l.unknown}}
        end)

      {capture.info.tracer, frames, counts}
    end

    test "tracing the same calls at once, beside a CPU hog, they agree: counts, percentiles, folded stacks, slow calls" do
      # Both tracers see one stream of calls (two sessions on the same process): counts
      # and stacks are equal, and each duration differs only by where each tracer read
      # its clock (microseconds against the waits' milliseconds).
      patterns = ["KinoTraceTest.Sample.Timing"]
      opts = [pids: self(), latency: true, slowest: 1]
      native = Kino.Trace.calls(patterns, opts)
      KinoTraceTest.Helpers.use_fallback_tracer()
      fallback = Kino.Trace.calls(patterns, opts)

      assert {Kino.Trace.info(native).tracer, elem(Kino.Trace.info(fallback).tracer, 0)} ==
               {:native, :fallback}

      hog = spawn(fn -> spin(0) end)

      try do
        for ms <- [1, 5, 20, 3], do: Timing.wait(ms)
        Timing.run()
        catch_error(Timing.fail(2))
        Timing.looping(5)
      after
        Process.exit(hog, :kill)
      end

      [n, f] = for t <- [native, fallback], do: Kino.Trace.latency(t)
      assert Map.keys(n) == Map.keys(f)

      for {mfa, nl} <- n, fl = f[mfa] do
        assert {nl.count, nl.unknown, nl.exceptions.count} ==
                 {fl.count, fl.unknown, fl.exceptions.count},
               inspect(mfa)

        for key <- [:min, :p50, :p90, :p99, :max], nl[key] != nil do
          assert abs(nl[key] - fl[key]) <= 2 * @err * nl[key] + 1_000,
                 "#{inspect(mfa)} #{key}: native #{nl[key]} µs, fallback #{fl[key]} µs"
        end
      end

      assert n[{Timing, :wait, 1}].count == 4

      [nf, ff] = for t <- [native, fallback], do: t |> Kino.Trace.flame() |> parse()
      assert Enum.sort(Map.keys(nf)) == Enum.sort(Map.keys(ff))

      [ns, fs] = for t <- [native, fallback], do: Kino.Trace.slow_calls(t).slowest
      assert Map.keys(ns) == Map.keys(fs)
      assert [%{args: [20]}] = ns[{Timing, :wait, 1}]
      assert [%{args: [20]}] = fs[{Timing, :wait, 1}]

      for t <- [native, fallback], do: :ok = Kino.Trace.stop(t)
    end

    # the CPU hog beside the workload: it spins until killed
    defp spin(n), do: spin(n + 1)

    test "agree on the same workload's folded frames and counts" do
      {:native, frames, counts} = shape()
      KinoTraceTest.Helpers.use_fallback_tracer()
      assert {{:fallback, _}, ^frames, ^counts} = shape()

      assert counts[{Timing, :leaf, 0}] == {4, 0, 0}
      assert counts[{Timing, :fail, 1}] == {0, 1, 0}
      assert counts[{Timing, :count_down, 1}] == {0, 0, 6}

      assert frames -- @run_stacks == [
               ["KinoTraceTest.Sample.Timing.fail/1"],
               ["KinoTraceTest.Sample.Timing.looping/1"]
             ]
    end
  end
end
