defmodule KinoTrace.Remote.Nodes do
  @moduledoc false
  # How KinoTrace.Remote.Coordinator asks its nodes' sessions: every answering node at
  # once, for at most timeout/0 in all; a node that does not answer in time is marked
  # `:unresponsive` in the coordinator's state (its `nodes` map), and the tick's info
  # requests (ask_info/1, info_reply/3) mark it answering again.

  alias KinoTrace.Client

  @remote_timeout 2_000

  @doc "The longest any request waits for the nodes, in all (ms)."
  @spec timeout() :: pos_integer()
  def timeout, do: @remote_timeout

  defp answering?(%{status: status}), do: status not in [:gone, :stopped, :unresponsive]

  # Asks every answering node's session the same; returns [{node, reply}], with
  # {:error, message} for a node that did not answer in time (then marked :unresponsive).
  # `on_reply` may fold each reply into the state.
  @spec on_nodes(map(), term(), (map(), node(), term() -> map())) :: {[{node(), term()}], map()}
  def on_nodes(state, request, on_reply \\ fn state, _node, _reply -> state end) do
    asked =
      for {node, entry} <- state.nodes, answering?(entry), reduce: :gen_server.reqids_new() do
        requests -> Client.send_request(entry.pid, request, node, requests)
      end

    deadline = System.monotonic_time(:millisecond) + timeout()
    {replies, state} = collect_replies(state, asked, deadline, [], on_reply)

    skipped =
      for {node, %{status: :unresponsive}} <- state.nodes,
          not List.keymember?(replies, node, 0),
          do: {node, {:error, not_answering()}}

    {replies ++ skipped, state}
  end

  @spec not_answering() :: String.t()
  def not_answering, do: "the node is not answering (no reply within #{timeout()} ms)"

  defp collect_replies(state, requests, deadline, acc, on_reply) do
    timeout = max(deadline - System.monotonic_time(:millisecond), 0)

    case :gen_server.receive_response(requests, timeout, true) do
      :no_request ->
        {Enum.reverse(acc), state}

      :timeout ->
        late = for {_id, node} <- :gen_server.reqids_to_list(requests), do: node

        state =
          Enum.reduce(late, state, fn node, state ->
            put_in(state.nodes[node].status, :unresponsive)
          end)

        errors = for node <- late, do: {node, {:error, not_answering()}}
        {Enum.reverse(acc, errors), state}

      {{:reply, reply}, node, requests} ->
        collect_replies(
          on_reply.(state, node, {:reply, reply}),
          requests,
          deadline,
          [{node, reply} | acc],
          on_reply
        )

      {{:error, {reason, _server}}, node, requests} ->
        collect_replies(
          state,
          requests,
          deadline,
          [{node, {:error, inspect(reason)}} | acc],
          on_reply
        )
    end
  end

  # On every tick, every node that is not gone is asked for its counters without
  # waiting; the reply (handle_info/2) also marks an unresponsive node answering. A node
  # that has not answered the last request is not asked again: a hung node holds one
  # request, not one more per tick.
  @spec ask_info(map()) :: map()
  def ask_info(state) do
    waiting = for {_id, node} <- :gen_server.reqids_to_list(state.requests), do: node

    requests =
      for {node, entry} <- state.nodes,
          entry.status not in [:gone, :stopped],
          node not in waiting,
          reduce: state.requests do
        requests -> Client.send_request(entry.pid, :info, node, requests)
      end

    %{state | requests: requests}
  end

  @spec info_reply(map(), node(), term()) :: map()
  def info_reply(state, node, {:reply, info})
      when is_map(info) and is_map_key(state.nodes, node) do
    entry = state.nodes[node]

    status =
      if entry.status == :unresponsive, do: Map.get(info, :status, :running), else: entry.status

    put_in(state.nodes[node], %{entry | info: info, status: status})
  end

  def info_reply(state, _node, _reply), do: state
end
