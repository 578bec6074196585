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

  alias Kino.Trace.{Decoder, Options, Pattern, Reaper, StackGuard, Tracer}
  alias Kino.Trace.Pattern.Plan

  @drain_batch 1_000
  # Events drained before the mailbox is looked at again: what a request may wait for.
  @max_per_wakeup 2_000
  # At most this many queued events are decoded to answer one request (events/2): under
  # a flood the queue never empties, and a request must not wait for it.
  @max_sync_drain 10_000
  @subscriber_backlog 32
  @tick_ms 1_000
  # The longest any request waits for other nodes, in all.
  @remote_timeout 2_000

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
    subscriber_flags: %{},
    history: :queue.new(),
    history_size: 0,
    rate: 0.0,
    rate_sample: {0, 0},
    collected: nil,
    tag: nil,
    remotes: %{},
    remote_requests: :gen_server.reqids_new(),
    numbering: {1, %{}},
    setup_error: nil,
    probes: %{},
    reapplied: 0,
    guard: nil,
    bifs: [],
    bif_cursor: 0
  ]

  # --- starting ---------------------------------------------------------------------

  @doc false
  # Starts a session and waits until it traces. The supervisor only runs `init/1`, which
  # is cheap: flags, patterns (possibly thousands) and remote sessions are set up in the
  # new process, so one slow start never holds up other traces.
  def start(owner, patterns, opts) do
    spec = %{
      id: __MODULE__,
      start: {GenServer, :start_link, [__MODULE__, {owner, patterns, opts}]},
      restart: :temporary
    }

    Kino.Trace.Application.ensure_started!()

    with {:ok, pid} <- DynamicSupervisor.start_child(Kino.Trace.SessionSupervisor, spec) do
      case GenServer.call(pid, :await_setup, :infinity) do
        {:ok, id} -> {:ok, pid, id}
        {:error, %ArgumentError{} = e} -> raise e
        {:error, reason} -> {:error, reason}
      end
    end
  end

  @impl true
  def init({owner, patterns, opts}) do
    Process.flag(:trap_exit, true)
    Kino.Trace.Internal.register(self())
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

    {:ok, %{state | tag: opts[:tag] || state.id}, {:continue, {:setup, patterns}}}
  end

  @impl true
  def handle_continue({:setup, patterns}, state) do
    set_process_flags(state)
    # after the process flags, which may cover every process
    Kino.Trace.Internal.add_session(state.session)
    state = state |> apply_patterns(patterns) |> start_remotes()
    timer = if state.opts[:timeout], do: Process.send_after(self(), :timeout, state.opts[:timeout])
    Process.send_after(self(), :tick, @tick_ms)
    state = %{state | timer: timer, rate_sample: {System.monotonic_time(:millisecond), 0}}
    {:noreply, state}
  rescue
    e -> {:noreply, %{finish(state, :stopped, :discard) | setup_error: e}}
  end

  defp set_process_flags(%{session: session, opts: opts}) do
    children = if opts[:children], do: [:set_on_spawn], else: []

    if Keyword.get(opts, :calls, true) do
      returns_to = if opts[:return_to], do: [:return_to], else: []

      for target <- Options.resolve_pids(opts[:pids]) do
        trace_process!(session, target, [:call, :scheduler_id] ++ returns_to ++ children)
      end
    end

    if messages = opts[:messages] do
      for target <- messages.targets do
        trace_process!(session, target, [:send, :receive, :scheduler_id] ++ children)
      end

      :trace.send(session, messages.specs.send, [])
      :trace.recv(session, messages.specs.recv, [])
    end

    if processes = opts[:processes] do
      for target <- processes.targets do
        trace_process!(session, target, [:procs, :scheduler_id] ++ children)
      end
    end

    # Never trace ourselves (we call plenty of functions a user may trace).
    :trace.process(session, self(), false, [:all])
  end

  # Stops tracing `pid` in this session; returns the flags it had.
  defp untrace(session, pid) do
    flags =
      case :trace.info(session, pid, :flags) do
        {:flags, flags} -> flags
        _ -> []
      end

    :trace.process(session, pid, false, [:all])
    flags
  rescue
    ArgumentError -> []
  end

  # A pid that exited since the options were checked is a bad target, not a crash.
  defp trace_process!(session, target, flags) when is_pid(target) do
    :trace.process(session, target, true, flags)
  rescue
    ArgumentError -> raise ArgumentError, "cannot trace #{inspect(target)}: the process is not alive"
  end

  defp trace_process!(session, target, flags), do: :trace.process(session, target, true, flags)

  # One match spec per target, broadest first (see Kino.Trace.Pattern.Plan): linear in
  # the number of patterns. Functions that loop through tail calls get no return actions.
  defp apply_patterns(state, patterns) do
    {returns, actions} = match_spec_body(state.opts)
    flags = if state.opts[:local], do: [:local], else: [:global]
    plan = Plan.build(patterns, returns, actions, force: state.opts[:force], local: state.opts[:local])
    bifs = Plan.bif_steps(plan)
    # checked in before any BIF pattern is set (see Kino.Trace.Reaper); a step on every
    # module covers BIFs too
    if bifs != [] or Enum.any?(plan.steps, &match?({{:_, _, _}, _}, &1)), do: Reaper.bif_trace()

    Plan.install(plan, state.session, flags)

    guard = StackGuard.set_plan(state.guard || start_guard(state), plan)
    decoder = Decoder.no_returns(state.decoder, plan.no_returns)
    %{state | patterns: patterns, guard: guard, decoder: decoder, bifs: bifs, probes: probes(patterns)}
  end

  defp remove_patterns(state) do
    targets = Plan.targets(state.patterns)
    for target <- targets, flag <- [:local, :global], do: :trace.function(state.session, target, false, [flag])
    # clearing a BIF pattern switches its tracing off in every session (erlang/otp#10349)
    if state.bifs != [], do: Reaper.bifs_cleared()
    %{state | guard: StackGuard.clear(state.guard, targets), bifs: []}
  end

  # {return actions, other actions} of every match spec clause.
  defp match_spec_body(opts) do
    returns =
      cond do
        opts[:exceptions] -> [{:exception_trace}]
        opts[:return] -> [{:return_trace}]
        true -> []
      end

    caller =
      case opts[:caller] do
        # The caller's frame with the line of the call. (`{:caller_line}` gives the line
        # of the return address, often the line after the call.)
        :line -> [{:message, {:current_stacktrace, 1}}]
        true -> [{:message, {:caller}}]
        _ -> []
      end

    {returns, caller}
  end

  # The stack guard samples on its own timer (see Kino.Trace.StackGuard).
  defp start_guard(state) do
    guard = StackGuard.new(state.resource, state.session, state.opts)
    if guard, do: Process.send_after(self(), :stack_guard, StackGuard.interval())
    guard
  end

  # --- requests -----------------------------------------------------------------------
  #
  # Every request is answered in bounded time under any load: nothing here waits for the
  # native queue to become empty (producers may keep it full forever), only for what was
  # queued when the request came, capped; and no remote node is waited on for longer
  # than @remote_timeout.

  @impl true
  def handle_call(:await_setup, _from, %{setup_error: nil} = state), do: {:reply, {:ok, state.id}, state}
  def handle_call(:await_setup, _from, state), do: {:stop, :normal, {:error, state.setup_error}, state}

  def handle_call({:exclude, pid}, _from, state) do
    if tracing?(state) and node(pid) == node(), do: :trace.process(state.session, pid, false, [:all])
    {:reply, :ok, state}
  end

  # A subscriber is not traced while subscribed: the flags it had are kept and given back
  # when it unsubscribes.
  def handle_call({:subscribe, pid}, _from, state) do
    if Map.has_key?(state.subscribers, pid) do
      {:reply, :ok, state}
    else
      flags = if tracing?(state) and node(pid) == node(), do: untrace(state.session, pid), else: []
      subscribers = Map.put(state.subscribers, pid, Process.monitor(pid))
      {:reply, :ok, %{state | subscribers: subscribers, subscriber_flags: Map.put(state.subscriber_flags, pid, flags)}}
    end
  end

  def handle_call({:unsubscribe, pid}, _from, state) do
    {ref, subscribers} = Map.pop(state.subscribers, pid)
    {flags, subscriber_flags} = Map.pop(state.subscriber_flags, pid, [])
    if ref, do: Process.demonitor(ref, [:flush])

    if flags != [] and tracing?(state) and Process.alive?(pid) and pid not in Kino.Trace.Internal.pids() do
      :trace.process(state.session, pid, true, flags)
    end

    {:reply, :ok, %{state | subscribers: subscribers, subscriber_flags: subscriber_flags}}
  end

  def handle_call({:events, n}, _from, state) do
    state = catch_up(state, @max_sync_drain)
    list = :queue.to_list(state.history)
    {:reply, Enum.take(list, -n), state}
  end

  # Everything queued when asked (capture/3 asks once every event of its block is queued).
  def handle_call(:collect, _from, state) do
    state = catch_up(state, :infinity)
    {:reply, Enum.reverse(state.collected || []), %{state | collected: []}}
  end

  def handle_call(:info, _from, state) do
    state = refresh_remote_info(state)
    {:reply, info(state), state}
  end

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

    {remote_replies, state} = on_remotes(state, {:set_patterns, inputs})
    {:reply, merge_remote_results(reply, remote_replies), state}
  end

  def handle_call(:pause, _from, %{status: :running} = state) do
    state = remove_patterns(state)
    {_replies, state} = on_remotes(state, :pause)
    {:reply, :ok, broadcast_status(%{state | status: :paused})}
  end

  def handle_call(:resume, _from, %{status: :paused} = state) do
    state = apply_patterns(state, state.patterns)
    {_replies, state} = on_remotes(state, :resume)
    {:reply, :ok, broadcast_status(%{state | status: :running})}
  end

  def handle_call(op, _from, state) when op in [:pause, :resume], do: {:reply, :ok, state}

  def handle_call(:stop, _from, state) do
    {:stop, :normal, :ok, finish(state, :stopped, :discard)}
  end

  # --- native wake-ups and timers -----------------------------------------------------

  @impl true
  def handle_info({:kino_trace, id, :ready}, %{id: id} = state), do: {:noreply, drain(state)}
  def handle_info(:drain, state), do: {:noreply, drain(state)}

  def handle_info({:kino_trace, id, :limit_reached}, %{id: id} = state) do
    {:noreply, finish(state, :limit_reached, :deliver)}
  end

  def handle_info(:timeout, state), do: {:noreply, finish(state, :timeout, :deliver)}

  # Another kino_trace session cleared a BIF pattern (see Kino.Trace.Reaper).
  def handle_info(:reassert_bifs, state), do: {:noreply, reassert_bifs(state, length(state.bifs))}

  def handle_info(:tick, state) do
    {t0, n0} = state.rate_sample
    now = System.monotonic_time(:millisecond)
    %{accepted: n} = Tracer.counters(state.resource)
    rate = if now > t0, do: (n - n0) * 1000 / (now - t0), else: 0.0
    if tracing?(state), do: Process.send_after(self(), :tick, @tick_ms)
    state = state |> ask_remotes_info() |> reapply_if_reloaded() |> reassert_bifs()
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
    {:stop, :normal, finish(state, :stopped, :discard)}
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
        {gone, subscribers} = Enum.split_with(state.subscribers, fn {_pid, r} -> r == ref end)
        subscriber_flags = Map.drop(state.subscriber_flags, Enum.map(gone, &elem(&1, 0)))
        {:noreply, %{state | subscribers: Map.new(subscribers), subscriber_flags: subscriber_flags}}
    end
  end

  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, finish(state, :stopped, :discard)}

  def handle_info(message, state) do
    case :gen_server.check_response(message, state.remote_requests, true) do
      {reply, node, requests} -> {:noreply, remote_info_reply(%{state | remote_requests: requests}, node, reply)}
      _no_request -> {:noreply, state}
    end
  end

  @impl true
  def terminate(_reason, state) do
    state = finish(state, :stopped, :discard)
    if state.setup_error == nil, do: Kino.Trace.Final.put(state.id, info(state))
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

  # Delivers what is queued now, at most `cap` events: producers that keep the queue
  # full never hold a request up for longer than that.
  defp catch_up(%{resource: nil} = state, _cap), do: state

  # Someone is waiting for this bounded work, so it runs at high priority: processes
  # flooding the trace must not stretch it out. Background draining stays normal.
  defp catch_up(state, cap) do
    %{queued: queued} = Tracer.counters(state.resource)
    priority = Process.flag(:priority, :high)

    try do
      drain_n(state, min(queued, cap))
    after
      Process.flag(:priority, priority)
    end
  end

  defp drain_n(state, n) when n <= 0, do: state

  defp drain_n(state, n) do
    case drain_raw(state.resource, min(n, @max_per_wakeup), []) do
      {[], _more} -> state
      {raw, _more} -> state |> deliver(raw) |> drain_n(n - length(raw))
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

  # --- BIFs (OTP 27.3, erlang/otp#10349: see Kino.Trace.Reaper) ---------------------------

  # Another tool ending its trace session switches BIF tracing off without a trace of
  # it (:trace.info/3 still says traced), so a trace of BIFs sets its BIF patterns
  # again: every tick, at most @bifs_per_tick of them in turn (each call costs the VM a
  # code barrier). They stay set in the session; this switches them back on.
  @bifs_per_tick 32

  defp reassert_bifs(state, count \\ @bifs_per_tick)

  defp reassert_bifs(%{status: :running, session: session, bifs: [_ | _] = bifs} = state, count) when session != nil do
    flags = if state.opts[:local], do: [:local], else: [:global]
    n = length(bifs)
    cursor = rem(state.bif_cursor, n)
    batch = bifs |> Stream.cycle() |> Stream.drop(cursor) |> Enum.take(min(count, n))
    for {mfa, spec} <- batch, do: :trace.function(session, mfa, spec, flags)
    %{state | bif_cursor: cursor + length(batch)}
  end

  defp reassert_bifs(state, _count), do: state

  # --- modules reloaded while traced ------------------------------------------------------

  # Loading a new version of a module drops its trace patterns. Each traced module has a
  # probe: one of its traced functions, asked whether it is still traced; a module whose
  # probe is no longer traced gets every pattern applied again (and is counted).
  defp probes(patterns) do
    for %Pattern{module: m} = pattern <- patterns, m != :_, reduce: %{} do
      probes ->
        case not Map.has_key?(probes, m) && probe(pattern) do
          mfa when is_tuple(mfa) -> Map.put(probes, m, mfa)
          _ -> probes
        end
    end
  end

  defp probe(%Pattern{module: m, function: f, arity: a}) when is_integer(a), do: {m, f, a}

  defp probe(%Pattern{module: m, function: f}) do
    functions = m.module_info(:functions)

    # a module pattern leaves the compiler-generated functions untraced
    traced =
      for {name, arity} = fa <- functions,
          f == name or (f == :_ and not Kino.Trace.Pattern.Generated.generated?(name, arity)),
          do: fa

    case traced do
      [{f, a} | _] -> {m, f, a}
      [] -> nil
    end
  rescue
    _ -> nil
  end

  defp reapply_if_reloaded(%{status: :running, session: session} = state) when session != nil do
    reloaded? =
      Enum.any?(state.probes, fn {m, mfa} ->
        :erlang.module_loaded(m) and :trace.info(session, mfa, :traced) == {:traced, false}
      end)

    if reloaded? do
      state = apply_patterns(state, state.patterns)
      %{state | reapplied: state.reapplied + 1}
    else
      state
    end
  end

  defp reapply_if_reloaded(state), do: state

  # --- ending ---------------------------------------------------------------------------

  defp tracing?(state), do: state.session != nil

  # Ends tracing. `:discard` (stop/1, the owner exits): the native session closes first,
  # so nothing more is admitted, and what is queued is freed natively (counted as
  # discarded, never decoded); then the OTP session is destroyed. `:deliver` (the limit
  # or the timeout): the OTP session is destroyed and what it queued before is delivered,
  # which is bounded by the queue's caps; the process lives on for events/2 and info/1.
  # Idempotent.
  defp finish(state, status, mode) do
    if mode == :discard and state.resource, do: Tracer.close(state.resource)
    end_tracing(state, status, mode)
  end

  defp end_tracing(%{session: nil} = state, _status, _mode), do: state

  defp end_tracing(state, status, mode) do
    state = stop_remotes(state)
    Kino.Trace.Internal.remove_session(state.session)
    # through the reaper: destroying a session must not switch off other traces of BIFs
    Reaper.bif_trace_ended()
    Reaper.destroy(state.session, Enum.map(state.patterns, &Pattern.mfa/1))
    state = %{state | session: nil, guard: StackGuard.stop(state.guard)}
    # what was queued before is delivered; then the native session closes
    state = if mode == :deliver, do: catch_up(state, :infinity), else: state
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
          {node, Map.put(remote.info, :status, remote.status)}
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

  # --- remote nodes ---------------------------------------------------------------------
  #
  # Remote sessions are asked in parallel and waited on for at most @remote_timeout in
  # all. A node that does not answer in time is marked :unresponsive: requests skip it
  # (and report it) until it answers one of the info requests sent on every tick. Its
  # last known counters stay in info/1. Stopping kills a remote session that does not
  # answer, so nothing of the trace is left on any node.

  # A node that fails to start its session stops the ones already started.
  defp start_remotes(state) do
    state =
      Enum.reduce(state.opts[:remote_nodes] || [], state, fn node, state ->
        case Kino.Trace.Remote.start(node, self(), state.opts[:remote_what], state.opts[:remote_opts]) do
          {:ok, pid} ->
            put_in(state.remotes[node], %{pid: pid, ref: Process.monitor(pid), status: :running, info: %{}})

          {:error, message} ->
            stop_remotes(state)
            raise ArgumentError, "on node #{inspect(node)}: #{message}"
        end
      end)

    {_replies, state} = on_remotes(state, :info, &remote_info_reply/3)
    state
  end

  defp answering?(%{status: status}), do: status not in [:gone, :stopped, :unresponsive]

  # Asks every answering remote session the same; returns [{node, reply}], with
  # {:error, message} for a node that did not answer in time (then marked :unresponsive).
  # `on_reply` may fold each reply into the state.
  defp on_remotes(state, request, on_reply \\ fn state, _node, _reply -> state end) do
    asked =
      for {node, remote} <- state.remotes, answering?(remote), reduce: :gen_server.reqids_new() do
        requests -> :gen_server.send_request(remote.pid, request, node, requests)
      end

    deadline = System.monotonic_time(:millisecond) + @remote_timeout
    {replies, state} = collect_replies(state, asked, deadline, [], on_reply)
    skipped = for {node, %{status: :unresponsive}} <- state.remotes, not List.keymember?(replies, node, 0), do: {node, {:error, not_answering()}}
    {replies ++ skipped, state}
  end

  defp not_answering, do: "the node is not answering (no reply within #{@remote_timeout} ms)"

  defp collect_replies(state, requests, deadline, acc, on_reply) do
    timeout = max(deadline - System.monotonic_time(:millisecond), 0)

    case :gen_server.receive_response(requests, timeout, true) do
      :no_request ->
        {Enum.reverse(acc), state}

      :timeout ->
        late = for {_id, node} <- :gen_server.reqids_to_list(requests), do: node

        state =
          Enum.reduce(late, state, fn node, state -> put_in(state.remotes[node].status, :unresponsive) end)

        errors = for node <- late, do: {node, {:error, not_answering()}}
        {Enum.reverse(acc, errors), state}

      {{:reply, reply}, node, requests} ->
        collect_replies(on_reply.(state, node, {:reply, reply}), requests, deadline, [{node, reply} | acc], on_reply)

      {{:error, {reason, _server}}, node, requests} ->
        collect_replies(state, requests, deadline, [{node, {:error, inspect(reason)}} | acc], on_reply)
    end
  end

  # info/1: fresh counters from the nodes that answer, the last known ones otherwise.
  defp refresh_remote_info(%{remotes: remotes} = state) when remotes == %{}, do: state

  defp refresh_remote_info(state) do
    {_replies, state} = on_remotes(state, :info, &remote_info_reply/3)
    state
  end

  # On every tick, every remote session that is not gone is asked for its counters
  # without waiting; the reply (handle_info/2) also marks an unresponsive node answering.
  # A node that has not answered the last request is not asked again: a hung node holds
  # one request, not one more per tick.
  defp ask_remotes_info(state) do
    waiting = for {_id, node} <- :gen_server.reqids_to_list(state.remote_requests), do: node

    requests =
      for {node, remote} <- state.remotes, remote.status != :gone, node not in waiting, reduce: state.remote_requests do
        requests -> :gen_server.send_request(remote.pid, :info, node, requests)
      end

    %{state | remote_requests: requests}
  end

  defp remote_info_reply(state, node, {:reply, info}) when is_map(info) and is_map_key(state.remotes, node) do
    remote = state.remotes[node]
    status = if remote.status == :unresponsive, do: Map.get(info, :status, :running), else: remote.status
    put_in(state.remotes[node], %{remote | info: info, status: status})
  end

  defp remote_info_reply(state, _node, _reply), do: state

  # An entry good here but bad on another node is reported as that node's error; a node
  # that did not answer makes every entry an error for that node.
  defp merge_remote_results(local, remote_replies) do
    Enum.reduce(remote_replies, local, fn
      {node, results}, acc when is_list(results) ->
        Enum.zip_with(acc, results, fn
          {input, {:error, _} = bad}, _ -> {input, bad}
          {input, _ok}, {_, {:error, message}} -> {input, {:error, "on node #{inspect(node)}: #{message}"}}
          entry, _ -> entry
        end)

      {node, {:error, message}}, acc ->
        Enum.map(acc, fn
          {input, {:error, _} = bad} -> {input, bad}
          {input, _ok} -> {input, {:error, "on node #{inspect(node)}: #{message}"}}
        end)

      _, acc ->
        acc
    end)
  end

  # Stops every remote session: those that do not answer in time are killed, and each is
  # waited for (its monitor) for a bounded time.
  defp stop_remotes(%{remotes: remotes} = state) when remotes == %{}, do: state

  defp stop_remotes(state) do
    {replies, state} = on_remotes(state, :stop)
    answered = for {node, :ok} <- replies, do: node

    for {node, remote} <- state.remotes, remote.status != :gone, node not in answered do
      Process.exit(remote.pid, :kill)
    end

    deadline = System.monotonic_time(:millisecond) + @remote_timeout

    remotes =
      Map.new(state.remotes, fn
        {node, %{status: :gone} = remote} ->
          {node, remote}

        {node, remote} ->
          timeout = max(deadline - System.monotonic_time(:millisecond), 0)

          receive do
            {:DOWN, ref, :process, _, _} when ref == remote.ref -> {node, %{remote | status: :stopped}}
          after
            timeout -> {node, %{remote | status: :stopped}}
          end
      end)

    %{state | remotes: remotes}
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
      subscribers: map_size(state.subscribers),
      reapplied: state.reapplied
    }
  end

  @doc false
  def pattern_opts(opts), do: [force: opts[:force], local: opts[:local]]
end
