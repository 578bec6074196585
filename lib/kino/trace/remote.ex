defmodule Kino.Trace.Remote do
  @moduledoc """
  Tracing other nodes: the `nodes:` option of `Kino.Trace.calls/2`, `messages/2`,
  `processes/2` and `trace/2`.

  The session process on the calling node coordinates: it starts one ordinary
  `Kino.Trace.Session` on each remote node over Erlang distribution (`:erpc`), with the
  same patterns and the same limits per node, and subscribes to it. Remote events are
  merged into the one trace (each event's `:node` says where it happened) and renumbered
  so ids stay unique. A remote session is owned by the coordinator: when the coordinator
  ends, or the connection drops, the remote session ends too. A node that goes down
  mid-trace is marked gone (subscribers get `{:kino_trace, id, {:node_down, node,
  reason}}`) and the others go on.

      Kino.Trace.calls(["MyApp.Repo.get/2"], nodes: :all)
      Kino.Trace.messages(:distributed, nodes: [:"a@127.0.0.1", :"b@127.0.0.1"])

  Every node must have kino_trace loaded (its code path and compiled native tracer);
  patterns are checked on every node before anything is traced.
  """

  @call_timeout 15_000

  @doc """
  Resolves the `nodes:` option: a node, a list of nodes, or `:all` (this node and every
  connected node). Raises `ArgumentError` naming a node that is not connected or does
  not have kino_trace loaded.
  """
  @spec resolve_nodes!(node() | [node()] | :all) :: [node()]
  def resolve_nodes!(:all), do: resolve_nodes!([node() | Node.list()])
  def resolve_nodes!(node) when is_atom(node), do: resolve_nodes!([node])

  def resolve_nodes!(nodes) when is_list(nodes) do
    nodes = Enum.uniq(nodes)
    Enum.each(nodes, &check_node!/1)
    nodes
  end

  defp check_node!(node) when node == node(), do: :ok

  defp check_node!(node) when is_atom(node) do
    unless node in Node.list() do
      raise ArgumentError, "cannot trace node #{inspect(node)}: it is not connected to #{inspect(node())}"
    end

    loaded =
      try do
        :erpc.call(node, :code, :ensure_loaded, [Kino.Trace.Session], @call_timeout)
      catch
        kind, reason -> {:error, {kind, reason}}
      end

    case loaded do
      {:module, _} ->
        :ok

      _ ->
        raise ArgumentError,
              "cannot trace node #{inspect(node)}: kino_trace is not loaded there " <>
                "(add its code path on that node, e.g. with :code.add_paths/1, and its compiled native tracer)"
    end
  end

  defp check_node!(other), do: raise(ArgumentError, "invalid value for :nodes: #{inspect(other)} is not a node name")

  @doc """
  Checks on `node` that `what` can be traced there (patterns, targets), without tracing.
  Returns `:ok` or raises `ArgumentError` naming the node.
  """
  @spec preflight!(node(), keyword(), keyword()) :: :ok
  def preflight!(node, what, opts) do
    case call(node, Kino.Trace.Remote, :check_here, [what, opts]) do
      :ok -> :ok
      {:error, message} -> raise ArgumentError, "on node #{inspect(node)}: #{message}"
    end
  end

  @doc false
  # Runs on the remote node.
  def check_here(what, opts) do
    Kino.Trace.plan!(what, opts)
    :ok
  rescue
    e in ArgumentError -> {:error, Exception.message(e)}
  end

  @doc """
  Starts a session on `node` owned by `coordinator` and subscribed by it.
  Returns `{:ok, pid}` or `{:error, message}`.
  """
  @spec start(node(), pid(), keyword(), keyword()) :: {:ok, pid()} | {:error, String.t()}
  def start(node, coordinator, what, opts) do
    call(node, Kino.Trace.Remote, :start_here, [coordinator, what, opts])
  end

  @doc false
  # Runs on the remote node.
  def start_here(coordinator, what, opts) do
    {:ok, _} = Application.ensure_all_started(:kino_trace)
    {patterns, opts} = Kino.Trace.plan!(what, opts)
    opts = Keyword.put(opts, :tag, {node(), :remote})

    case Kino.Trace.Session.start(coordinator, patterns, opts) do
      {:ok, pid, _id} ->
        :ok = GenServer.call(pid, {:subscribe, coordinator})
        {:ok, pid}

      {:error, reason} ->
        {:error, inspect(reason)}
    end
  rescue
    e in ArgumentError -> {:error, Exception.message(e)}
  end

  defp call(node, m, f, a) do
    :erpc.call(node, m, f, a, @call_timeout)
  catch
    :error, {:erpc, reason} -> {:error, "node unreachable (#{inspect(reason)})"}
    kind, reason -> {:error, Exception.format_banner(kind, reason)}
  end

  @doc """
  Renumbers merged events so ids stay unique across nodes, keeping each return's
  `call_id` pointing at its call. `state` is `{next_id, %{{node, old_id} => new_id}}`.
  """
  @spec renumber([Kino.Trace.Event.t()], {pos_integer(), map()}) :: {[Kino.Trace.Event.t()], {pos_integer(), map()}}
  def renumber(events, {next_id, ids}) do
    ids = if map_size(ids) > 100_000, do: %{}, else: ids

    Enum.map_reduce(events, {next_id, ids}, fn event, {next, ids} ->
      {call_id, ids} =
        case event.call_id do
          nil -> {nil, ids}
          old -> Map.pop(ids, {event.node, old})
        end

      ids = if event.kind == :call, do: Map.put(ids, {event.node, event.id}, next), else: ids
      {%{event | id: next, call_id: call_id}, {next + 1, ids}}
    end)
  end
end
