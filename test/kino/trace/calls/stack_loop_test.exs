defmodule Kino.Trace.Calls.StackLoopTest do
  # Issue 23 item 7: a tail-recursive loop in a module with no object file (defined in a
  # script or a Livebook cell), traced with the defaults, grew its stack to 3 MB: the
  # code could not be read, and the stack guard's sampling moved it far too late.
  # async: false: measures stack sizes while tracing.
  use ExUnit.Case, async: false

  alias Kino.Trace

  @moduletag timeout: 120_000

  # A module compiled in memory, as a script or a Livebook cell defines one.
  defp compile_in_memory(source) do
    [{module, _binary}] = Code.compile_string(source)

    on_exit(fn ->
      :code.purge(module)
      :code.delete(module)
    end)

    assert KinoTrace.Plan.TailCalls.cycles(module) == :unknown
    module
  end

  defp spawn_waiting(fun) do
    me = self()
    pid = spawn(fn -> receive(do: (:go -> send(me, {:done, fun.()}))) end)
    on_exit(fn -> Process.exit(pid, :kill) end)
    pid
  end

  test "a tail-recursive loop of a module with no object file keeps its stack under 64 K words, and its calls are traced" do
    module =
      compile_in_memory(~S"""
      defmodule KinoTraceTest.NoObjectLoop do
        def loop(0, acc), do: {acc, elem(Process.info(self(), :stack_size), 1)}
        def loop(n, acc), do: loop(n - 1, acc + 1)
      end
      """)

    pid = spawn_waiting(fn -> module.loop(200_000, 0) end)
    trace = Trace.calls(["KinoTraceTest.NoObjectLoop.loop/2"], pids: pid)
    send(pid, :go)

    # the stack at the loop's last iteration: every frame it ever got is still there
    assert_receive {:done, {200_000, words}}, 60_000
    assert words < 65_536

    info = Trace.info(trace)
    assert info.stack_guarded == 1
    assert info.accepted > 1_000
    events = Trace.events(trace, 10)
    assert length(events) == 10

    assert Enum.all?(
             events,
             &match?(%Kino.Trace.Event{kind: :call, function: :loop, arity: 2}, &1)
           )

    Trace.stop(trace)
    # the guard's session (made at once for such a module) goes with the trace
    assert KinoTraceTest.Helpers.kino_sessions() == []
  end

  test "a deep recursion that is not a tail call keeps its returns" do
    module =
      compile_in_memory(~S"""
      defmodule KinoTraceTest.NoObjectRecursion do
        def depth(0), do: receive(do: (:return -> 0))
        def depth(n), do: 1 + depth(n - 1)
      end
      """)

    pid = spawn_waiting(fn -> module.depth(1_000) end)
    trace = Trace.calls(["KinoTraceTest.NoObjectRecursion.depth/1"], pids: pid)
    send(pid, :go)

    # deep, waiting at the bottom: the session has seen its calls (1 001 of them)
    KinoTraceTest.Helpers.wait_until(fn -> Trace.info(trace).accepted >= 1_001 end)
    Trace.events(trace, 2_000)
    send(pid, :return)
    assert_receive {:done, 1_000}, 10_000
    KinoTraceTest.Helpers.trace_delivered(pid)

    returns = Trace.events(trace, 5_000) |> Enum.filter(&(&1.kind == :return))
    assert length(returns) == 1_001
    assert Trace.info(trace).stack_guarded == 0
    Trace.stop(trace)
  end
end
