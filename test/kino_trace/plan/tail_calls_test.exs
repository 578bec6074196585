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

  # Issue 36 item 2: 8 traces of :ets.insert/2 starting at once each read and
  # disassembled :ets (a large module): seconds on a loaded machine. The first to miss
  # analyses it; the others wait for its result.
  test "processes asking at once for a module not yet analysed have it analysed once" do
    # (:dets: a large module no other test looks at)
    :ets.delete(TailCalls, :dets)

    tasks =
      for _ <- 1..8 do
        Task.async(fn ->
          receive do: (:go -> :ok)
          TailCalls.cycles(:dets)
        end)
      end

    pids = Enum.map(tasks, & &1.pid)
    trace = Kino.Trace.calls([":beam_disasm.file/1"], pids: pids, return: false)
    _ = Kino.Trace.info(trace)
    for pid <- pids, do: send(pid, :go)
    [cycles | others] = Task.await_many(tasks)
    assert Enum.all?(others, &(&1 == cycles))
    assert %MapSet{} = cycles
    KinoTraceTest.Helpers.trace_delivered(:all)
    disassembled = for %{kind: :call} <- Kino.Trace.events(trace, 100), do: :disassembled
    Kino.Trace.stop(trace)
    assert disassembled == [:disassembled]
  end

  test "a module claimed by a process that died is analysed by the next one that asks" do
    # (:beam_disasm: a module no other test claims)
    :ets.delete(TailCalls, :beam_disasm)
    md5 = :beam_disasm.module_info(:md5)
    dead = spawn(fn -> :ok end)
    ref = Process.monitor(dead)
    assert_receive {:DOWN, ^ref, :process, _, _}
    true = :ets.insert_new(TailCalls, {{:claim, :beam_disasm, md5}, dead})

    assert %MapSet{} = TailCalls.cycles(:beam_disasm)
    assert :ets.lookup(TailCalls, {:claim, :beam_disasm, md5}) == []
    assert [{:beam_disasm, ^md5, _}] = :ets.lookup(TailCalls, :beam_disasm)
  end
end
