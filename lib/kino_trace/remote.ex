defmodule KinoTrace.Remote do
  @moduledoc false
  # Tracing several nodes as one trace: the `nodes:` option of `Kino.Trace.calls/2`,
  # `messages/2`, `processes/2` and `trace/2`.
  #
  # A coordinator process on the calling node (`KinoTrace.Remote.Coordinator`) starts
  # one ordinary `KinoTrace.Session` per node, all of them on this node, with the same
  # patterns and the same limits per node, and subscribes to each. This node's session
  # traces here; another node's part of the plan is built here against that node's
  # modules and names (`Kino.Trace.Plan.node_part!/3`) and traced there by kino_trace's
  # agent, shipped to that node for the trace and removed after (`KinoTrace.Agent`):
  # the other nodes need nothing of kino_trace. Decoding, pairing and history happen
  # here, off the traced nodes.
  #
  # The coordinator merges the sessions' events into the one trace (each event's `:node`
  # says where it happened), renumbers them so ids stay unique, and keeps the trace's
  # history. The sessions are owned by the coordinator: when it ends, they end, and so
  # does each agent's trace on its node; when a connection drops, that node's agent ends
  # its trace by itself. A node that goes down mid-trace is marked gone (subscribers get
  # `{:kino_trace, id, {:node_down, node, reason}}`) and the others go on.
  #
  #     Kino.Trace.calls(["MyApp.Repo.get/2"], nodes: :all)
  #     Kino.Trace.messages(:distributed, nodes: [:"a@127.0.0.1", :"b@127.0.0.1"])
  #
  # Patterns are checked for every node before anything is traced.

  alias Kino.Trace.Plan
  alias KinoTrace.{Client, Session}

  @doc """
  Starts the session of `node` for the multi-node `plan`, owned by `coordinator` and
  subscribed by it with `tag`. Every session runs on this node: this node's traces here;
  another node's part of the plan is built here and traced there by kino_trace's agent
  (`KinoTrace.Agent`), which that node needs nothing for. Returns `{:ok, pid}` or
  `{:error, message}`.
  """
  @spec start(node(), pid(), Plan.t(), term()) :: {:ok, pid()} | {:error, String.t()}
  def start(node, coordinator, %Plan{} = plan, tag) do
    {_what, options} = Plan.for_node(plan, history: 1)
    # (a recorder's: each node keeps its ring, KinoTrace.Remote.Coordinator snapshots them)
    node_plan = %{Plan.part(plan, node) | options: options, record: plan.record}

    case Session.start(coordinator, node_plan) do
      {:ok, pid, _id} ->
        :ok = Client.subscribe_tagged(pid, coordinator, tag)
        {:ok, pid}

      {:error, %{__exception__: true} = e} ->
        {:error, Exception.message(e)}

      {:error, reason} ->
        {:error, inspect(reason)}
    end
  rescue
    e in ArgumentError -> {:error, Exception.message(e)}
  end

  @doc """
  Renumbers merged events so ids stay unique across nodes, keeping each return's
  `call_id` pointing at its call. `state` is `{next_id, %{{node, old_id} => new_id}}`.

      iex> call = %Kino.Trace.Event{id: 7, kind: :call, node: :a@host}
      iex> return = %Kino.Trace.Event{id: 8, kind: :return, call_id: 7, node: :a@host}
      iex> {events, _state} = KinoTrace.Remote.renumber([call, return], {1, %{}})
      iex> Enum.map(events, &{&1.id, &1.call_id})
      [{1, nil}, {2, 1}]
  """
  @spec renumber([Kino.Trace.Event.t()], {pos_integer(), map()}) ::
          {[Kino.Trace.Event.t()], {pos_integer(), map()}}
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
