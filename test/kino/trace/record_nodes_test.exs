defmodule Kino.Trace.RecordNodesTest do
  # A recorder of other nodes (issue 37 item 4): the ring is kept on the traced node by
  # kino_trace's agent, bounded there, nothing of it comes here until snapshot/1 fetches
  # it; with the native agent and the pure-Erlang one; the node is left as it was.
  use ExUnit.Case, async: false

  @moduletag :slow
  @moduletag timeout: 180_000

  import KinoTraceTest.Helpers, only: [await_events: 2, wait_until: 1, wait_until: 3]
  import KinoTraceTest.Peers

  alias Kino.Trace
  alias KinoTraceTest.Remote.Echo

  setup_all do
    ensure_distribution()
  end

  # A first trace loads the OTP modules tracing needs (the node's own, they stay).
  defp warmed_footprint(n, tmp) do
    trace = Trace.calls([Echo], nodes: [n])
    :erpc.call(n, Echo, :double, [1])
    await_events(trace, &(&1 != []))
    Trace.stop(trace)
    wait_until(fn -> kino_modules(n) == [] end)
    settled_footprint(n, tmp)
  end

  for agent <- [:auto, :fallback] do
    test "the ring stays on the node, bounded there; snapshot/1 fetches it (agent: #{agent})" do
      {_peer, n, tmp} = bare_peer(:"record_#{unquote(agent)}")
      before = warmed_footprint(n, tmp)

      rec =
        Trace.record(["KinoTraceTest.Remote.Echo.double/1"],
          nodes: [n],
          agent: unquote(agent),
          events: 5,
          return: false
        )

      for x <- 1..12, do: :erpc.call(n, Echo, :double, [x])

      # (the fallback takes in its trace messages as they come: a snapshot may come first)
      snap =
        wait_until(
          fn ->
            snap = Trace.snapshot(rec)
            Enum.map(Trace.events(snap), & &1.args) == Enum.map(8..12, &[&1]) && snap
          end,
          100,
          fn -> "no snapshot of the newest 5: #{inspect(Trace.events(Trace.snapshot(rec)))}" end
        )

      events = Trace.events(snap)
      assert Enum.all?(events, &(&1.node == n and node(&1.pid) == n))
      assert Enum.map(events, & &1.id) == Enum.to_list(1..5)
      assert Trace.info(snap).snapshot.trigger == :manual
      assert [^snap | _] = Trace.snapshots(rec)
      # nothing came here meanwhile: the ring is the node's
      assert Trace.events(rec) == []

      if unquote(agent) == :fallback,
        do: assert({:fallback, _} = Trace.info(rec).nodes[n].tracer),
        else: assert(Trace.info(rec).nodes[n].tracer == :native)

      # a flood into the ring: bounded there, every event accounted for
      :erpc.call(n, :lists, :foreach, [&Echo.double/1, Enum.to_list(1..20_000)])

      info =
        wait_until(
          fn ->
            info = Trace.info(rec)
            r = info.recorder
            node = info.nodes[n]

            node.accepted == r.kept + r.overwritten + node.queued + node.discarded and
              node.accepted > 12 and info
          end,
          500,
          fn -> "not accounted: #{inspect(Trace.info(rec), pretty: true)}" end
        )

      assert info.recorder.kept == 5
      assert info.recorder.overwritten >= 7
      assert info.nodes[n].recorder.kept == 5
      assert info.recorder.snapshots >= 1
      assert length(Trace.events(Trace.snapshot(rec))) == 5

      :ok = Trace.stop(rec)
      assert_clean(n, tmp, before)
      # its snapshots end with it
      refute Process.alive?(snap.session)
    end
  end

  test "a recorder of this node and another: one snapshot of both rings, by time" do
    {_peer, n, _tmp} = bare_peer(:record_both)
    Code.ensure_loaded!(Echo)

    rec =
      Trace.record(["KinoTraceTest.Remote.Echo.double/1"],
        nodes: [node(), n],
        pids: :all,
        return: false
      )

    Echo.double(1)
    :erpc.call(n, Echo, :double, [2])
    Echo.double(3)
    :ok = Trace.flush(rec)

    snap = Trace.snapshot(rec)

    assert for(e <- Trace.events(snap), do: {e.node, e.args}) == [
             {node(), [1]},
             {n, [2]},
             {node(), [3]}
           ]

    assert Trace.info(rec).recorder.kept == 3
    :ok = Trace.stop(rec)
  end

  test "triggers are refused with nodes:, a clear error before anything is traced" do
    {_peer, n, _tmp} = bare_peer(:record_triggers)

    assert_raise ArgumentError, ~r/invalid value for :on: a recorder of other nodes/, fn ->
      Trace.record(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n], on: [exception: true])
    end

    assert kino_modules(n) == []
  end
end
