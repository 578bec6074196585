defmodule Kino.Trace.Calls.HiddenNodeTest do
  # Issue 22: Livebook starts its runtime with `--hidden`, so every connection it makes
  # is hidden and `Node.list/0` is empty. `nodes:` must take any connected node, hidden
  # or visible, and `nodes: :all` must cover all of them.
  use ExUnit.Case, async: false

  @moduletag :slow

  import KinoTraceTest.Helpers, only: [await_events: 2]
  import KinoTraceTest.Peers

  alias Kino.Trace.Stats
  alias Kino.Trace.Stats.Snapshot
  alias KinoTraceTest.Remote.Echo

  @moduletag timeout: 180_000

  setup_all do
    ensure_distribution()
  end

  setup do
    {_peer, n, _tmp} = bare_peer(:hidden, hidden: true)
    # the connection is hidden: a visible-only check would not see the node
    refute n in Node.list()
    assert n in Node.list(:hidden)
    {:ok, node: n}
  end

  test "calls/2 traces a node connected hidden, by name and with nodes: :all", %{node: n} do
    for nodes <- [[n], :all] do
      trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: nodes)
      assert n in Map.keys(Kino.Trace.info(trace).nodes)

      42 = :erpc.call(n, Echo, :double, [21])
      events = await_events(trace, &Enum.any?(&1, fn e -> e.kind == :return and e.node == n end))
      assert [%{args: [21]}] = for(e <- events, e.kind == :call, e.node == n, do: e)
      Kino.Trace.stop(trace)
    end
  end

  test "stats/2 counts calls on a node connected hidden", %{node: n} do
    stats = Stats.start(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n])
    :ok = :erpc.call(n, :lists, :foreach, [&Echo.double/1, Enum.to_list(1..25)])
    assert %Snapshot{calls: 25} = Stats.snapshot(stats)
    Stats.stop(stats)
  end

  test "the smart cell's nodes field takes a node connected hidden", %{node: n} do
    assert KinoTrace.SmartCell.Names.check_nodes(inspect(n)) == :ok
  end

  test "the smart cell checks patterns against the nodes the trace is for", %{node: n} do
    # a module the peer has and this node does not
    [{module, binary}] =
      Code.compile_string("defmodule KinoTraceTest.HiddenOnly do\n def go(x), do: x\nend")

    :code.delete(module)
    :code.purge(module)

    {:module, ^module} =
      :erpc.call(n, :code, :load_binary, [module, ~c"hidden_only.beam", binary])

    on_exit(fn -> :code.purge(module) end)
    refute :code.is_loaded(module)

    check = fn nodes ->
      attrs = %{
        "patterns" => "KinoTraceTest.HiddenOnly.go/1\nEnum.mpa/2",
        "nodes" => nodes,
        "node_names" => Atom.to_string(n)
      }

      KinoTrace.SmartCell.Controller.check(KinoTrace.SmartCell.Form.new(attrs)).patterns.results
    end

    # completion offers that node's modules and their functions, this node's none of them
    complete = fn nodes, text ->
      controller =
        KinoTrace.SmartCell.Controller.init(%{
          "nodes" => nodes,
          "node_names" => Atom.to_string(n)
        })

      {[{:reply, "completions", reply}], _} =
        KinoTrace.SmartCell.Controller.handle_event(controller, "complete", %{
          "text" => text,
          "seq" => 1
        })

      Enum.map(reply.items, & &1.insert)
    end

    assert "HiddenOnly" in complete.("some", "KinoTraceTest.Hidden")
    assert complete.("some", "KinoTraceTest.HiddenOnly.g") == ["go/1"]
    assert complete.("some", ":ets.insert_n") == ["insert_new/2"]
    refute "HiddenOnly" in complete.("local", "KinoTraceTest.Hidden")
    assert complete.("local", "KinoTraceTest.HiddenOnly.g") == []
    assert complete.("all", "KinoTraceTest.HiddenOnly.g") == ["go/1"]

    # traced there: the module is known, a typo is named with the node
    assert [%{ok: true}, %{ok: false, error: typo}] = check.("some")
    assert typo =~ "on #{inspect(n)}:" and typo =~ "Enum.map/2"
    # traced here (and everywhere): the module is unknown here
    assert [%{ok: false}, %{ok: false}] = check.("local")
    assert [%{ok: false}, %{ok: false}] = check.("all")
    refute :code.is_loaded(module)
  end
end
