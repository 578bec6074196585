defmodule KinoTrace.Plan.TailCallsTest do
  use ExUnit.Case, async: true

  alias KinoTrace.Plan.TailCalls
  alias KinoTraceTest.Sample.Loop

  doctest TailCalls

  test "self and mutual tail recursion, through local calls and calls through the module's name" do
    cycles = TailCalls.cycles(Loop)
    assert MapSet.member?(cycles, {:spin, 1})
    assert MapSet.member?(cycles, {:ping, 1})
    assert MapSet.member?(cycles, {:pong, 1})
    # a loop across two modules is not visible in either module
    refute MapSet.member?(cycles, {:bounce, 1})
    refute MapSet.member?(TailCalls.cycles(Loop.Other), {:bounce, 1})
    refute MapSet.member?(cycles, {:start, 1})
  end

  test "with global tracing only functions entered through the module's name count" do
    global = TailCalls.cycles(Loop, :global)
    # ping calls __MODULE__.pong/1; pong calls ping/1 locally; spin calls itself locally
    assert MapSet.to_list(global) == [{:pong, 1}]
  end

  test "the server loop of :gen_server is found" do
    cycles = TailCalls.cycles(:gen_server)
    assert Enum.any?(cycles, &match?({:loop, _}, &1))
    assert Enum.any?(cycles, &match?({:handle_msg, _}, &1))
    refute Enum.any?(cycles, &match?({:call, _}, &1))
  end

  test "a module compiled in memory has no object code to read" do
    [{module, _beam}] =
      Code.compile_string(
        "defmodule KinoTraceTest.InMemoryLoop do def loop(n), do: loop(n + 1) end"
      )

    assert TailCalls.cycles(module) == :unknown
    assert TailCalls.cycles(:no_such_module_at_all) == :unknown
  end

  test "results are cached per module version" do
    TailCalls.cycles(Loop)
    assert [{Loop, md5, %{local: _, global: _}}] = :ets.lookup(TailCalls, Loop)
    assert md5 == Loop.module_info(:md5)
  end
end
