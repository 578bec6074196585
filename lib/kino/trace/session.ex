defmodule Kino.Trace.Session do
  @moduledoc """
  One trace: the owner of one OTP `:trace` session and one native session.

  A session process starts under kino_trace's supervisor for every `Kino.Trace.calls/2`
  (and every `Kino.Trace.capture/3`). It

    * creates the native session (the limits live there) and the OTP trace session with
      `Kino.Trace.Tracer` as its tracer, then sets process flags and function patterns;
    * drains the native queue when woken (one message when the queue goes from empty to
      non-empty), decodes batches with `Kino.Trace.Decoder` and hands them to its
      subscribers and to a bounded history;
    * monitors its owner: when the owner exits, or on `Kino.Trace.stop/1`, the session
      destroys the trace and closes the native session, so nothing of it remains.
      When the `:limit` or `:timeout` is reached, tracing ends the same way but the
      process stays until its owner exits or `stop/1`, so `events/2` and `info/1` still
      answer.

  The session process and its subscribers are never traced.
  """

  use GenServer

  alias Kino.Trace.{Decoder, Options, Pattern, StackGuard, Tracer}
  alias Kino.Trace.Pattern.Plan

  @drain_batch 1_000
  @max_per_wakeup 10_000
  @subscriber_backlog 32

  defstruct [
    :id,
    :owner,
    :owner_ref,
    :resource,
    :session,
    :opts,
    :decoder,
    :timer,
    :started_at,
    patterns: [],
    status: :running,
    subscribers: %{},
    history: :queue.new(),
    history_size: 0,
    rate: 0.0,
    rate_sample: {0, 0},
    collected: nil,
    tag: nil,
    remotes: %{},
    numbering: {1, %{}},
    guard: nil
  ]

  # --- starting ---------------------------------------------------------------------

  @doc false
  def start(owner, patterns, opts) do
    spec = %{
      id: __MODULE__,
      start: {GenServer, :start_link, [__MODULE__, {owner, patterns, opts}]},
      restart: :temporary
    }

    case DynamicSupervisor.start_child(Kino.Trace.SessionSupervisor, spec) do
      {:ok, pid} -> {:ok, pid, GenServer.call(pid, :id)}
      {:error, {%ArgumentError{} = e, _}} -> raise e
      {:error, reason} -> {:error, reason}
    end
  end

  @impl true
  def init({owner, patterns, opts}) do
    Process.flag(:trap_exit, true)
    resource = Tracer.new_session(self(), Options.native_limits(opts))
    # The tracer module must be loaded before the session is created.
    Code.ensure_loaded!(Tracer)
    session = :trace.session_create(:kino_trace, {Tracer, resource}, [])

    state = %__MODULE__{
      id: Tracer.session_id(resource),
      owner: owner,
      owner_ref: Process.monitor(owner),
      resource: resource,
      session: session,
      opts: opts,
      decoder: Decoder.new(pairing: opts[:return]),
      started_at: System.os_time(:microsecond),
      collected: if(opts[:collect], do: [], else: nil)
    }

    state = %{state | tag: opts[:tag] || state.id}
    set_process_flags(state)
    state = apply_patterns(state, patterns)
    state = start_remotes(state)
    timer = if opts[:timeout], do: Process.send_after(self(), :timeout, opts[:timeout])
    Process.send_after(self(), :tick, 1_000)
    {:ok, %{state | timer: timer, rate_sample: {System.monotonic_time(:millisecond), 0}}}
  end

  defp set_process_flags(%{session: session, opts: opts}) do
    children = if opts[:children], do: [:set_on_spawn], else: []

    if Keyword.get(opts, :calls, true) do
      for target <- Options.resolve_pids(opts[:pids]) do
        :trace.process(session, target, true, [:call, :scheduler_id] ++ children)
      end
    end

    if messages = opts[:messages] do
      for target <- messages.targets do
        :trace.process(session, target, true, [:send, :receive, :scheduler_id] ++ children)
      end

      :trace.send(session, messages.specs.send, [])
      :trace.recv(session, messages.specs.recv, [])
    end

    if processes = opts[:processes] do
      for target <- processes.targets do
        :trace.process(session, target, true, [:procs, :scheduler_id] ++ children)
      end
    end

    # Never trace ourselves (we call plenty of functions a user may trace).
    :trace.process(session, self(), false, [:all])
  end

  # One match spec per target, broadest first (see Kino.Trace.Pattern.Plan): linear in
  # the number of patterns. Functions that loop through tail calls get no return actions.
  defp apply_patterns(state, patterns) do
    {returns, actions} = match_spec_body(state.opts)
    flags = if state.opts[:local], do: [:local], else: [:global]
    plan = Plan.build(patterns, returns, actions, force: state.opts[:force], local: state.opts[:local])

    Plan.install(plan, state.session, flags)

    guard = StackGuard.set_plan(state.guard || start_guard(state), plan)
    %{state | patterns: patterns, guard: guard, decoder: Decoder.no_returns(state.decoder, plan.no_returns)}
  end

  defp remove_patterns(state) do
    targets = Plan.targets(state.patterns)
    for target <- targets, flag <- [:local, :global], do: :trace.function(state.session, target, false, [flag])
    %{state | guard: StackGuard.clear(state.guard, targets)}
  end

  # {return actions, other actions} of every match spec clause.
  defp match_spec_body(opts) do
    returns =
      cond do
        opts[:exceptions] -> [{:exception_trace}]
        opts[:return] -> [{:return_trace}]
        true -> []
      end

    caller = if opts[:caller], do: [{:message, {:caller}}], else: []
    {returns, caller}
  end

  # The stack guard samples on its own timer (see Kino.Trace.StackGuard).
  defp start_guard(state) do
    guard = StackGuard.new(state.resource, state.session, state.opts)
    if guard, do: Process.send_after(self(), :stack_guard, StackGuard.interval())
    guard
  end

  # --- requests -----------------------------------------------------------------------

  @impl true
  def handle_call(:id, _from, state), do: {:reply, state.id, state}

  def handle_call({:exclude, pid}, _from, state) do
    if tracing?(state) and node(pid) == node(), do: :trace.process(state.session, pid, false, [:all])
    {:reply, :ok, state}
  end

  def handle_call({:subscribe, pid}, _from, state) do
    if tracing?(state) and node(pid) == node(), do: :trace.process(state.session, pid, false, [:all])

    subscribers =
      Map.put_new_lazy(state.subscribers, pid, fn -> Process.monitor(pid) end)

    {:reply, :ok, %{state | subscribers: subscribers}}
  end

  def handle_call({:unsubscribe, pid}, _from, state) do
    {ref, subscribers} = Map.pop(state.subscribers, pid)
    if ref, do: Process.demonitor(ref, [:flush])
    {:reply, :ok, %{state | subscribers: subscribers}}
  end

  def handle_call({:events, n}, _from, state) do
    state = drain_all(state)
    list = :queue.to_list(state.history)
    {:reply, Enum.take(list, -n), state}
  end

  def handle_call(:collect, _from, state) do
    state = drain_all(state)
    {:reply, Enum.reverse(state.collected || []), %{state | collected: []}}
  end

  def handle_call(:info, _from, state), do: {:reply, info(state), state}

  def handle_call({:set_patterns, inputs}, _from, state) do
    results = Pattern.parse_each(inputs, pattern_opts(state.opts))
    good = for {_input, {:ok, pattern, _warnings}} <- results, do: pattern

    state =
      if tracing?(state) do
        state |> remove_patterns() |> then(&(if &1.status == :paused, do: %{&1 | patterns: good}, else: apply_patterns(&1, good)))
      else
        %{state | patterns: good}
      end

    reply =
      Enum.map(results, fn
        {input, {:ok, _pattern, []}} -> {input, :ok}
        {input, {:ok, _pattern, warnings}} -> {input, {:ok, warnings}}
        {input, {:error, message}} -> {input, {:error, message}}
      end)

    {:reply, merge_remote_results(reply, on_remotes(state, {:set_patterns, inputs})), state}
  end

  def handle_call(:pause, _from, %{status: :running} = state) do
    state = remove_patterns(state)
    on_remotes(state, :pause)
    {:reply, :ok, broadcast_status(%{state | status: :paused})}
  end

  def handle_call(:resume, _from, %{status: :paused} = state) do
    state = apply_patterns(state, state.patterns)
    on_remotes(state, :resume)
    {:reply, :ok, broadcast_status(%{state | status: :running})}
  end

  def handle_call(op, _from, state) when op in [:pause, :resume], do: {:reply, :ok, state}

  def handle_call(:stop, _from, state) do
    {:stop, :normal, :ok, finish(state, :stopped)}
  end

  # --- native wake-ups and timers -----------------------------------------------------

  @impl true
  def handle_info({:kino_trace, id, :ready}, %{id: id} = state), do: {:noreply, drain(state)}
  def handle_info(:drain, state), do: {:noreply, drain(state)}

  def handle_info({:kino_trace, id, :limit_reached}, %{id: id} = state) do
    {:noreply, finish(state, :limit_reached)}
  end

  def handle_info(:timeout, state), do: {:noreply, finish(state, :timeout)}

  def handle_info(:tick, state) do
    {t0, n0} = state.rate_sample
    now = System.monotonic_time(:millisecond)
    %{accepted: n} = Tracer.counters(state.resource)
    rate = if now > t0, do: (n - n0) * 1000 / (now - t0), else: 0.0
    if tracing?(state), do: Process.send_after(self(), :tick, 1_000)
    {:noreply, %{state | rate: rate, rate_sample: {now, n}}}
  end

  def handle_info(:stack_guard, state) do
    if tracing?(state) do
      {callers, decoder} = Decoder.take_callers(state.decoder)
      {guard, moved} = StackGuard.check(state.guard, callers)
      decoder = Enum.reduce(moved, decoder, &Decoder.unpair(&2, &1))
      Process.send_after(self(), :stack_guard, StackGuard.interval())
      {:noreply, %{state | guard: guard, decoder: decoder}}
    else
      {:noreply, state}
    end
  end

  def handle_info({:DOWN, ref, :process, _pid, _reason}, %{owner_ref: ref} = state) do
    {:stop, :normal, finish(state, :stopped)}
  end

  def handle_info({:kino_trace, {node, :remote}, {:events, events}}, state) when is_map_key(state.remotes, node) do
    {:noreply, deliver_events(state, events)}
  end

  def handle_info({:kino_trace, {node, :remote}, {:status, status}}, state) when is_map_key(state.remotes, node) do
    {:noreply, put_in(state.remotes[node].status, status)}
  end

  def handle_info({:DOWN, ref, :process, _pid, reason}, state) do
    case Enum.find(state.remotes, fn {_node, remote} -> remote.ref == ref end) do
      {node, _remote} ->
        for {pid, _} <- state.subscribers, do: send(pid, {:kino_trace, state.tag, {:node_down, node, reason}})
        {:noreply, put_in(state.remotes[node].status, :gone)}

      nil ->
        {:noreply, %{state | subscribers: Enum.reject(state.subscribers, fn {_pid, r} -> r == ref end) |> Map.new()}}
    end
  end

  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, finish(state, :stopped)}
  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state) do
    finish(state, :stopped)
    :ok
  end

  # --- draining -----------------------------------------------------------------------

  # Drains up to @max_per_wakeup events, then yields to the mailbox (a :drain message
  # continues). While a subscriber is backlogged the queue is left alone: it fills and
  # the native side drops and counts, so memory stays bounded.
  defp drain(%{resource: nil} = state), do: state

  defp drain(state) do
    if backlogged?(state) do
      Process.send_after(self(), :drain, 5)
      state
    else
      {raw, more} = drain_raw(state.resource, @max_per_wakeup, [])
      if more, do: send(self(), :drain)
      deliver(state, raw)
    end
  end

  defp drain_all(%{resource: nil} = state), do: state

  defp drain_all(state) do
    case drain_raw(state.resource, @max_per_wakeup, []) do
      {[], _} -> state
      {raw, _more} -> state |> deliver(raw) |> drain_all()
    end
  end

  defp drain_raw(_resource, budget, acc) when budget <= 0, do: {Enum.concat(Enum.reverse(acc)), true}

  defp drain_raw(resource, budget, acc) do
    case Tracer.drain(resource, min(@drain_batch, budget)) do
      {[], more} -> {Enum.concat(Enum.reverse(acc)), more}
      {batch, true} -> drain_raw(resource, budget - length(batch), [batch | acc])
      {batch, false} -> {Enum.concat(Enum.reverse([batch | acc])), false}
    end
  end

  defp deliver(state, []), do: state

  defp deliver(state, raw) do
    {events, decoder} = Decoder.decode(state.decoder, raw)
    deliver_events(%{state | decoder: decoder}, events)
  end

  defp deliver_events(state, []), do: state

  defp deliver_events(state, events) do
    {events, state} =
      if state.remotes == %{} do
        {events, state}
      else
        {events, numbering} = Kino.Trace.Remote.renumber(events, state.numbering)
        {events, %{state | numbering: numbering}}
      end

    for {pid, _ref} <- state.subscribers, do: send(pid, {:kino_trace, state.tag, {:events, events}})

    state = if state.collected, do: %{state | collected: Enum.reverse(events, state.collected)}, else: state
    push_history(state, events)
  end

  defp push_history(state, events) do
    max = state.opts[:history]
    {queue, size} = Enum.reduce(events, {state.history, state.history_size}, fn e, {q, n} -> {:queue.in(e, q), n + 1} end)
    {queue, size} = trim(queue, size, max)
    %{state | history: queue, history_size: size}
  end

  defp trim(queue, size, max) when size <= max, do: {queue, size}
  defp trim(queue, size, max), do: trim(:queue.drop(queue), size - 1, max)

  defp backlogged?(state) do
    Enum.any?(state.subscribers, fn {pid, _} ->
      case node(pid) == node() and Process.info(pid, :message_queue_len) do
        {:message_queue_len, n} -> n > @subscriber_backlog
        _ -> false
      end
    end)
  end

  # --- ending ---------------------------------------------------------------------------

  defp tracing?(state), do: state.session != nil

  # Ends tracing: destroys the OTP session, delivers what is left, closes the native
  # session. Idempotent; the process itself may live on (limit/timeout) for queries.
  defp finish(%{session: nil} = state, _status), do: state

  defp finish(state, status) do
    stop_remotes(state)
    :trace.session_destroy(state.session)
    state = %{state | guard: StackGuard.stop(state.guard)}
    state = drain_all(%{state | session: nil})
    Tracer.close(state.resource)
    if state.timer, do: Process.cancel_timer(state.timer)
    broadcast_status(%{state | status: status, rate: 0.0})
  end

  defp broadcast_status(state) do
    for {pid, _ref} <- state.subscribers, do: send(pid, {:kino_trace, state.tag, {:status, state.status}})
    state
  end

  defp info(state) do
    local = local_info(state)

    if state.remotes == %{} do
      local
    else
      nodes =
        Map.new(state.remotes, fn {node, remote} ->
          {node, Map.put(remote_info(remote), :status, remote.status)}
        end)

      nodes = if state.opts[:trace_local], do: Map.put(nodes, node(), local), else: nodes
      counted = Enum.filter(Map.values(nodes), &Map.has_key?(&1, :accepted))
      sum = fn key -> Enum.reduce(counted, 0, &(&2 + Map.fetch!(&1, key))) end
      dropped = Map.new([:rate, :queue_full, :max_events, :closed], fn k -> {k, Enum.reduce(counted, 0, &(&2 + &1.dropped[k]))} end)

      Map.merge(local, %{
        accepted: sum.(:accepted),
        delivered: sum.(:delivered),
        queued: sum.(:queued),
        discarded: sum.(:discarded),
        bytes_queued: sum.(:bytes_queued),
        dropped: dropped,
        rate: Enum.reduce(counted, 0.0, &(&2 + &1.rate)),
        stack_guarded: Enum.reduce(counted, 0, &(&2 + Map.get(&1, :stack_guarded, 0))),
        nodes: nodes
      })
    end
  end

  defp remote_info(%{status: :gone}), do: %{}

  defp remote_info(remote) do
    GenServer.call(remote.pid, :info, 5_000)
  catch
    :exit, _ -> %{}
  end

  # --- remote nodes ---------------------------------------------------------------------

  defp start_remotes(state) do
    remotes =
      for node <- state.opts[:remote_nodes] || [], into: %{} do
        case Kino.Trace.Remote.start(node, self(), state.opts[:remote_what], state.opts[:remote_opts]) do
          {:ok, pid} -> {node, %{pid: pid, ref: Process.monitor(pid), status: :running}}
          {:error, message} -> raise ArgumentError, "on node #{inspect(node)}: #{message}"
        end
      end

    %{state | remotes: remotes}
  end

  # Asks every running remote session the same; returns [{node, reply}] of those that answered.
  defp on_remotes(state, request) do
    for {node, %{status: status, pid: pid}} <- state.remotes, status not in [:gone, :stopped] do
      try do
        {node, GenServer.call(pid, request, 15_000)}
      catch
        :exit, reason -> {node, {:error, reason}}
      end
    end
  end

  # An entry good here but bad on another node is reported as that node's error.
  defp merge_remote_results(local, remote_replies) do
    Enum.reduce(remote_replies, local, fn
      {node, results}, acc when is_list(results) ->
        Enum.zip_with(acc, results, fn
          {input, {:error, _} = bad}, _ -> {input, bad}
          {input, _ok}, {_, {:error, message}} -> {input, {:error, "on node #{inspect(node)}: #{message}"}}
          entry, _ -> entry
        end)

      _, acc ->
        acc
    end)
  end

  defp stop_remotes(state) do
    for {_node, %{status: status, pid: pid}} <- state.remotes, status != :gone do
      try do
        GenServer.call(pid, :stop, 5_000)
      catch
        :exit, _ -> :ok
      end
    end
  end

  defp local_info(state) do
    c = Tracer.counters(state.resource)

    %{
      id: state.id,
      status: state.status,
      patterns: Enum.map(state.patterns, &Pattern.to_string/1),
      accepted: c.accepted,
      delivered: c.delivered,
      queued: c.queued,
      discarded: c.discarded,
      bytes_queued: c.bytes_queued,
      dropped: %{
        rate: c.dropped_rate,
        queue_full: c.dropped_queue_full,
        max_events: c.dropped_max_events,
        closed: c.dropped_closed
      },
      rate: state.rate * 1.0,
      started_at: state.started_at,
      limit: state.opts[:limit],
      traced: tracing?(state),
      stack_guarded: StackGuard.count(state.guard),
      subscribers: map_size(state.subscribers)
    }
  end

  @doc false
  def pattern_opts(opts), do: [force: opts[:force], local: opts[:local]]
end
