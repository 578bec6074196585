defmodule Kino.Trace.Stats.RemoteTest do
  # Issue 16: Kino.Trace.Stats on nodes that never had kino_trace. Every peer here has
  # OTP's and Elixir's code paths alone (and the user's module Echo): the counters
  # session runs in a worker of kino_trace's agent, which must leave nothing behind.
  use ExUnit.Case, async: false

  @moduletag :slow

  import KinoTraceTest.Helpers, only: [wait_until: 1, wait_until: 2]
  import KinoTraceTest.Peers

  alias Kino.Trace.Stats
  alias Kino.Trace.Stats.{Row, Snapshot}
  alias KinoTraceTest.Remote.Echo

  doctest KinoTrace.Backend

  @moduletag timeout: 180_000
  @double {Echo, :double, 1}

  setup_all do
    ensure_distribution()
  end

  # `count` calls of Echo.double/1 in one new process of `node`.
  defp doubles(node, count) do
    :ok = :erpc.call(node, :lists, :foreach, [&Echo.double/1, Enum.to_list(1..count)])
  end

  defp calls_by_node(%Row{processes: processes}) do
    processes
    |> Enum.group_by(&node(&1.pid), & &1.calls)
    |> Map.new(fn {node, calls} -> {node, Enum.sum(calls)} end)
  end

  describe "counts on a node that never had kino_trace" do
    test "are exact there, and calls made here do not count" do
      {_peer, n, _tmp} = bare_peer(:counts)
      stats = Stats.start(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n])
      assert :kino_trace_agent in kino_modules(n)
      refute :kino_trace_tracer in kino_modules(n)

      doubles(n, 1_000)
      Enum.each(1..500, &Echo.double/1)

      assert %Snapshot{calls: 1_000, rows: [row]} = Stats.snapshot(stats)
      assert %Row{mfa: @double, calls: 1_000} = row
      assert calls_by_node(row) == %{n => 1_000}
      assert row.time_us >= 0 and row.memory_words >= 0

      info = Stats.info(stats)
      assert info.nodes == %{n => %{status: :running, functions: 1}}
      assert info.session == nil
      Stats.stop(stats)
    end

    test "nodes: [node(), peer] adds up both nodes' calls per function" do
      {_peer, n, _tmp} = bare_peer(:sum)
      stats = Stats.start([@double], nodes: [node(), n], pids: :all)

      doubles(n, 700)
      Enum.each(1..300, &Echo.double/1)

      assert %Snapshot{calls: 1_000, rows: [row]} = Stats.snapshot(stats)
      assert calls_by_node(row) == %{node() => 300, n => 700}
      assert Map.keys(Stats.info(stats).nodes) |> Enum.sort() == Enum.sort([node(), n])

      # no time, no memory: calls counted per process all the same, summed over nodes
      counts = Stats.start([@double], nodes: [node(), n], time: false, memory: false)
      assert Stats.info(counts).counters == [:call_time]
      doubles(n, 40)
      Enum.each(1..2, &Echo.double/1)

      assert %Snapshot{calls: 42, rows: [%Row{calls: 42, time_us: nil} = row]} =
               Stats.snapshot(counts)

      assert calls_by_node(row) == %{node() => 2, n => 40}
      Stats.stop(counts)
      Stats.stop(stats)
    end

    test "latency: true with nodes: each node's processes have their own distribution (issue 38)" do
      {_peer, n, _tmp} = bare_peer(:latency)
      stats = Stats.start([@double], nodes: [node(), n], pids: :all, latency: true)

      doubles(n, 50)
      Enum.each(1..20, &Echo.double/1)

      # (the trace of durations delivers what is queued before it answers)
      wait_until(fn ->
        match?(%{count: 70}, Snapshot.row(Stats.snapshot(stats), @double).latency)
      end)

      row = Snapshot.row(Stats.snapshot(stats), @double)

      counts =
        row.processes
        |> Enum.filter(& &1.latency)
        |> Map.new(&{node(&1.pid), &1.latency.count})

      assert counts == %{node() => 20, n => 50}
      Stats.stop(stats)
    end

    test "reset sets the other node's counters back to zero" do
      {_peer, n, _tmp} = bare_peer(:reset)
      stats = Stats.start(["KinoTraceTest.Remote.Echo"], nodes: n)

      doubles(n, 100)
      assert Stats.snapshot(stats).calls == 100
      assert :ok = Stats.reset(stats)
      assert Stats.snapshot(stats).rows == []
      doubles(n, 5)
      assert %Snapshot{calls: 5, rows: [%Row{mfa: @double}]} = Stats.snapshot(stats)
      Stats.stop(stats)
    end

    test "a snapshot or a reset of many functions is one request to the agent" do
      {_peer, n, _tmp} = bare_peer(:round_trips)
      stats = Stats.start([":lists"], nodes: [n])
      assert Stats.info(stats).functions > 100

      [%{worker: worker}] = KinoTrace.Client.internals(stats.server).parts
      # The first snapshot's request, the first with these functions' names to that node,
      # was at times missing from the send trace below (its reply and the reset's request
      # were there; on this machine and in CI, OTP 27 and 29): the requests counted are
      # those of a second snapshot and reset.
      Stats.snapshot(stats)
      :ok = Stats.reset(stats)
      counter = :trace.session_create(:stats_remote_test, self(), [])
      on_exit(fn -> :trace.session_destroy(counter) end)

      [{:trace_many, infos}, {:trace_all, restarts, []}] =
        counted_requests(stats, n, worker, counter)

      assert length(infos) == 2 * Stats.info(stats).functions
      assert length(restarts) == Stats.info(stats).functions
      Stats.stop(stats)
    end

    # The requests the stats server sends `worker` for a snapshot and a reset, seen by a
    # send trace. Never more than one of each (what the test checks); the snapshot's was
    # still missing at times from the trace (a full OTP 27 run): then the two are asked
    # again, at most 3 times in all.
    defp counted_requests(stats, n, worker, counter, attempt \\ 1) do
      :trace.process(counter, stats.server, true, [:send])
      :erpc.call(n, :lists, :seq, [1, 10])
      assert Snapshot.row(Stats.snapshot(stats), {:lists, :seq, 2}).calls >= 1
      :ok = Stats.reset(stats)
      :trace.process(counter, stats.server, false, [:send])
      requests = receive_sends(stats.server, worker)
      kinds = Enum.map(requests, &elem(&1, 0))

      assert kinds -- [:trace_many, :trace_all] == [],
             "more than one request each: #{inspect(kinds)}"

      if kinds == [:trace_many, :trace_all] or attempt == 3,
        do: requests,
        else: counted_requests(stats, n, worker, counter, attempt + 1)
    end
  end

  test "Targets.expand/2 reads the functions of that node's loaded code" do
    {_peer, n, _tmp} = bare_peer(:expand)
    lookup = KinoTrace.Base.Lookup.new(n)
    {[everything], _} = KinoTrace.Pattern.parse_all!(["_"], force: true)
    {:ok, echo} = KinoTrace.Pattern.parse("KinoTraceTest.Remote.Echo")

    there = KinoTrace.Stats.Targets.expand([everything], lookup: lookup)
    assert @double in there and {:lists, :seq, 2} in there
    refute Enum.any?(there, fn {m, _, _} -> m == Kino.Trace.Stats end)
    # exported only, without the compiler's functions
    assert KinoTrace.Stats.Targets.expand([echo], lookup: lookup, local: false) |> Enum.sort() ==
             Enum.sort(for {f, a} <- Echo.__info__(:functions), do: {Echo, f, a})
  end

  # The requests `from` sent to `to` (gen calls), as traced.
  defp receive_sends(from, to, acc \\ []) do
    receive do
      {:trace, ^from, :send, {:"$gen_call", _, request}, ^to} ->
        receive_sends(from, to, [request | acc])

      {:trace, ^from, :send, _other, _to} ->
        receive_sends(from, to, acc)
    after
      200 -> Enum.reverse(acc)
    end
  end

  describe "bad input" do
    test "a pattern is checked against that node's modules, and the error names the node" do
      {_peer, n, _tmp} = bare_peer(:preflight)

      assert_raise ArgumentError,
                   ~r/^on node #{Regex.escape(inspect(n))}: invalid trace pattern .*Echo.nope/s,
                   fn ->
                     Stats.start(["KinoTraceTest.Remote.Echo.nope/1"], nodes: [n])
                   end

      # a module this node has and that one does not
      assert_raise ArgumentError,
                   ~r/^on node #{Regex.escape(inspect(n))}: invalid trace pattern "KinoTraceTest.StatsSample"/,
                   fn ->
                     Stats.start(["KinoTraceTest.StatsSample"], nodes: [node(), n])
                   end

      assert kino_modules(n) == []
      assert kino_sessions(n) == []
    end

    test "bad :nodes values and nodes that are not connected" do
      assert_raise ArgumentError,
                   ~r/^invalid value for :nodes: expected a node, a list of nodes, or :all/,
                   fn ->
                     Stats.start([@double], nodes: "a@b")
                   end

      assert_raise ArgumentError,
                   ~r/cannot trace node :"nowhere@127.0.0.1": it is not connected/,
                   fn ->
                     Stats.start([@double], nodes: [node(), :"nowhere@127.0.0.1"])
                   end
    end

    test "pids: a name registered only on that node is looked up there" do
      {_peer, n, _tmp} = bare_peer(:names)
      name = :kino_trace_stats_only_there
      {:ok, agent} = :erpc.call(n, Agent, :start, [:erlang, :abs, [21], [name: name]])
      assert Process.whereis(name) == nil

      stats = Stats.start([@double], nodes: [n], pids: name)
      # 3 calls in the named process, 10 in another one
      for _ <- 1..3, do: 42 = :erpc.call(n, Agent, :get, [name, Echo, :double, []])
      doubles(n, 10)

      assert %Row{calls: 3, processes: [%{pid: ^agent, calls: 3}]} =
               Snapshot.row(Stats.snapshot(stats), @double)

      Stats.stop(stats)

      # here, the name stands for no process
      assert_raise ArgumentError,
                   "invalid value for :pids: no process is registered as #{inspect(name)}",
                   fn ->
                     Stats.start([@double], nodes: [node(), n], pids: name)
                   end
    end
  end

  test "a node whose agent does not answer is left out of the snapshot and marked unresponsive" do
    {_peer, n, _tmp} = bare_peer(:hung)
    stats = Stats.start([@double], nodes: [node(), n])
    doubles(n, 10)
    Enum.each(1..3, &Echo.double/1)
    assert Stats.snapshot(stats).calls == 13

    [worker] = for %{worker: w} <- KinoTrace.Client.internals(stats.server).parts, w != nil, do: w
    :ok = :erpc.call(n, Echo, :hang, [worker])

    # after the agent's timeout (15 s)
    assert %Snapshot{calls: 3, rows: [row]} = Stats.snapshot(stats)
    assert calls_by_node(row) == %{node() => 3}
    assert Stats.info(stats).nodes[n].status == :unresponsive

    # stop/1 does not wait for it again; its keeper ends the worker, and with it the rest
    started = System.monotonic_time(:millisecond)
    assert :ok = Stats.stop(stats)
    assert System.monotonic_time(:millisecond) - started < 5_000
    wait_until(fn -> kino_modules(n) == [] end, 1_500)
    assert kino_modules(n) == []
    assert kino_sessions(n) == []
  end

  describe "nothing is left behind" do
    # A first session loads the OTP modules counting needs there (the node's own, which
    # stay); from then on, a session leaves the node exactly as it was.
    defp warmed_footprint(n, tmp) do
      stats = Stats.start([@double], nodes: [n])
      doubles(n, 1)
      Stats.snapshot(stats)
      Stats.stop(stats)
      wait_until(fn -> kino_modules(n) == [] end)
      settled_footprint(n, tmp)
    end

    test "after stop/1" do
      {_peer, n, tmp} = bare_peer(:clean_stop)
      before = warmed_footprint(n, tmp)

      stats = Stats.start(["KinoTraceTest.Remote.Echo"], nodes: [n])
      assert [_] = kino_sessions(n)
      doubles(n, 10)
      assert Stats.snapshot(stats).calls == 10
      assert :ok = Stats.stop(stats)
      # the session is gone when stop/1 returns
      assert kino_sessions(n) == []

      assert_clean(n, tmp, before)
    end

    test "after its owner is killed" do
      {_peer, n, tmp} = bare_peer(:clean_owner)
      before = warmed_footprint(n, tmp)
      parent = self()

      owner =
        spawn(fn ->
          send(parent, {:stats, Stats.start([@double], nodes: [n])})
          Process.sleep(:infinity)
        end)

      assert_receive {:stats, stats}, 30_000
      assert [_] = kino_sessions(n)
      ref = Process.monitor(stats.server)
      Process.exit(owner, :kill)
      assert_receive {:DOWN, ^ref, :process, _, _}, 5_000

      assert_clean(n, tmp, before)
    end

    test "after the connection drops: the node is gone, the others go on" do
      {peer, n, tmp} = bare_peer(:clean_disconnect, standard_io: true)
      reconnect_from_peer(peer, n)
      before = warmed_footprint(n, tmp)

      stats = Stats.start([@double], nodes: [node(), n])
      doubles(n, 10)
      Enum.each(1..4, &Echo.double/1)
      assert Stats.snapshot(stats).calls == 14

      true = :erlang.disconnect_node(n)
      wait_until(fn -> Stats.info(stats).nodes[n].status == :gone end)
      Enum.each(1..4, &Echo.double/1)
      assert %Snapshot{calls: 8, rows: [row]} = Stats.snapshot(stats)
      assert calls_by_node(row) == %{node() => 8}
      assert :ok = Stats.reset(stats)

      true = Node.connect(n)
      assert_clean(n, tmp, before)
      Stats.stop(stats)
    end
  end
end
