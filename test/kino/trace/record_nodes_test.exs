defmodule Kino.Trace.RecordNodesTest do
  # A recorder of other nodes (issue 37 item 4): the ring is kept on the traced node by
  # kino_trace's agent, bounded there, nothing of it comes here until snapshot/1 fetches
  # it; with the native agent and the pure-Erlang one; the node is left as it was.
  use KinoTraceTest.PeerCase, async: false

  import KinoTraceTest.Helpers, only: [wait_until: 1, wait_until: 3]

  alias Kino.Trace
  alias KinoTraceTest.Remote.Echo

  # A bare peer, its footprint once a first trace has come and gone there, and a
  # recorder of `patterns` there with `opts`: {node, tmp, footprint, recorder}.
  defp recording_peer(name, patterns, opts) do
    {_peer, n, tmp} = bare_peer(name)
    before = footprint_after_trace(n, tmp)
    {n, tmp, before, Trace.record(patterns, [nodes: [n]] ++ opts)}
  end

  for agent <- [:auto, :fallback] do
    test "the ring stays on the node, bounded there; snapshot/1 fetches it (agent: #{agent})" do
      {n, tmp, before, rec} =
        recording_peer(:"record_#{unquote(agent)}", ["KinoTraceTest.Remote.Echo.double/1"],
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

  for agent <- [:auto, :fallback] do
    test "triggers run on the node; their snapshots wait there, bounded, until snapshots/1 (agent: #{agent})" do
      {n, tmp, before, rec} =
        recording_peer(:"record_on_#{unquote(agent)}", ["KinoTraceTest.Remote.Echo"],
          agent: unquote(agent),
          snapshots: 2,
          on: [exception: true, match: "KinoTraceTest.Remote.Echo.double(7)"]
        )

      for x <- 1..3, do: :erpc.call(n, Echo, :double, [x])
      catch_error(:erpc.call(n, Echo, :checked, [-1]))
      :erpc.call(n, Echo, :double, [7])

      fired = fn -> Trace.info(rec).recorder.fired end

      wait_until(fn ->
        fired.() == %{exception: 1, match: 1, slower_than: 0, message: 0, telemetry: 0}
      end)

      # nothing came here: the snapshots wait on the node
      assert Trace.info(rec).nodes[n].recorder.snapshots_waiting == 2
      assert Trace.events(rec) == []

      assert [match, exception] = Trace.snapshots(rec)
      assert %{trigger: :exception, pid: pid} = Trace.info(exception).snapshot
      assert node(pid) == n
      # the ring up to its trigger: the calls before it, then the exception raised
      assert [_ | _] = events = Trace.events(exception)
      assert {:exception, :checked} = {List.last(events).kind, List.last(events).function}
      assert [[1], [2], [3]] = for(%{kind: :call, function: :double} = e <- events, do: e.args)
      assert Trace.info(exception).snapshot.event == List.last(events).id

      assert Trace.info(match).snapshot.trigger == :match
      last = match |> Trace.events() |> List.last()
      assert {last.kind, last.args} == {:call, [7]}

      # bounded there: three more fire, two wait (the oldest went first, counted)
      for _ <- 1..3, do: :erpc.call(n, Echo, :double, [7])
      wait_until(fn -> fired.().match == 4 end)

      assert %{snapshots_waiting: 2, snapshots_dropped_waiting: 1} =
               Trace.info(rec).nodes[n].recorder

      assert length(Trace.snapshots(rec)) == 2

      :ok = Trace.stop(rec)
      assert_clean(n, tmp, before)
      refute Process.alive?(match.session)
    end
  end

  # A trigger's snapshot has the calls of its process that led to it, even those the ring
  # overwrote, as a recorder of this node's has them (record_test.exs): the worker there
  # keeps each process's open calls (kino_trace_open_calls). With the native agent and
  # the pure-Erlang one, which read raw events, and the native agent's decoder (which
  # slower_than: has the triggers read).
  for {agent, on} <- [
        auto: [exception: true],
        fallback: [exception: true],
        auto: [exception: true, slower_than: 60_000]
      ] do
    test "a trigger's snapshot has the calls that led to it, even those the ring overwrote (agent: #{agent}, on: #{inspect(Keyword.keys(on))})" do
      {_peer, n, tmp} = bare_peer(:"record_open_#{unquote(agent)}_#{length(unquote(on))}")
      before = footprint_after_trace(n, tmp)

      rec =
        Trace.record(["KinoTraceTest.Remote.Echo"],
          nodes: [n],
          agent: unquote(agent),
          events: 20,
          on: unquote(on),
          after: 2
        )

      # a process there inside nested/2, outer/2 and inner/2
      pid = :erpc.call(n, :erlang, :spawn, [Echo, :nested, [self(), -1]])
      assert_receive {:inside, ^pid}, 10_000
      # the ring overwrites those calls with another process's: 200 events, 20 kept
      :erpc.call(n, :lists, :foreach, [&Echo.double/1, Enum.to_list(1..100)])

      wait_until(fn -> Trace.info(rec).recorder.overwritten >= 3 + 200 - 20 end, 1_000, fn ->
        "not overwritten: #{inspect(Trace.info(rec).recorder)}"
      end)

      # the node keeps that process's open calls (within a quarter of the ring's bytes)
      open_bytes = Trace.info(rec).nodes[n].recorder.open_calls_bytes
      assert open_bytes > 0 and open_bytes == Trace.info(rec).recorder.open_calls_bytes

      # checked(-1) raises, through inner/2 and outer/2
      send(pid, :go)
      snap = wait_until(fn -> match?([_], s = Trace.snapshots(rec)) && hd(s) end)
      info = Trace.info(snap)
      assert %{trigger: :exception, pid: ^pid} = info.snapshot
      events = Trace.events(snap, 1_000)

      assert for(e <- events, e.pid == pid, do: {e.kind, e.function}) == [
               {:call, :nested},
               {:call, :outer},
               {:call, :inner},
               {:call, :checked},
               {:exception, :checked},
               {:exception, :inner},
               {:exception, :outer}
             ]

      # paired with their calls there too, in the order they were made
      [nested, outer, inner | _] = for e <- events, e.pid == pid, do: e
      assert [nested.depth, outer.depth, inner.depth] == [0, 1, 2]
      assert Enum.map(events, & &1.id) == Enum.to_list(1..length(events))

      exception = Enum.find(events, &(&1.kind == :exception and &1.function == :outer))
      assert exception.call_id == outer.id
      # the 3 the ring overwrote, its 20 up to the trigger, the after-window's 2
      assert length(events) == 3 + 20 + 2

      assert Trace.info(rec).recorder.fired.exception == 1
      :ok = Trace.stop(rec)
      assert_clean(n, tmp, before)
    end
  end

  test "slower_than on the node: the native agent pairs calls there; the pure-Erlang one refuses it" do
    {_peer, n, tmp} = bare_peer(:record_slower)
    footprint_after_trace(n, tmp)

    assert_raise ArgumentError, ~r/slower_than: needs the calls paired .* pure-Erlang/, fn ->
      Trace.record(["KinoTraceTest.Remote.Echo"],
        nodes: [n],
        agent: :fallback,
        on: [slower_than: 50]
      )
    end

    # nothing of the refused start stays (the OTP modules its message and the user's
    # sleep load are the node's own)
    wait_until(fn -> kino_modules(n) == [] and kino_sessions(n) == [] end)
    :erpc.call(n, Echo, :slow, [0])
    before = settled_footprint(n, tmp)

    rec = Trace.record(["KinoTraceTest.Remote.Echo"], nodes: [n], on: [slower_than: 50], after: 2)
    :erpc.call(n, Echo, :double, [1])
    :erpc.call(n, Echo, :slow, [100])
    :erpc.call(n, Echo, :double, [2])
    :erpc.call(n, Echo, :double, [3])

    snap = wait_until(fn -> match?([_], s = Trace.snapshots(rec)) && hd(s) end)
    assert Trace.info(snap).snapshot.trigger == :slower_than

    # its ring up to the slow call's return, then the after-window's 2 events
    assert [{:call, :double}, {:return, :double}, {:call, :slow}, {:return, :slow} | after_] =
             for(e <- Trace.events(snap), do: {e.kind, e.function})

    assert after_ == [{:call, :double}, {:return, :double}]
    slow = Enum.find(Trace.events(snap), &(&1.kind == :return and &1.function == :slow))
    assert slow.duration >= 100_000_000 and Trace.info(snap).snapshot.event == slow.id

    :ok = Trace.stop(rec)
    assert_clean(n, tmp, before)
  end
end
