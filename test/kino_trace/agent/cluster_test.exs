defmodule KinoTrace.Agent.ClusterTest do
  # Issue 16: a cluster for real (bare peers: OTP and Elixir only), several traces of one
  # node, and the agent's safety rules.
  use ExUnit.Case, async: false

  @moduletag :slow

  import KinoTraceTest.Helpers, only: [await_events: 2, observe: 3, wait_until: 1, wait_until: 2]
  import KinoTraceTest.Peers

  alias KinoTraceTest.Remote.Echo

  @moduletag timeout: 240_000

  setup_all do
    ensure_distribution()
  end

  defp flood(node, calls) when node == node(),
    do: spawn(fn -> Enum.each(1..calls, &Echo.double/1) end)

  defp flood(node, calls),
    do:
      :erpc.call(node, :erlang, :spawn, [
        :lists,
        :foreach,
        [&Echo.double/1, Enum.to_list(1..calls)]
      ])

  defp alive?(pid), do: :erpc.call(node(pid), :erlang, :is_process_alive, [pid])

  # The events of trace `id` in this process's mailbox, counted per node.
  defp received(id, counts) do
    receive do
      {:kino_trace, ^id, {:events, events}} ->
        received(
          id,
          Enum.reduce(events, counts, fn e, acc -> Map.update(acc, e.node, 1, &(&1 + 1)) end)
        )
    after
      0 -> counts
    end
  end

  # The events of trace `id` received until one came from `node`, counted per node.
  defp received_from(id, node, counts) do
    receive do
      {:kino_trace, ^id, {:events, events}} ->
        counts =
          Enum.reduce(events, counts, fn e, acc -> Map.update(acc, e.node, 1, &(&1 + 1)) end)

        if Map.has_key?(counts, node), do: counts, else: received_from(id, node, counts)
    after
      30_000 -> flunk("no event from #{node} in 30 s; received per node: #{inspect(counts)}")
    end
  end

  test "3 nodes and this one: one killed mid-flood, the others deliver, every event accounted for per node" do
    [{_, n1, _}, {_, n2, _}, {p3, n3, _}] = for i <- 1..3, do: bare_peer(:"cluster#{i}")
    nodes = [node(), n1, n2, n3]
    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: nodes, return: false)
    Kino.Trace.subscribe(trace)
    id = trace.id
    calls = 30_000

    flooders = Map.new(nodes, &{&1, flood(&1, calls)})
    # n3 killed once some of its events were received (a poll of the last events could
    # miss them for good behind the other nodes' floods)
    counts = received_from(id, n3, %{})
    :peer.stop(p3)
    assert_receive {:kino_trace, ^id, {:node_down, ^n3, _}}, 10_000

    live = [node(), n1, n2]
    wait_until(fn -> not Enum.any?(live, &alive?(flooders[&1])) end, 3_000)
    # until the live nodes have nothing queued (events/2 has each deliver what it queued;
    # the info's counts are each node's when it answered, and what it delivered came
    # before its answer)...
    wait_until(fn ->
      Kino.Trace.events(trace, 1)
      info = Kino.Trace.info(trace)
      Enum.all?(live, &(info.nodes[&1].queued == 0))
    end)

    info = Kino.Trace.info(trace)
    # ...then what the nodes delivered is in this mailbox before the answer (the info's
    # answer did not wait for the coordinator to pass it on: a full run received 22 000
    # events of a node before it)
    Kino.Trace.events(trace, 1)
    counts = received(id, counts)

    for node <- live do
      node_info = info.nodes[node]
      dropped = node_info.dropped |> Map.values() |> Enum.sum()
      assert node_info.status == :running
      assert node_info.accepted + dropped == calls, "#{node}: #{inspect(node_info)}"
      assert node_info.accepted == node_info.delivered + node_info.queued + node_info.discarded
      assert counts[node] == node_info.delivered, "#{node}: received #{counts[node]}"
    end

    assert info.nodes[n3].status == :gone
    assert counts[n3] > 0
    Kino.Trace.stop(trace)
    for node <- [n1, n2], do: wait_until(fn -> kino_modules(node) == [] end)
  end

  test "two traces of one node from two owners run side by side; the agent leaves with the last" do
    {_peer, n, _} = bare_peer(:two)
    parent = self()

    owners =
      for i <- 1..2 do
        spawn(fn ->
          trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n])
          send(parent, {:trace, i, trace})
          Process.sleep(:infinity)
        end)
      end

    traces =
      for i <- 1..2,
          do: receive(do: ({:trace, ^i, trace} -> trace), after: (30_000 -> flunk("no trace")))

    :erpc.call(n, Echo, :double, [3])

    for trace <- traces,
        do: await_events(trace, &Enum.any?(&1, fn e -> e.kind == :call and e.args == [3] end))

    Process.exit(hd(owners), :kill)
    wait_until(fn -> not Process.alive?(hd(traces).session) end)
    :erpc.call(n, Echo, :double, [4])
    await_events(List.last(traces), &Enum.any?(&1, fn e -> e.kind == :call and e.args == [4] end))
    assert :kino_trace_agent in kino_modules(n)

    Process.exit(List.last(owners), :kill)
    # the agent deletes its modules, then ends
    wait_until(fn -> kino_modules(n) == [] end, 1_000)
    wait_until(fn -> :erpc.call(n, :erlang, :whereis, [:kino_trace_agent]) == :undefined end)
  end

  for module <- [:kino_trace_fallback, :kino_trace_agent, :kino_trace_tracer] do
    test "a node with another version of #{module} is refused, and nothing is replaced or left" do
      module = unquote(module)
      {_peer, n, _} = bare_peer(:version)

      forms = [
        {:attribute, 1, :module, module},
        {:attribute, 1, :export, [v: 0]},
        {:function, 1, :v, 0, [{:clause, 1, [], [], [{:atom, 1, :theirs}]}]}
      ]

      {:ok, ^module, binary} = :compile.forms(forms, [:binary])
      {:module, _} = :erpc.call(n, :code, :load_binary, [module, ~c"#{module}.beam", binary])

      assert_raise ArgumentError, ~r/#{module} loaded in another version/, fn ->
        Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n])
      end

      assert :erpc.call(n, module, :v, []) == :theirs
      assert kino_modules(n) == [module]
      assert :erpc.call(n, :erlang, :whereis, [:kino_trace_agent]) == :undefined
    end
  end

  # A second node with kino_trace, connected to `to`: another tracing node.
  defp tracing_peer(name, to) do
    {peer, t} = start_peer(name)
    true = :erpc.call(t, :net_kernel, :connect_node, [to])
    {peer, t}
  end

  defp kill_node(t) do
    os_pid = :erpc.call(t, :os, :getpid, [])
    true = Node.monitor(t, true)
    {_, 0} = System.cmd("kill", ["-9", List.to_string(os_pid)])
    assert_receive {:nodedown, ^t}, 30_000
  end

  test "two tracing nodes tracing one node at once: the agent is shipped once and leaves nothing (issue 27 item 6)" do
    {_peer, n, _} = bare_peer(:shared)
    tracers = for i <- 1..2, do: elem(tracing_peer(:"tracer#{i}", n), 1)
    args = [["KinoTraceTest.Remote.Echo.double/1"], [nodes: [n]]]

    for round <- 1..10 do
      results = :erpc.multicall(tracers, KinoTraceTest.Peers, :trace_and_stop, args, 60_000)

      # (both stopped: the last stop/1 returned once the node was as it was)
      assert kino_modules(n) == [], "round #{round}: #{inspect(kino_modules(n))} left"
      assert :erpc.call(n, :erlang, :whereis, [:kino_trace_agent]) == :undefined

      for result <- results do
        assert {:ok, {running, stopped}} = result
        assert running[n].tracer == :native
        assert stopped[n][:agent] in [:removed, :kept]
      end
    end
  end

  test "a tracing node that dies between shipping and starting its worker leaves nothing (issue 27 item 6)" do
    {_peer, n, tmp} = bare_peer(:orphan)
    {_tpeer, t} = tracing_peer(:dies, n)
    :ok = :erpc.call(t, Application, :put_env, [:kino_trace, :test_pause_after_ship, self()])

    :erpc.call(t, KinoTraceTest.Peers, :spawn_tracer, [
      self(),
      ["KinoTraceTest.Remote.Echo.double/1"],
      [nodes: [n]]
    ])

    assert_receive {:kino_trace_shipped, ^n, _starter}, 30_000

    assert Enum.sort(kino_modules(n)) ==
             Enum.sort([
               :kino_trace_agent,
               :kino_trace_agent_files,
               :kino_trace_agent_native,
               :kino_trace_agent_ring,
               :kino_trace_agent_worker,
               :kino_trace_trigger,
               :kino_trace_open_calls,
               :kino_trace_fallback,
               :kino_trace_fallback_event,
               :kino_trace_fallback_gate,
               :kino_trace_fallback_limits,
               :kino_trace_fallback_process,
               :kino_trace_fallback_terms
             ])

    kill_node(t)

    wait_until(fn -> kino_modules(n) == [] end, 500)
    assert :erpc.call(n, :erlang, :whereis, [:kino_trace_agent]) == :undefined
    assert agent_pids(n) == []
    assert File.ls!(tmp) == []
  end

  test "kill -9 of the tracing node mid-trace leaves nothing on the traced node" do
    {_peer, n, tmp} = bare_peer(:killed)
    {_tpeer, t} = tracing_peer(:killed_tracer, n)

    :erpc.call(t, KinoTraceTest.Peers, :spawn_tracer, [
      self(),
      ["KinoTraceTest.Remote.Echo.double/1"],
      [nodes: [n]]
    ])

    assert_receive {:tracing, _owner, _trace}, 30_000
    assert kino_sessions(n) != []
    # a flood running there when the tracing node dies
    flood(n, 200_000)
    kill_node(t)

    wait_until(fn -> kino_modules(n) == [] end, 500)
    assert kino_sessions(n) == []
    assert agent_pids(n) == []
    assert :erpc.call(n, :erlang, :whereis, [:kino_trace_agent]) == :undefined
    assert File.ls!(tmp) == []
  end

  test "the agent never traces itself: traces of gen_server and of every message there stay quiet" do
    {_peer, n, _} = bare_peer(:loop)
    calls = Kino.Trace.calls([":gen_server", ":gen"], nodes: [n])
    messages = Kino.Trace.messages(:all, nodes: [n])
    # info/1 and the ticks make the agent work (counters, drains) all along
    # (1.5 s of ticks and info requests, each a chance to trace itself)
    observe(1_500, 100, fn -> Kino.Trace.info(calls) && Kino.Trace.info(messages) end)

    agents = agent_pids(n)
    assert agents != []

    for trace <- [calls, messages] do
      events = Kino.Trace.events(trace, 10_000)
      own = Enum.filter(events, &(&1.pid in agents or &1.peer in agents))

      assert own == [],
             "agents #{inspect(agents)} traced: #{inspect(Enum.take(own, 5), structs: false, limit: 12)}"

      # a loop would feed on itself: thousands of events a second
      assert Kino.Trace.info(trace).accepted < 500
    end

    Kino.Trace.stop(calls)
    Kino.Trace.stop(messages)
  end

  # Debian 12's own Erlang/OTP 25 (erlang-base, installed by scripts/setup.sh for this
  # test only: kino_trace is built and run with OTP 27).
  @otp25 "/usr/lib/erlang/bin/erl"

  test "a node on Erlang/OTP 25 is refused with an error naming the node and its release" do
    assert File.exists?(@otp25),
           "#{@otp25} is missing: scripts/setup.sh installs Debian's erlang-base"

    {:ok, peer, old} =
      :peer.start(%{
        name: :"otp25_#{System.unique_integer([:positive])}",
        host: ~c"127.0.0.1",
        longnames: true,
        exec: String.to_charlist(@otp25)
      })

    on_exit(fn -> stop_peer(peer) end)
    assert :erpc.call(old, :erlang, :system_info, [:otp_release]) == ~c"25"

    message =
      "cannot trace node #{inspect(old)}: it runs Erlang/OTP 25, and tracing it needs OTP 27 or newer"

    for start <- [
          fn -> Kino.Trace.calls([":lists.seq/2"], nodes: [node(), old]) end,
          fn -> Kino.Trace.messages(:all, nodes: [old]) end
        ] do
      assert_raise ArgumentError, ~r/^#{Regex.escape(message)}/, start
    end

    assert :erpc.call(old, :erlang, :whereis, [:kino_trace_agent]) == :undefined
    assert kino_modules(old) == []
  end

  # The processes of kino_trace's agent on node: the keeper, its workers, their tracers.
  defp agent_pids(n) do
    for pid <- :erpc.call(n, :erlang, :processes, []),
        info = :erpc.call(n, :erlang, :process_info, [pid, [:initial_call, :dictionary]]),
        is_list(info),
        {m, _, _} <- [info[:dictionary][:"$initial_call"] || info[:initial_call]],
        m in [:kino_trace_agent, :kino_trace_agent_worker, :kino_trace_fallback_process],
        do: pid
  end
end
