defmodule Kino.Trace.Calls.StackTest do
  # Issue 12: return tracing must not grow the stack of code that loops through tail
  # calls. async: false: these tests measure stack sizes while tracing and count the
  # trace sessions left behind.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers

  alias Kino.Trace
  alias KinoTraceTest.Sample.Loop

  doctest KinoTrace.Session.StackGuard

  defp stack(pid), do: elem(Process.info(pid, :stack_size), 1)

  defp kill_on_exit(pid), do: on_exit(fn -> Process.exit(pid, :kill) end)

  # Samples `pid`'s stack every 50 ms for `ms` milliseconds; returns the largest size.
  defp max_stack(pid, ms), do: observe(ms, 50, fn -> stack(pid) end) |> Enum.max()

  for {name, loop, pattern} <- [
        {"a self tail-recursive function", :spin, "KinoTraceTest.Sample.Loop.spin/1"},
        {"mutually tail-recursive functions", :ping, "KinoTraceTest.Sample.Loop"}
      ] do
    test "with default options, #{name} traced in an infinite loop keeps its stack bounded" do
      {pid, counter} = Loop.start(&apply(Loop, unquote(loop), [&1]))
      kill_on_exit(pid)
      before = stack(pid)

      trace = Trace.calls([unquote(pattern)], pids: pid)
      iterations = :counters.get(counter, 1)
      growth = max_stack(pid, 1_000) - before

      # still looping, still traced
      assert :counters.get(counter, 1) > iterations + 1_000
      accepted = Trace.info(trace).accepted
      wait_until(fn -> Trace.info(trace).accepted > accepted end)
      assert growth < 1_000

      Trace.stop(trace)
      assert stack(pid) - before < 1_000
      assert kino_sessions() == []
    end
  end

  @tag :slow
  test "tracing :gen_server on an Agent handling 100 000 messages keeps its stack bounded, and nothing stays after stop" do
    {:ok, agent} = Agent.start(fn -> 0 end)
    kill_on_exit(agent)
    Agent.get(agent, & &1)
    before = stack(agent)

    trace = Trace.calls([":gen_server"], pids: agent)
    for _ <- 1..100_000, do: Agent.cast(agent, &(&1 + 1))
    assert Agent.get(agent, & &1, 60_000) == 100_000
    during = stack(agent)
    assert Trace.info(trace).accepted > 100_000

    Trace.stop(trace)
    Agent.get(agent, & &1)

    assert during - before < 1_000
    assert stack(agent) == before
    assert kino_sessions() == []
  end

  test "a module-wide pattern traces tail-recursive functions without returns, in existing and new processes" do
    trace = Trace.calls(["KinoTraceTest.Sample.Loop"], pids: :all)
    :done = Loop.count_down(2)
    {worker, :done} = in_worker(fn -> Loop.count_down(1) end)
    events = events_after(trace)
    Trace.stop(trace)

    me = self()

    assert Enum.map(events, &{&1.pid, &1.kind, &1.function, &1.args, &1.depth}) == [
             {me, :call, :count_down, [2], 0},
             {me, :call, :count_down, [1], 0},
             {me, :call, :count_down, [0], 0},
             {worker, :call, :count_down, [1], 0},
             {worker, :call, :count_down, [0], 0}
           ]
  end

  test "a tail-recursive function named with force: true is traced with its returns" do
    trace = Trace.calls(["KinoTraceTest.Sample.Loop.count_down/1"], pids: self(), force: true)
    :done = Loop.count_down(1)
    events = events_after(trace, self())
    Trace.stop(trace)

    assert [{:call, 0, [1]}, {:call, 1, [0]}, {:return, 1, :done}, {:return, 0, :done}] ==
             Enum.map(events, &{&1.kind, &1.depth, &1.args || &1.return})
  end

  test "with force: true a named infinite tail-recursive loop gets a return frame per call again" do
    {pid, counter} = Loop.start(&Loop.spin/1)
    kill_on_exit(pid)
    trace = Trace.calls(["KinoTraceTest.Sample.Loop.spin/1"], pids: pid, force: true)
    start = :counters.get(counter, 1)
    wait_until(fn -> :counters.get(counter, 1) > start + 1_000 end)
    # a frame per traced call: the stack grows (the stack guard ends it after a while)
    assert stack(pid) > 1_000
    Trace.stop(trace)
  end

  test "the stack guard turns return tracing off for a process whose stack keeps growing through a loop the code does not show" do
    {pid, counter} = Loop.start(&Loop.bounce/1)
    kill_on_exit(pid)

    trace = Trace.calls(["KinoTraceTest.Sample.Loop.bounce/1"], pids: pid)
    wait_until(fn -> Trace.info(trace).stack_guarded == 1 end, 1_000)

    # It stopped growing, and its calls are still traced (without returns).
    size = stack(pid)
    accepted = Trace.info(trace).accepted
    iterations = :counters.get(counter, 1)
    assert max_stack(pid, 500) - size < 1_000
    assert :counters.get(counter, 1) > iterations
    assert Trace.info(trace).accepted > accepted
    assert Trace.info(trace).stack_guarded == 1

    # pause, resume and stop handle the guard's session too
    :ok = Trace.pause(trace)
    paused = Trace.info(trace).accepted
    # a paused trace accepts (almost) nothing while the loop runs on (1 000 times more)
    iterations = :counters.get(counter, 1)
    wait_until(fn -> :counters.get(counter, 1) > iterations + 1_000 end)
    assert Trace.info(trace).accepted - paused < 10

    # (read while paused: a flood would keep events/2 draining)
    events = Trace.events(trace, 10)

    assert length(events) == 10 and
             Enum.all?(events, &(&1.kind == :call and &1.function == :bounce))

    # Depth does not drift: calls without returns open no frame.
    assert Enum.all?(events, &(&1.depth == 0))

    :ok = Trace.resume(trace)
    wait_until(fn -> Trace.info(trace).accepted > paused + 100 end)
    Trace.stop(trace)
    assert kino_sessions() == []
  end

  describe "setting patterns" do
    # Issue 12: every pattern was merged with every other (O(n²)): 10 000 patterns took
    # 24.5 s. These 10 000 share one function, which used to mean 10 000 match specs of
    # 10 000 clauses each; now it is one.
    @tag timeout: 60_000
    test "is linear in the number of patterns" do
      alias KinoTraceTest.Sample.Math

      patterns =
        for i <- 1..10_000,
            do: %KinoTrace.Pattern{
              source: "echo(#{i})",
              module: Math,
              function: :echo,
              arity: 1,
              head: [i],
              call_text: "(#{i})"
            }

      trace = Trace.calls(patterns, pids: self())
      Math.echo(10_001)
      Math.echo(7)
      events = events_after(trace, self())
      assert [{:call, [7]}, {:return, 7}] == Enum.map(events, &{&1.kind, &1.args || &1.return})

      assert [{_, :ok}, {_, :ok}] = Trace.set_patterns(trace, Enum.take(patterns, 2))
      Trace.stop(trace)
    end
  end
end
