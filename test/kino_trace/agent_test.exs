defmodule KinoTrace.AgentTest do
  # Issue 16: tracing nodes that never had kino_trace. Every peer here is started with
  # OTP's and Elixir's code paths alone; kino_trace's agent is shipped to it for the
  # trace and must leave nothing behind.
  use ExUnit.Case, async: false

  @moduletag :slow

  import KinoTraceTest.Helpers, only: [await_events: 2, wait_until: 1, wait_until: 2]
  import KinoTraceTest.Peers

  alias KinoTraceTest.Remote.Echo

  @moduletag timeout: 180_000

  setup_all do
    ensure_distribution()
  end

  defp call_events(events, node), do: for(e <- events, e.node == node, e.kind == :call, do: e)

  describe "a node that never had kino_trace" do
    test "calls/2 traces it with the native tracer, paired and named as here" do
      {_peer, n, _tmp} = bare_peer(:calls)
      trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n])

      21 = :erpc.call(n, Echo, :double, [21]) |> div(2)
      events = await_events(trace, &Enum.any?(&1, fn e -> e.kind == :return end))

      assert [call] = call_events(events, n)
      assert [return] = for(e <- events, e.kind == :return, do: e)
      assert {call.args, return.return, return.call_id, node(call.pid)} == {[21], 42, call.id, n}
      assert is_integer(return.duration) and return.duration >= 0
      # times are the other node's system time (same machine: close to ours)
      assert abs(call.time - System.os_time(:microsecond)) < 60_000_000

      info = Kino.Trace.info(trace)
      assert info.nodes[n].status == :running
      assert info.nodes[n].tracer == :native
      assert info.nodes[n].agent == :running
      Kino.Trace.stop(trace)
    end

    test "messages/2 and processes/2 trace it, with registered names" do
      {_peer, n, _tmp} = bare_peer(:messages)
      echo = :erpc.call(n, Echo, :start_echo, [])
      true = :erpc.call(n, :erlang, :register, [:echo_server, echo])

      trace = Kino.Trace.messages(echo, nodes: [n])
      send(echo, {self(), :hello})
      assert_receive {:echo, :hello}, 5_000

      events =
        await_events(
          trace,
          &(Enum.any?(&1, fn e -> e.kind == :receive end) and
              Enum.any?(&1, fn e -> e.kind == :send end))
        )

      receive_event = Enum.find(events, &(&1.kind == :receive))
      assert receive_event.data == {self(), :hello}
      assert receive_event.name == :echo_server
      Kino.Trace.stop(trace)

      procs = Kino.Trace.processes(:new, nodes: [n])
      :erpc.call(n, :erlang, :spawn, [Echo, :double, [1]])
      events = await_events(procs, &Enum.any?(&1, fn e -> e.kind == :exit end))
      assert Enum.any?(events, &(&1.kind == :exit and &1.data == :normal and node(&1.pid) == n))
      Kino.Trace.stop(procs)
    end

    test "a pattern is checked against that node's modules" do
      {_peer, n, _tmp} = bare_peer(:preflight)

      assert_raise ArgumentError, ~r/on node #{Regex.escape(inspect(n))}: .*Echo.nope/s, fn ->
        Kino.Trace.calls(["KinoTraceTest.Remote.Echo.nope/1"], nodes: [n])
      end

      assert kino_modules(n) == []
    end
  end

  describe "nothing is left behind" do
    # A first trace loads the OTP modules tracing needs (they are the node's own, and
    # stay); from then on, a trace leaves the node exactly as it was.
    defp warmed_footprint(n, tmp) do
      before = footprint_after_trace(n, tmp)
      assert before.tmp == []
      before
    end

    test "after stop/1" do
      {_peer, n, tmp} = bare_peer(:clean_stop)
      before = warmed_footprint(n, tmp)

      trace = Kino.Trace.calls([Echo], nodes: [n])
      assert :kino_trace_agent in kino_modules(n)
      # the NIF library is deleted as soon as it is loaded
      assert File.ls!(tmp) == []
      :erpc.call(n, Echo, :double, [2])
      await_events(trace, &(&1 != []))
      Kino.Trace.stop(trace)

      # stop/1 returns once the node is as it was: nothing to wait for (issue 23 item 6)
      now = footprint(n, tmp)

      assert now == before,
             "modules +#{inspect(now.modules -- before.modules)}, processes #{before.processes} -> #{now.processes}"

      assert kino_modules(n) == []
      assert Kino.Trace.info(trace).nodes[n][:agent] == :removed
    end

    test "after its owner is killed" do
      {_peer, n, tmp} = bare_peer(:clean_owner)
      before = warmed_footprint(n, tmp)
      parent = self()

      owner =
        spawn(fn ->
          trace = Kino.Trace.calls([Echo], nodes: [n])
          send(parent, {:trace, trace})
          Process.sleep(:infinity)
        end)

      assert_receive {:trace, _trace}, 30_000
      assert :kino_trace_agent in kino_modules(n)
      Process.exit(owner, :kill)

      assert_clean(n, tmp, before)
    end

    test "after the connection drops mid-trace" do
      {peer, n, tmp} = bare_peer(:clean_disconnect, standard_io: true)
      reconnect_from_peer(peer, n)
      before = warmed_footprint(n, tmp)

      trace = Kino.Trace.calls([Echo], nodes: [n])
      Kino.Trace.subscribe(trace)
      id = trace.id
      # a flood running there when the connection drops
      :erpc.call(n, :erlang, :spawn, [
        :lists,
        :foreach,
        [&Echo.double/1, Enum.to_list(1..200_000)]
      ])

      assert true = :erlang.disconnect_node(n)
      assert_receive {:kino_trace, ^id, {:node_down, ^n, :noconnection}}, 10_000

      true = Node.connect(n)
      assert_clean(n, tmp, before)
      assert Kino.Trace.info(trace).nodes[n].status == :gone
      Kino.Trace.stop(trace)
    end
  end

  describe "test support" do
    # Issue 23 item 8: the warm-up of "after the connection drops mid-trace" found the
    # node not connected: the peer's connect came before it had seen the drop.
    test "reconnect_from_peer/2 returns with the node connected, both ways" do
      {peer, n, _tmp} = bare_peer(:reconnect, standard_io: true)

      for round <- 1..50 do
        reconnect_from_peer(peer, n)
        assert KinoTrace.Plan.Nodes.resolve!([n]) == [n], "round #{round}"
        assert node() in :peer.call(peer, :erlang, :nodes, [:connected]), "round #{round}"
      end
    end
  end
end

defmodule Kino.Trace.AgentFallbackTest do
  # Issue 16: where the native tracer cannot be shipped, the pure-Erlang fallback traces.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers, only: [await_events: 2, observe: 3, wait_until: 1]
  import KinoTraceTest.Peers

  alias KinoTraceTest.Remote.Echo

  @moduletag :slow
  @moduletag timeout: 180_000

  setup_all do
    ensure_distribution()
  end

  # A directory no process can create anything in, root included (sysfs refuses
  # mkdir): a plain mode 0555 directory would not stop root.
  defp unwritable_dir do
    dir = Path.join(System.tmp_dir!(), "kino_trace_ro_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    File.chmod!(dir, 0o555)
    on_exit(fn -> File.chmod(dir, 0o755) && File.rm_rf(dir) end)

    if File.touch(Path.join(dir, "probe")) == :ok, do: "/sys", else: dir
  end

  test "agent: :fallback traces with the pure-Erlang tracer and says so" do
    {_peer, n, _tmp} = bare_peer(:forced)
    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n], agent: :fallback)

    :erpc.call(n, Echo, :double, [5])
    events = await_events(trace, &Enum.any?(&1, fn e -> e.kind == :return end))
    [call] = for e <- events, e.kind == :call, do: e
    [return] = for e <- events, e.kind == :return, do: e
    assert {call.args, return.return, return.call_id} == {[5], 10, call.id}

    assert {:fallback, why} = Kino.Trace.info(trace).nodes[n].tracer
    assert why =~ "agent: :fallback"
    refute :kino_trace_tracer in kino_modules(n)
    Kino.Trace.stop(trace)
    wait_until(fn -> kino_modules(n) == [] end)
  end

  test "a node whose temporary directory cannot be written gets the fallback, and why" do
    dir = unwritable_dir()
    {_peer, n, _tmp} = bare_peer(:readonly, tmpdir: dir)
    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n])

    assert {:fallback, why} = Kino.Trace.info(trace).nodes[n].tracer
    assert why =~ "cannot create a directory in #{dir}"

    :erpc.call(n, Echo, :double, [6])
    await_events(trace, &Enum.any?(&1, fn e -> e.kind == :return and e.return == 12 end))
    Kino.Trace.stop(trace)
    wait_until(fn -> kino_modules(n) == [] end)
  end

  test "a node whose temporary directory is missing gets the fallback, and why; nothing is left" do
    missing =
      Path.join(System.tmp_dir!(), "kino_trace_missing_#{System.unique_integer([:positive])}")

    {_peer, n, _tmp} = bare_peer(:missing_tmp, tmpdir: missing)
    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n])

    assert {:fallback, why} = Kino.Trace.info(trace).nodes[n].tracer
    assert why =~ "cannot create a directory in #{missing} for the native tracer (enoent)"

    :erpc.call(n, Echo, :double, [7])
    await_events(trace, &Enum.any?(&1, fn e -> e.kind == :return and e.return == 14 end))
    Kino.Trace.stop(trace)
    assert kino_modules(n) == []
    refute File.exists?(missing)
  end

  test "a flood on the fallback: memory stays bounded, every event is accounted for" do
    {_peer, n, _tmp} = bare_peer(:flood)

    trace =
      Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"],
        nodes: [n],
        agent: :fallback,
        return: false
      )

    calls = 300_000
    baseline = :erpc.call(n, :erlang, :memory, [:total])

    flooder =
      :erpc.call(n, :erlang, :spawn, [:lists, :foreach, [&Echo.double/1, Enum.to_list(1..calls)]])

    peak =
      observe(fn -> :erpc.call(n, :erlang, :is_process_alive, [flooder]) end, 50, fn ->
        :erpc.call(n, :erlang, :memory, [:total])
      end)
      |> Enum.max()

    # what was queued is delivered before the answer
    Kino.Trace.events(trace, 1)
    node_info = Kino.Trace.info(trace).nodes[n]

    # after its guard switched tracing off, the worker set the flags again: tracing goes on
    :erpc.call(n, Echo, :double, [-1])
    await_events(trace, &Enum.any?(&1, fn e -> e.args == [-1] end))
    Kino.Trace.stop(trace)
    dropped = node_info.dropped |> Map.values() |> Enum.sum()
    growth = div(peak - baseline, 1024 * 1024)
    %{received: received, switched_off: switched_off} = node_info.fallback

    IO.puts(
      "\n  fallback flood: #{calls} calls, #{received} traced (#{switched_off} mailbox guard switch-offs), " <>
        "#{node_info.accepted} accepted, #{dropped} dropped; node memory +#{growth} MiB at peak"
    )

    # every trace message is accepted or dropped; calls made while the guard had switched
    # tracing off were never traced
    assert node_info.accepted + dropped == received
    assert received <= calls and (received == calls or switched_off > 0)
    assert node_info.accepted == node_info.delivered + node_info.queued + node_info.discarded
    # bounded by the caps (100 000 queued events, the tracer's mailbox guard), not by the flood
    assert growth < 256
    assert switched_off > 0, "the flood never tripped the mailbox guard: the test shows nothing"
  end
end
