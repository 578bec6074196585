defmodule Kino.Trace.Calls.DistributedTest do
  # Real peer nodes on loopback, started by the test with kino_trace's code path (so the
  # traced module is there; kino_trace's agent is what traces them, see agent_test.exs).
  use ExUnit.Case, async: false

  @moduletag :slow

  import KinoTraceTest.Helpers,
    only: [await_events: 2, await_received: 3, wait_until: 1, wait_until: 2]

  import KinoTraceTest.Peers,
    only: [ensure_distribution: 0, start_peer: 1, start_peer: 2, kino_sessions: 1]

  alias KinoTrace.Client
  alias KinoTraceTest.Remote.Echo

  @moduletag timeout: 120_000

  setup_all do
    ensure_distribution()
  end

  test "calls on several nodes merge into one trace with a node column" do
    {_p1, n1} = start_peer(:calls_a)
    {_p2, n2} = start_peer(:calls_b)

    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [node(), n1, n2])

    Echo.double(1)
    :erpc.call(n1, Echo, :double, [10])
    :erpc.call(n2, Echo, :double, [100])

    events = await_events(trace, &(Enum.count(&1, fn e -> e.kind == :return end) == 3))

    by_node = for e <- events, e.kind == :call, into: %{}, do: {e.node, e.args}
    assert by_node == %{node() => [1], n1 => [10], n2 => [100]}

    returns = for e <- events, e.kind == :return, into: %{}, do: {e.node, e.return}
    assert returns == %{node() => 2, n1 => 20, n2 => 200}

    # ids are unique across nodes and each return points at its own call
    ids = Enum.map(events, & &1.id)
    assert ids == Enum.uniq(ids)

    for r <- events, r.kind == :return do
      call = Enum.find(events, &(&1.id == r.call_id))
      assert call.node == r.node and call.kind == :call
    end

    info = Kino.Trace.info(trace)
    assert info.accepted == 6
    assert Map.keys(info.nodes) |> Enum.sort() == Enum.sort([node(), n1, n2])
    assert info.nodes[n1].accepted == 2

    Kino.Trace.stop(trace)

    # ending the trace ends every remote session: nothing of it remains there
    for n <- [n1, n2] do
      wait_until(fn -> kino_sessions(n) == [] end)
      assert :erpc.call(n, :trace, :session_info, [:all]) |> Enum.all?(&match?({:legacy, _}, &1))
    end
  end

  test "names in pids: are looked up on each node, {:global, name} and {:via, module, name} too" do
    {_peer, n1} = start_peer(:names)
    # started from a process that ends normally, so the worker outlives it
    :erpc.call(n1, :erlang, :spawn, [
      KinoTraceTest.Sample.Worker,
      :start,
      [:kino_trace_remote_worker]
    ])

    wait_until(fn -> :erpc.call(n1, Process, :whereis, [:kino_trace_remote_worker]) end)
    worker = :erpc.call(n1, Process, :whereis, [:kino_trace_remote_worker])
    name = {__MODULE__, :remote_worker}
    :yes = :erpc.call(n1, :global, :register_name, [name, worker])

    for pids <- [{:global, name}, {:via, :global, name}] do
      trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n1], pids: pids)

      # another process on n1 is not traced: only the named worker
      :erpc.call(n1, Echo, :double, [5])
      14 = :erpc.call(n1, KinoTraceTest.Sample.Worker, :run, [worker, Echo.double_fun(7)])

      events = await_events(trace, &Enum.any?(&1, fn e -> e.kind == :return end))
      assert [%{node: ^n1, pid: ^worker, args: [7]}] = for(e <- events, e.kind == :call, do: e)
      Kino.Trace.stop(trace)
    end

    assert_raise ArgumentError,
                 ~r/no process is registered as \{:global, :kino_trace_nobody\}/,
                 fn ->
                   Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"],
                     nodes: [n1],
                     pids: {:global, :kino_trace_nobody}
                   )
                 end
  end

  test "the distributed preset catches a message between two nodes and not a local one" do
    {_peer, n1} = start_peer(:dist)
    remote_echo = :erpc.call(n1, Echo, :start_echo, [])
    local_echo = Echo.start_echo()

    trace = Kino.Trace.messages(:distributed)
    me = self()

    send(local_echo, {me, :local_hello})
    assert_receive {:echo, :local_hello}
    send(remote_echo, {me, :remote_hello})
    assert_receive {:echo, :remote_hello}, 5_000

    events = await_events(trace, fn events -> Enum.any?(events, &(&1.kind == :receive)) end)

    assert Enum.any?(
             events,
             &(&1.kind == :send and &1.pid == me and &1.peer == remote_echo and
                 &1.data == {me, :remote_hello})
           )

    assert Enum.any?(
             events,
             &(&1.kind == :receive and &1.pid == me and &1.data == {:echo, :remote_hello})
           )

    refute Enum.any?(events, &match?({_, :local_hello}, &1.data))
    refute Enum.any?(events, &match?({:echo, :local_hello}, &1.data))
    Kino.Trace.stop(trace)
  end

  # A GenServer's reply to a caller on another node goes to the caller's alias (a
  # reference of that node), not to its pid: it crosses nodes all the same.
  test "the distributed preset catches a reply to another node's alias" do
    {_peer, n1} = start_peer(:dist_alias)
    {:ok, agent} = Agent.start(fn -> :kino_trace_alias_state end)
    trace = Kino.Trace.messages(:distributed)

    assert :erpc.call(n1, :sys, :get_state, [agent]) == :kino_trace_alias_state

    events =
      await_events(trace, fn events ->
        Enum.any?(
          events,
          &(&1.kind == :send and &1.pid == agent and
              match?({_, {:ok, :kino_trace_alias_state}}, &1.data))
        )
      end)

    reply = Enum.find(events, &(&1.kind == :send and &1.pid == agent))
    assert is_reference(reply.peer) and node(reply.peer) == n1
    Kino.Trace.stop(trace)
    Agent.stop(agent)
  end

  test "set_patterns, pause and resume reach every node" do
    {_p1, n1} = start_peer(:patterns)
    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.start_echo/0"], nodes: [node(), n1])

    assert [{"KinoTraceTest.Remote.Echo.double/1", :ok}] =
             Kino.Trace.set_patterns(trace, ["KinoTraceTest.Remote.Echo.double/1"])

    :erpc.call(n1, Echo, :double, [3])
    await_events(trace, &Enum.any?(&1, fn e -> e.node == n1 and e.args == [3] end))

    # A module only this node has: good here, reported as bad on the peer.
    [{local_only, _}] =
      Code.compile_string(
        "defmodule KinoTraceTest.Remote.LocalOnly#{System.unique_integer([:positive])} do def f(x), do: x end"
      )

    assert [{_, :ok}, {_, {:error, "on node " <> message}}] =
             Kino.Trace.set_patterns(trace, [
               "KinoTraceTest.Remote.Echo.double/1",
               "#{inspect(local_only)}.f/1"
             ])

    assert message =~ inspect(n1) and message =~ "unknown module"

    Kino.Trace.pause(trace)
    :erpc.call(n1, Echo, :double, [4])
    Kino.Trace.resume(trace)
    :erpc.call(n1, Echo, :double, [5])
    events = await_events(trace, &Enum.any?(&1, fn e -> e.node == n1 and e.args == [5] end))
    refute Enum.any?(events, &(&1.args == [4]))
    Kino.Trace.stop(trace)
  end

  test "a subscriber that exits without unsubscribing is no longer held by this node's session" do
    {_p1, n1} = start_peer(:held_a)
    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [node(), n1])
    local = Client.internals(trace).nodes[node()]

    for _ <- 1..5 do
      reader = spawn(fn -> receive do: (:exit -> :ok) end)
      :ok = Kino.Trace.subscribe(trace, reader)
      assert reader in Client.internals(local).held
      send(reader, :exit)
    end

    # what stays held is the coordinator itself, a subscriber of the session
    only_coordinator = fn -> Client.internals(local).held == [trace.session] end
    wait_until(only_coordinator, 5_000)
    assert only_coordinator.()
    Kino.Trace.stop(trace)
  end

  test "a node that goes down mid-trace is shown as gone and the rest go on" do
    {_p1, n1} = start_peer(:stays)
    {p2, n2} = start_peer(:dies)

    trace = Kino.Trace.calls([Echo], nodes: [n1, n2])
    Kino.Trace.subscribe(trace)
    id = trace.id

    :erpc.call(n2, Echo, :double, [1])
    await_events(trace, &Enum.any?(&1, fn e -> e.node == n2 end))

    :peer.stop(p2)
    assert_receive {:kino_trace, ^id, {:node_down, ^n2, _reason}}, 10_000

    :erpc.call(n1, Echo, :double, [7])

    events =
      await_events(
        trace,
        &Enum.any?(&1, fn e -> e.node == n1 and e.kind == :call and e.args == [7] end)
      )

    assert Enum.any?(events, &(&1.node == n1))

    info = Kino.Trace.info(trace)
    assert info.nodes[n2].status == :gone
    assert info.nodes[n1].status == :running
    Kino.Trace.stop(trace)
    wait_until(fn -> kino_sessions(n1) == [] end)
  end

  test "a hung remote agent blocks nothing: info/1 answers, set_patterns reports it, stop/1 ends it" do
    {_p1, n1} = start_peer(:hung)
    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [node(), n1])
    session = Client.internals(trace).nodes[n1]
    worker = Client.internals(session).worker
    assert node(worker) == n1
    :ok = :erpc.call(n1, Echo, :hang, [worker])

    # Before: info/1 took 10 s, set_patterns and pause exited with a timeout, and stop/1
    # returned :ok with both sessions alive.
    {info_us, info} = :timer.tc(fn -> Kino.Trace.info(trace) end)
    assert info.nodes[n1].status == :unresponsive
    assert info_us < 5_000_000
    {again_us, _} = :timer.tc(fn -> Kino.Trace.info(trace) end)
    assert again_us < 1_000_000, "a known unresponsive node is not waited on again"

    # the hung node is asked once per tick until it answers, not once more per tick:
    # three ticks pass with the node still hung (this node, asked on each, answers)
    await_received(trace.session, :tick, 3)
    assert Enum.count(Client.internals(trace).waiting, &(&1 == n1)) <= 1

    assert [{_, {:error, "on node " <> message}}] =
             Kino.Trace.set_patterns(trace, ["KinoTraceTest.Remote.Echo.double/1"])

    assert message =~ inspect(n1) and message =~ "not answering"

    assert :ok = Kino.Trace.pause(trace)
    assert :ok = Kino.Trace.resume(trace)

    # local tracing goes on
    Echo.double(21)
    await_events(trace, &Enum.any?(&1, fn e -> e.node == node() and e.args == [21] end))

    {stop_us, :ok} = :timer.tc(fn -> Kino.Trace.stop(trace) end)
    assert stop_us < 10_000_000
    refute Process.alive?(trace.session)
    refute Process.alive?(session)
    # the agent's keeper ends a worker that does not end with its session
    wait_until(fn -> not :erpc.call(n1, :erlang, :is_process_alive, [worker]) end, 1_000)
    wait_until(fn -> kino_sessions(n1) == [] end)
    assert :erpc.call(n1, :trace, :session_info, [:all]) |> Enum.all?(&match?({:legacy, _}, &1))
  end

  test "a node without the traced module gives a clear error naming that node" do
    {_peer, bare} = start_peer(:bare, code: :otp)

    # Its part of the plan is built here (Kino.Trace.Plan.node_part!/3): the pattern is
    # checked against its modules.
    message =
      "on node #{inspect(bare)}: invalid trace pattern KinoTraceTest.Remote.Echo: unknown module KinoTraceTest.Remote.Echo"

    assert_raise ArgumentError, ~r/#{Regex.escape(message)}/, fn ->
      Kino.Trace.calls([Echo], nodes: [bare])
    end

    assert_raise ArgumentError,
                 ~r/cannot trace node :"nowhere@127.0.0.1": it is not connected/,
                 fn ->
                   Kino.Trace.calls([Echo], nodes: [:"nowhere@127.0.0.1"])
                 end
  end

  test "bad patterns are checked on every node before anything is traced" do
    {_peer, n1} = start_peer(:preflight)

    assert_raise ArgumentError, ~r/on node #{Regex.escape(inspect(n1))}: .*Echo.nope/s, fn ->
      Kino.Trace.calls(["KinoTraceTest.Remote.Echo.nope/1"], nodes: [n1])
    end

    wait_until(fn -> kino_sessions(n1) == [] end)
  end

  test "the remote trace ends when the coordinator's owner dies" do
    {_peer, n1} = start_peer(:owner)
    parent = self()

    owner =
      spawn(fn ->
        trace = Kino.Trace.calls([Echo], nodes: [n1])
        send(parent, {:trace, trace})
        Process.sleep(:infinity)
      end)

    assert_receive {:trace, _trace}, 10_000
    assert [_] = kino_sessions(n1)
    Process.exit(owner, :kill)

    wait_until(fn -> kino_sessions(n1) == [] end)
  end
end
