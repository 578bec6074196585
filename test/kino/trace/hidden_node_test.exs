defmodule Kino.Trace.HiddenNodeTest do
  # Issue 22: Livebook starts its runtime with `--hidden`, so every connection it makes
  # is hidden and `Node.list/0` is empty. `nodes:` must take any connected node, hidden
  # or visible, and `nodes: :all` must cover all of them.
  use ExUnit.Case, async: false

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
    assert Kino.Trace.SmartCell.Names.check_nodes(inspect(n)) == :ok
  end
end
