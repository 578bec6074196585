defmodule KinoTrace.Remote.Coordinator do
  @moduledoc false
  # One trace over several nodes: the process behind a `Kino.Trace` started with
  # `nodes:` (see `KinoTrace.Remote`).
  #
  # It answers the same requests as a `KinoTrace.Session` (both implement the behaviour
  # KinoTrace.Server), so the API treats both alike, and it makes its requests of the
  # sessions through KinoTrace.Client. It owns one session per node and subscribes to each:
  # their events are renumbered, kept in the trace's history and sent on to its own
  # subscribers. While one of those is backlogged (KinoTrace.Server.Delivery) it
  # holds the batches for them (KinoTrace.Remote.Holding) and lets them through as the
  # subscriber catches up; the sessions count what it holds as unread, so past a
  # session's allowance they hold back and their nodes drop and count, as for any
  # subscriber. It never waits, so it answers requests meanwhile. Requests go to the
  # nodes in parallel and wait for at most 2 s in all: a node that does not answer
  # in time is marked `:unresponsive`, skipped (and reported) by later requests until it
  # answers one of the info requests sent on every tick; its last known counters stay in
  # `info/1`. Stopping kills a session that does not answer, so nothing of the trace is
  # left on any node.
  #
  # A recorder of several nodes (`Kino.Trace.record/2` with `nodes:`): each node keeps
  # its ring; its snapshots (`KinoTrace.Remote.Recording`) are this process's.

  use GenServer
  @behaviour KinoTrace.Server

  alias Kino.Trace.Plan
  alias KinoTrace.{Client, Remote, Server}
  alias KinoTrace.Remote.{Holding, Merge, Nodes, Recording}
  alias KinoTrace.Server.Delivery
  alias KinoTrace.History
  alias KinoTrace.Session.Recorder

  defstruct [
    :id,
    :owner_ref,
    :plan,
    :history,
    # what it keeps since the start (KinoTrace.Latency.Kept: latency, slow calls)
    :kept,
    :started_at,
    # a recorder's snapshots (KinoTrace.Session.Recorder), or nil
    :recorder,
    status: :running,
    # node => %{pid, ref, status, info}
    nodes: %{},
    # pid => {monitor, tag} (KinoTrace.Server.Delivery)
    subscribers: %{},
    # batches held while a subscriber is backlogged (oldest first), their events, and
    # whether a :relay is due
    held: :queue.new(),
    held_events: 0,
    relay_due: false,
    # pending tick info requests
    requests: :gen_server.reqids_new(),
    numbering: {1, %{}},
    setup_error: nil,
    # the `to:` option's writer of other nodes' files (KinoTrace.File.Writer), or nil
    files_writer: nil
  ]

  @doc """
  Starts a coordinator for the multi-node `plan`, owned by `owner`, and waits until
  every node traces. Returns `{:ok, pid, id}`; raises `ArgumentError` naming a node
  whose session could not start (then none is left running).
  """
  @impl KinoTrace.Server
  @spec start(pid(), Plan.t()) :: {:ok, pid(), pos_integer()} | {:error, term()}
  def start(owner, %Plan{} = plan), do: KinoTrace.Starter.start_session(__MODULE__, {owner, plan})

  @impl true
  def init({owner, plan}) do
    Process.flag(:trap_exit, true)
    KinoTrace.Internal.register(self())

    state = %__MODULE__{
      id: Server.new_id(),
      owner_ref: Process.monitor(owner),
      plan: plan,
      history: History.new(plan.options[:history]),
      kept: KinoTrace.Latency.Kept.new(plan.options),
      recorder: Recorder.new(plan.record),
      started_at: System.os_time(:microsecond)
    }

    {:ok, state, {:continue, :setup}}
  end

  # A node that fails to start its session stops the ones already started.
  @impl true
  def handle_continue(:setup, state) do
    state =
      Enum.reduce(state.plan.nodes, state, fn node, state ->
        case Remote.start(node, self(), state.plan, {state.id, node}) do
          {:ok, pid} ->
            put_in(state.nodes[node], %{
              pid: pid,
              ref: Process.monitor(pid),
              status: :running,
              info: %{}
            })

          {:error, message} ->
            raise ArgumentError,
                  if(node == node(), do: message, else: "on node #{inspect(node)}: #{message}")
        end
      end)

    {_replies, state} = Nodes.on_nodes(state, :info, &Nodes.info_reply/3)
    Process.send_after(self(), :tick, Server.tick_ms())
    {:noreply, state}
  rescue
    e in ArgumentError -> {:noreply, %{stop_nodes(state) | setup_error: e, status: :stopped}}
  end

  # --- requests -------------------------------------------------------------------------

  @impl true
  def handle_call(request, from, state), do: handle_request(request, from, state)

  @impl KinoTrace.Server
  def handle_request(:await_setup, _from, %{setup_error: nil} = state),
    do: {:reply, {:ok, state.id}, state}

  def handle_request(:await_setup, _from, state),
    do: {:stop, :normal, {:error, state.setup_error}, state}

  # Its subscribers are held (not traced) by the session of their node.
  def handle_request({:subscribe, pid}, _from, state) do
    if Map.has_key?(state.subscribers, pid) do
      {:reply, :ok, state}
    else
      state = on_node_of(state, pid, :hold)

      {:reply, :ok,
       %{state | subscribers: Map.put(state.subscribers, pid, {Process.monitor(pid), state.id})}}
    end
  end

  def handle_request({:unsubscribe, pid}, _from, state) do
    {entry, subscribers} = Map.pop(state.subscribers, pid)
    with {ref, _tag} <- entry, do: Process.demonitor(ref, [:flush])
    {:reply, :ok, on_node_of(%{state | subscribers: subscribers}, pid, :release)}
  end

  def handle_request({:exclude, pid}, _from, state),
    do: {:reply, :ok, on_node_of(state, pid, :exclude)}

  # Each node delivers what it has queued (bounded) before it answers, so its events
  # are in the mailbox when the answers are in; they and what is held for backlogged
  # subscribers are sent on before the reply.
  def handle_request({:events, n}, _from, state) do
    state = caught_up(state)
    {:reply, History.take(state.history, n), state}
  end

  def handle_request(:latency, _from, state),
    do: caught_up(state) |> then(&{:reply, KinoTrace.Latency.Kept.latency(&1.kept), &1})

  def handle_request(:latency_processes, _from, state),
    do:
      caught_up(state)
      |> then(&{:reply, KinoTrace.Latency.Kept.latency_processes(&1.kept), &1})

  def handle_request(:slow_calls, _from, state),
    do: caught_up(state) |> then(&{:reply, KinoTrace.Latency.Kept.slow_calls(&1.kept), &1})

  def handle_request(:slow_counts, _from, state),
    do: caught_up(state) |> then(&{:reply, KinoTrace.Latency.Kept.slow_counts(&1.kept), &1})

  def handle_request({:sync, cap}, _from, state) do
    {_replies, state} = Nodes.on_nodes(state, {:sync, cap})
    {:reply, :ok, state |> take_delivered() |> Holding.release()}
  end

  def handle_request(:info, _from, state) do
    {_replies, state} = Nodes.on_nodes(state, :info, &Nodes.info_reply/3)
    # (a recorder's snapshots stopped by hand are gone from its figures)
    {_snapshots, state} = Recorder.snapshots(state)
    {:reply, Recording.info(state), state}
  end

  # A recorder's snapshot now: every node's ring (KinoTrace.Remote.Recording).
  def handle_request(:snapshot, _from, state) do
    {reply, state} = Recording.snapshot(state)
    {:reply, reply, state}
  end

  def handle_request(:snapshots, _from, state) do
    {reply, state} = Recording.snapshots(state)
    {:reply, reply, state}
  end

  # (a trace of several nodes has no OTP session on this node of its own)
  def handle_request(:tracer, _from, state), do: {:reply, nil, state}

  # Each node's agent worker (nil for this node's): where the `to:` files of its events
  # are written (KinoTrace.File.Writer); a node that did not answer, its error.
  def handle_request(:workers, _from, state) do
    {replies, state} = Nodes.on_nodes(state, :workers)

    workers =
      for {node, reply} <- replies, reduce: %{} do
        acc when is_map(reply) -> Map.merge(acc, reply)
        acc -> Map.put(acc, node, reply)
      end

    {:reply, workers, state}
  end

  # What tests and debugging read of the coordinator (KinoTrace.Client.internals/1).
  def handle_request(:internals, _from, state) do
    internals = %{
      plan: state.plan,
      nodes: Map.new(state.nodes, fn {node, entry} -> {node, entry.pid} end),
      waiting: for({_id, node} <- :gen_server.reqids_to_list(state.requests), do: node),
      held_batches: :queue.len(state.held),
      held_events: state.held_events
    }

    {:reply, internals, state}
  end

  def handle_request({:set_patterns, inputs}, _from, state) do
    {replies, state} = Nodes.on_nodes(state, {:set_patterns, inputs})
    {:reply, Merge.results(inputs, state.plan.nodes, replies, Nodes.not_answering()), state}
  end

  def handle_request(op, _from, state) when op in [:pause, :resume] do
    {_replies, state} = Nodes.on_nodes(state, op)

    case {op, state.status} do
      {:pause, :running} ->
        {:reply, :ok, broadcast(%{state | status: :paused}, {:status, :paused})}

      {:resume, :paused} ->
        {:reply, :ok, broadcast(%{state | status: :running}, {:status, :running})}

      _ ->
        {:reply, :ok, state}
    end
  end

  # (stop/1 answers once the `to:` files hold what was delivered: their writer ended)
  def handle_request(:stop, _from, state),
    do:
      {:stop, :normal, :ok, tap(finish(state), &KinoTrace.File.Writer.await_end(&1.files_writer))}

  # The writer of the `to:` files: before other nodes' workers end with the trace, it
  # sends them what was delivered (`finish/1`); stop/1 waits for it to end.
  def handle_request({:files_writer, pid}, _from, state),
    do: {:reply, :ok, %{state | files_writer: pid}}

  # Each node has delivered what it had queued (bounded), and that is sent on.
  defp caught_up(state) do
    {_replies, state} = Nodes.on_nodes(state, {:sync, Server.max_sync_drain()})
    state |> take_delivered() |> Holding.release()
  end

  defp on_node_of(state, pid, op) do
    case Map.get(state.nodes, node(pid)) do
      %{status: status} = entry when status not in [:gone, :stopped] ->
        # a session answers these at once (no draining)
        Client.on_pid(entry.pid, op, pid, Nodes.timeout())
        state

      _ ->
        state
    end
  end

  # --- events and statuses from the nodes --------------------------------------------------

  @impl true
  def handle_info({:kino_trace, {id, node}, {:events, events}}, %{id: id} = state) do
    {:noreply, deliver(state, node, events)}
  end

  def handle_info(:relay, state), do: {:noreply, Holding.relay(%{state | relay_due: false})}

  def handle_info({:kino_trace, {id, node}, {:status, status}}, %{id: id} = state) do
    state = put_in(state.nodes[node].status, status)
    {:noreply, maybe_ended(state)}
  end

  def handle_info(:tick, state) do
    Process.send_after(self(), :tick, Server.tick_ms())
    {:noreply, Nodes.ask_info(state)}
  end

  def handle_info({:DOWN, ref, :process, _pid, _reason}, %{owner_ref: ref} = state) do
    {:stop, :normal, finish(state)}
  end

  def handle_info({:DOWN, ref, :process, pid, reason}, state) do
    case Recorder.snapshot_down(state, ref) do
      {:ok, state} -> {:noreply, state}
      :not_mine -> node_or_subscriber_down(state, ref, pid, reason)
    end
  end

  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, finish(state)}

  def handle_info(message, state) do
    case :gen_server.check_response(message, state.requests, true) do
      {reply, node, requests} ->
        {:noreply, Nodes.info_reply(%{state | requests: requests}, node, reply)}

      _no_request ->
        {:noreply, state}
    end
  end

  defp node_or_subscriber_down(state, ref, pid, reason) do
    case Enum.find(state.nodes, fn {_node, entry} -> entry.ref == ref end) do
      {node, _entry} ->
        # a session of another node ends when that node's agent is gone: say why
        reason = with {:shutdown, {:agent_down, why}} <- reason, do: why
        state = broadcast(state, {:node_down, node, reason})
        {:noreply, maybe_ended(put_in(state.nodes[node].status, :gone))}

      # a subscriber gone without unsubscribing: the session of its node lets it go too
      nil ->
        {:noreply,
         on_node_of(%{state | subscribers: Map.delete(state.subscribers, pid)}, pid, :release)}
    end
  end

  @impl true
  def terminate(_reason, state) do
    state = finish(state)
    if state.setup_error == nil, do: KinoTrace.Client.Final.put(state.id, Recording.info(state))
    :ok
  end

  defp deliver(state, _node, events) do
    {events, numbering} = Remote.renumber(events, state.numbering)
    history = History.push(state.history, events)
    kept = KinoTrace.Latency.Kept.add(state.kept, events, history)
    Holding.pass_on(%{state | numbering: numbering, history: history, kept: kept}, events)
  end

  # The events the nodes delivered before answering a request, now in the mailbox.
  defp take_delivered(%{id: id} = state) do
    receive do
      {:kino_trace, {^id, node}, {:events, events}} ->
        state |> deliver(node, events) |> take_delivered()
    after
      0 -> state
    end
  end

  # (after what is held: a subscriber sees a trace's events before its end)
  defp broadcast(state, notice) do
    state = Holding.release(state)
    Delivery.notify(state.subscribers, notice)
    state
  end

  # When every node has ended, the trace has: with the status the first one ended with.
  defp maybe_ended(%{status: status} = state) when status in [:running, :paused] do
    statuses = for node <- state.plan.nodes, do: state.nodes[node].status

    if Enum.all?(statuses, &(&1 not in [:running, :paused, :unresponsive])) do
      final = Enum.find(statuses, :stopped, &(&1 not in [:gone, :stopped]))
      broadcast(%{state | status: final}, {:status, final})
    else
      state
    end
  end

  defp maybe_ended(state), do: state

  # --- ending --------------------------------------------------------------------------------

  defp finish(state) do
    state = state |> sync_files() |> stop_nodes()

    if state.status in [:running, :paused],
      do: broadcast(%{state | status: :stopped}, {:status, :stopped}),
      else: state
  end

  # The events delivered so far (those held too) reach the writer of other nodes' files,
  # and it sends their frames to those nodes' workers, which write them there before
  # they end with their sessions (the files' end frames come then). Bounded: half the
  # time a node has to answer (stop_nodes/1 may take twice that, within the caller's
  # bound on stop/1).
  defp sync_files(%{files_writer: writer, status: status} = state)
       when is_pid(writer) and status in [:running, :paused] do
    state = state |> take_delivered() |> Holding.release()
    ref = Process.monitor(writer)
    wait = div(Nodes.timeout(), 2)

    send(
      writer,
      {:kino_trace_files_sync, self(), ref, System.monotonic_time(:millisecond) + wait}
    )

    receive do
      {^ref, :synced} -> Process.demonitor(ref, [:flush])
      {:DOWN, ^ref, :process, _, _} -> :ok
    after
      wait -> Process.demonitor(ref, [:flush])
    end

    state
  end

  defp sync_files(state), do: state

  # Stops every node's session: those that do not answer in time are killed, and each
  # is waited for (its monitor) for a bounded time.
  defp stop_nodes(%{nodes: nodes} = state) when nodes == %{}, do: state

  defp stop_nodes(state) do
    {replies, state} = Nodes.on_nodes(state, :stop)
    answered = for {node, :ok} <- replies, do: node

    for {node, entry} <- state.nodes,
        entry.status not in [:gone, :stopped],
        node not in answered do
      Process.exit(entry.pid, :kill)
    end

    deadline = System.monotonic_time(:millisecond) + Nodes.timeout()

    nodes =
      Map.new(state.nodes, fn
        {node, %{status: status} = entry} when status in [:gone, :stopped] ->
          {node, entry}

        {node, entry} ->
          timeout = max(deadline - System.monotonic_time(:millisecond), 0)

          receive do
            {:DOWN, ref, :process, _, _} when ref == entry.ref ->
              {node, %{entry | status: :stopped}}
          after
            timeout -> {node, %{entry | status: :stopped}}
          end
      end)

    %{state | nodes: Merge.final_infos(nodes)}
  end
end
