defmodule KinoTraceTest.Peers do
  @moduledoc false
  # Real peer nodes on loopback for the distributed tests.

  require ExUnit.Assertions

  @doc """
  Makes this node a distributed node on loopback (once per test run; epmd started if
  needed), for tests that start `:peer` nodes. The name has the OS pid in it: other test
  runs may share this machine.
  """
  def ensure_distribution do
    unless Node.alive?() do
      {_, 0} = System.cmd("epmd", ["-daemon"])
      # A name of our own: other test runs may share this machine.
      start_distribution(:"kino_trace_test_#{System.pid()}@127.0.0.1", 50)
    end

    :ok
  end

  # epmd may take a moment to listen after `epmd -daemon`.
  defp start_distribution(name, tries) do
    KinoTraceTest.Helpers.wait_until(
      fn -> match?({:ok, _}, Node.start(name, :longnames)) end,
      tries * 10,
      fn -> "could not start distribution: #{inspect(Node.start(name, :longnames))}" end
    )

    :ok
  end

  @doc """
  Starts a peer node, stopped when the test ends. `code:`
    * `:kino_trace` (default) - this node's code path, kino_trace started there;
    * `:bare` - OTP's code path and Elixir's alone: no kino_trace, no test modules;
    * `:otp` - OTP's code path alone (no Elixir).
  `env:` - `[{name, value}]` environment variables (charlists); `standard_io: true`
  controls the peer over its standard I/O, so the distribution connection can be cut
  without the peer ending; `hidden: true` starts it with `-hidden`, so its connection to
  this node is hidden, as every connection of Livebook's runtime is; `umask: mask` starts
  it under that umask (through `/bin/sh`).
  """
  def start_peer(name, opts \\ []) do
    code = Keyword.get(opts, :code, :kino_trace)

    args =
      case code do
        :kino_trace -> Enum.flat_map(:code.get_path(), &[~c"-pa", &1])
        :bare -> Enum.flat_map(elixir_paths(), &[~c"-pa", &1])
        :otp -> []
      end

    args = if opts[:hidden], do: [~c"-hidden" | args], else: args

    peer_opts = %{
      name: :"#{name}_#{System.unique_integer([:positive])}",
      host: ~c"127.0.0.1",
      longnames: true,
      args: args,
      env: Keyword.get(opts, :env, [])
    }

    peer_opts =
      if opts[:standard_io], do: Map.put(peer_opts, :connection, :standard_io), else: peer_opts

    peer_opts =
      case opts[:umask] do
        nil ->
          peer_opts

        mask ->
          erl = Path.join([:code.root_dir(), "bin", "erl"])
          umask = Integer.to_string(mask, 8)

          Map.put(
            peer_opts,
            :exec,
            {~c"/bin/sh",
             [~c"-c", ~c"umask #{umask} && exec \"$0\" \"$@\"", String.to_charlist(erl)]}
          )
      end

    {:ok, peer, node} = :peer.start(peer_opts)
    if opts[:standard_io], do: true = Node.connect(node)

    if code == :kino_trace,
      do: {:ok, _} = :erpc.call(node, Application, :ensure_all_started, [:kino_trace])

    if opts[:on_exit] != false, do: ExUnit.Callbacks.on_exit(fn -> stop_peer(peer) end)
    {peer, node}
  end

  # Elixir's lib dirs on this node's code path (elixir, logger, ex_unit, mix...).
  defp elixir_paths do
    root = :code.lib_dir(:elixir) |> List.to_string() |> Path.dirname()
    for path <- :code.get_path(), String.starts_with?(List.to_string(path), root), do: path
  end

  @doc "Stops a peer; nothing if it is gone already."
  def stop_peer(peer) do
    :peer.stop(peer)
  catch
    _, _ -> :ok
  end

  @doc "Loads `module` (compiled here) on `node` only, as a user's own module there."
  def load_module(node, module) do
    {^module, binary, file} = :code.get_object_code(module)
    {:module, ^module} = :erpc.call(node, :code, :load_binary, [module, file, binary])
    :ok
  end

  @doc """
  What kino_trace could leave on `node`: its loaded modules, the entries of `tmp` (its
  temporary directory), its trace sessions and its number of processes.
  """
  def footprint(node, tmp) do
    # sessions first: asking loads the :trace module
    sessions = :erpc.call(node, :trace, :session_info, [:all])

    %{
      sessions: Enum.sort(sessions),
      modules: :erpc.call(node, :code, :all_loaded, []) |> Enum.map(&elem(&1, 0)) |> Enum.sort(),
      tmp: tmp |> File.ls!() |> Enum.sort(),
      processes: length(:erpc.call(node, :erlang, :processes, []))
    }
  end

  @doc "What each process of `node` runs (to tell what a footprint's count differs by)."
  def process_infos(node) do
    for pid <- :erpc.call(node, :erlang, :processes, []),
        info =
          :erpc.call(node, :erlang, :process_info, [
            pid,
            [:initial_call, :current_function, :registered_name]
          ]),
        is_list(info),
        do: {pid, info}
  end

  @doc "The trace sessions kino_trace runs on `node` (its agent's, or its own)."
  def kino_sessions(node) do
    for {:kino_trace, _} = session <- :erpc.call(node, :trace, :session_info, [:all]), do: session
  end

  @doc "The kino_trace modules loaded on `node`."
  def kino_modules(node) do
    for {m, _} <- :erpc.call(node, :code, :all_loaded, []),
        String.starts_with?(Atom.to_string(m), ["kino_trace", "Elixir.Kino.Trace"]),
        do: m
  end

  @doc """
  A peer with OTP's and Elixir's code paths alone (`code: :bare`, see `start_peer/2`),
  the user's module `KinoTraceTest.Remote.Echo` loaded there, and a temporary directory
  of its own (its TMPDIR, unless `tmpdir:` is given), so what kino_trace writes there
  can be listed. Returns `{peer, node, tmp}`.
  """
  def bare_peer(name, opts \\ []) do
    tmp = Path.join(System.tmp_dir!(), "kino_trace_peer_#{System.unique_integer([:positive])}")
    File.mkdir_p!(tmp)
    ExUnit.Callbacks.on_exit(fn -> File.rm_rf(tmp) end)
    {tmpdir, opts} = Keyword.pop(opts, :tmpdir, tmp)

    {peer, node} =
      start_peer(
        name,
        Keyword.merge([code: :bare, env: [{~c"TMPDIR", String.to_charlist(tmpdir)}]], opts)
      )

    # nothing of kino_trace there: a test would prove nothing otherwise
    :non_existing = :erpc.call(node, :code, :which, [KinoTrace.Session])
    load_module(node, KinoTraceTest.Remote.Echo)
    {peer, node, tmp}
  end

  @doc """
  The footprint of `node` once two looks 200 ms apart agree (the agent's last process,
  which purges its module, may still be running).
  """
  def settled_footprint(node, tmp) do
    first = footprint(node, tmp)
    # time is the subject: settled means unchanged over 200 ms (no event marks the end)
    Process.sleep(200)
    if footprint(node, tmp) == first, do: first, else: settled_footprint(node, tmp)
  end

  @doc """
  `node`'s footprint (`settled_footprint/2`) once a first trace there has come and gone:
  it loads the OTP modules tracing needs (the node's own, they stay), so a footprint
  taken after the next trace compares equal. `node` has KinoTraceTest.Remote.Echo
  (`bare_peer/2`).
  """
  def footprint_after_trace(node, tmp) do
    trace = Kino.Trace.calls([KinoTraceTest.Remote.Echo], nodes: [node])
    :erpc.call(node, KinoTraceTest.Remote.Echo, :double, [1])
    KinoTraceTest.Helpers.await_events(trace, &(&1 != []))
    Kino.Trace.stop(trace)
    KinoTraceTest.Helpers.wait_until(fn -> kino_modules(node) == [] end)
    settled_footprint(node, tmp)
  end

  @doc """
  Waits (10 s at most) until `node` is as `before` (`footprint/2`), then asserts it, saying
  what differs: nothing of kino_trace is left there.
  """
  def assert_clean(node, tmp, before) do
    KinoTraceTest.Helpers.wait_until(fn -> footprint(node, tmp) == before end, 1_000, fn ->
      now = footprint(node, tmp)

      "modules: +#{inspect(now.modules -- before.modules)} -#{inspect(before.modules -- now.modules)}; " <>
        "processes: #{before.processes} -> #{now.processes}; sessions #{inspect(now.sessions)}; tmp #{inspect(now.tmp)}; " <>
        "processes now: #{inspect(for {_, i} <- process_infos(node), do: {i[:registered_name], i[:initial_call]})}"
    end)

    ExUnit.Assertions.assert(kino_modules(node) == [])
    ExUnit.Assertions.assert(kino_sessions(node) == [])
  end

  @doc """
  Disconnects `node` and has it connect back to this one itself (over the peer's
  standard I/O): a connection a node makes starts processes of its own, which stay (host
  name lookups, `inet_gethost_native`). Done once before a footprint is taken, a
  footprint after a dropped connection compares equal.
  """
  def reconnect_from_peer(peer, node) do
    :ok = :net_kernel.monitor_nodes(true, node_type: :all)
    true = :erlang.disconnect_node(node)
    # The peer learns of the drop a moment later: a connect it makes before then finds
    # the old connection still up and does nothing, and then that connection goes, so
    # the next trace found the node not connected (issue 23 item 8).
    peer_sees = fn -> node() not in :peer.call(peer, :erlang, :nodes, [:connected]) end

    KinoTraceTest.Helpers.wait_until(peer_sees, 1_000, fn ->
      "the peer never saw the connection drop"
    end)

    true = :peer.call(peer, :net_kernel, :connect_node, [node()])

    # and this node has the new connection up as well
    receive do
      {:nodeup, ^node, _} -> :ok
    after
      30_000 -> raise "no nodeup from #{node}"
    end

    :ok = :net_kernel.monitor_nodes(false, node_type: :all)
    flush_node_events(node)
    true = node in Node.list(:connected)
    :ok
  end

  defp flush_node_events(node) do
    receive do
      {event, ^node, _} when event in [:nodeup, :nodedown] -> flush_node_events(node)
    after
      0 -> :ok
    end
  end

  @doc """
  Run on a tracing peer (over `:erpc`): starts `Kino.Trace.calls(patterns, opts)` there
  in a process of its own, which sends `parent` `{:tracing, pid, trace}` and lives on.
  """
  def spawn_tracer(parent, patterns, opts) do
    spawn(fn ->
      trace = Kino.Trace.calls(patterns, opts)
      send(parent, {:tracing, self(), trace})
      Process.sleep(:infinity)
    end)
  end

  @doc """
  Run on a tracing peer (over `:erpc`): starts `Kino.Trace.calls(patterns, opts)`, stops
  it, and returns the info of its traced nodes while it ran and once it stopped.
  """
  def trace_and_stop(patterns, opts) do
    trace = Kino.Trace.calls(patterns, opts)
    running = Kino.Trace.info(trace).nodes
    :ok = Kino.Trace.stop(trace)
    {running, Kino.Trace.info(trace).nodes}
  end
end
