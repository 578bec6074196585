defmodule KinoTrace.Remote.Merge do
  @moduledoc false
  # What a trace over several nodes answers, made of its nodes' answers: the results of
  # set_patterns and the info (`KinoTrace.Remote.Coordinator` asks, this combines). Pure
  # functions of the coordinator's state and the replies.

  @doc """
  The set_patterns results of a trace over several nodes, from each node's reply. Per
  entry: an error on any node is the entry's error (named by node, but for this one's);
  otherwise the first node's result, in the plan's order of nodes. A node that did not
  answer (no reply in `replies`) makes every entry `not_answering`.
  """
  @spec results([term()], [node()], [{node(), term()}], String.t()) :: [{term(), term()}]
  def results(inputs, nodes, replies, not_answering) do
    per_node =
      for node <- nodes, {^node, reply} <- replies do
        case reply do
          results when is_list(results) -> {node, Enum.map(results, &elem(&1, 1))}
          {:error, message} -> {node, List.duplicate({:error, message}, length(inputs))}
        end
      end

    inputs
    |> Enum.with_index()
    |> Enum.map(fn {input, i} ->
      results = for {node, results} <- per_node, do: {node, Enum.at(results, i)}

      case Enum.find(results, &match?({_, {:error, _}}, &1)) do
        {node, {:error, message}} when node == node() ->
          {input, {:error, message}}

        {node, {:error, message}} ->
          {input, {:error, "on node #{inspect(node)}: #{message}"}}

        nil ->
          {input,
           with([{_, result} | _] <- results, do: result, else: (_ -> {:error, not_answering}))}
      end
    end)
  end

  @counters [:accepted, :delivered, :queued, :discarded, :bytes_queued]

  @doc "The info of a trace over several nodes: the nodes' counters summed, and each node's own."
  @spec info(map()) :: map()
  def info(state) do
    nodes =
      Map.new(state.nodes, fn {node, entry} ->
        {node, Map.put(entry.info, :status, entry.status)}
      end)

    counted = Enum.filter(Map.values(nodes), &Map.has_key?(&1, :accepted))
    sum = fn key -> Enum.reduce(counted, 0, &(&2 + Map.get(&1, key, 0))) end

    dropped = Enum.reduce(counted, %{}, &Map.merge(&2, &1.dropped, fn _reason, a, b -> a + b end))

    first = Enum.find_value(state.plan.nodes, %{}, &(nodes[&1][:patterns] && nodes[&1]))

    Map.merge(Map.new(@counters, &{&1, sum.(&1)}), %{
      id: state.id,
      status: state.status,
      patterns: Map.get(first, :patterns, []),
      what: Kino.Trace.Plan.summary(state.plan),
      dropped: dropped,
      rate: Enum.reduce(counted, 0.0, &(&2 + &1.rate)),
      started_at: state.started_at,
      limit: state.plan.options[:limit],
      traced: Enum.any?(counted, &Map.get(&1, :traced, false)),
      stack_guarded: sum.(:stack_guarded),
      subscribers: map_size(state.subscribers),
      reapplied: sum.(:reapplied),
      nodes: nodes
    })
  end

  @doc """
  Each stopped session's last info (its final counters, and what another node's agent
  left there), as it kept it when it ended (`KinoTrace.Client.Final`).
  """
  @spec final_infos(%{node() => map()}) :: %{node() => map()}
  def final_infos(nodes) do
    Map.new(nodes, fn {node, entry} ->
      case entry.info do
        %{id: id} ->
          case KinoTrace.Client.Final.fetch(id) do
            {:ok, info} -> {node, %{entry | info: info}}
            :error -> {node, entry}
          end

        _ ->
          {node, entry}
      end
    end)
  end
end
