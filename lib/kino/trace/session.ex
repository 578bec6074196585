defmodule Kino.Trace.Session do
  @moduledoc """
  One trace: the owner of one OTP `:trace` session and one native session.

  A session runs one `Kino.Trace.Plan` on this node: it starts under kino_trace's
  supervisor for every `Kino.Trace.calls/2` and `Kino.Trace.capture/3` (and on every
  node of a multi-node trace, see `Kino.Trace.Remote`). It

    * creates the native session (the plan's limits live there) and the OTP trace
      session with `Kino.Trace.Tracer` as its tracer, then sets the plan's process flags
      and match specs;
    * drains the native queue when woken (one message when the queue goes from empty to
      non-empty), its events decoded natively (`Kino.Trace.NativeDecoder`), and hands
      them in batches to its subscribers and to a bounded history;
    * monitors its owner: when the owner exits, or on `Kino.Trace.stop/1`, the session
      destroys the trace and closes the native session, so nothing of it remains.
      When the `:limit` or `:timeout` is reached, tracing ends the same way but the
      process stays until its owner exits or `stop/1`, so `events/2` and `info/1` still
      answer.

  The session process and its subscribers are never traced.
  """

  use GenServer

  alias Kino.Trace.{History, NativeDecoder, Pattern, Plan, Reaper, StackGuard, Tracer}
  alias Kino.Trace.Plan.Functions

  # Events drained, decoded and sent to subscribers at once. Small batches keep what the
  # session holds while decoding within its young heap: decoding 2 000 events at once
  # cost about 4 times as much per event as 100-250 at a time (bench/consumer.exs), most of it
  # garbage collection.
  @drain_batch 100
  # Events drained before the mailbox is looked at again: what a request may wait for.
  @max_per_wakeup 2_000
  # At most this many queued events are decoded to answer one request (events/2): under
  # a flood the queue never empties, and a request must not wait for it.
  @max_sync_drain 10_000
  # Messages (of at most @drain_batch events) in a subscriber's mailbox before the
  # session stops draining for it: 64 000 events.
  @subscriber_backlog div(64_000, @drain_batch)
  @tick_ms 1_000

  defstruct [
    :id,
    :owner,
    :owner_ref,
    :resource,
    :session,
    :plan,
    :decoder,
    :timer,
    :started_at,
    :history,
    status: :running,
    # pid => {monitor, tag}: events go to pid as {:kino_trace, tag, ...}
    subscribers: %{},
    # pid => the trace flags it had before it was held (not traced while subscribed)
    held: %{},
    rate: 0.0,
    rate_sample: {0, 0},
    setup_error: nil,
    probes: %{},
    reapplied: 0,
    guard: nil,
    bifs: [],
    bif_cursor: 0
  ]

  # --- starting ---------------------------------------------------------------------

  @doc """
  Starts a session that runs `plan` on this node, owned by `owner`, and waits until it
  traces. Returns `{:ok, pid, id}`; raises `ArgumentError` when the plan cannot be set
  (a target that exited since the plan was made).

  The supervisor only runs `init/1`, which is cheap: flags and match specs (possibly
  thousands) are set in the new process, so one slow start never holds up other traces.
  """
  @spec start(pid(), Plan.t()) :: {:ok, pid(), pos_integer()} | {:error, term()}
  def start(owner, %Plan{calls: _} = plan) do
    Kino.Trace.Application.start_session(__MODULE__, {owner, plan})
  end

  @impl true
  def init({owner, plan}) do
    Process.flag(:trap_exit, true)
    Kino.Trace.Internal.register(self())
    resource = Tracer.new_session(self(), plan.limits)
    # The tracer module must be loaded before the session is created.
    Code.ensure_loaded!(Tracer)
    session = :trace.session_create(:kino_trace, {Tracer, resource}, [])

    state = %__MODULE__{
      id: Tracer.session_id(resource),
      owner: owner,
      owner_ref: Process.monitor(owner),
      resource: resource,
      session: session,
      plan: plan,
      decoder: NativeDecoder.new(pairing: plan.options[:return]),
      history: History.new(plan.options[:history]),
      started_at: System.os_time(:microsecond)
    }

    {:ok, state, {:continue, :setup}}
  end

  @impl true
  def handle_continue(:setup, state) do
    set_process_flags(state)
    # after the process flags, which may cover every process
    Kino.Trace.Internal.add_session(state.session)
    state = install(state, state.plan)
    timeout = state.plan.options[:timeout]
    timer = if timeout, do: Process.send_after(self(), :timeout, timeout)
    Process.send_after(self(), :tick, @tick_ms)
    state = %{state | timer: timer, rate_sample: {System.monotonic_time(:millisecond), 0}}
    {:noreply, state}
  rescue
    e -> {:noreply, %{finish(state, :stopped, :discard) | setup_error: e}}
  end

  defp set_process_flags(%{session: session, plan: plan}) do
    for {targets, flags} <- Plan.process_flags(plan), target <- targets do
      trace_process!(session, target, flags)
    end

    if messages = plan.messages do
      :trace.send(session, messages.specs.send, [])
      :trace.recv(session, messages.specs.recv, [])
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

  defp patterns(%{plan: %Plan{calls: nil}}), do: []
  defp patterns(%{plan: %Plan{calls: calls}}), do: calls.patterns

  # Sets the plan's match specs: one per target, broadest first (see
  # Kino.Trace.Plan.Functions), linear in the number of patterns.
  defp install(state, %Plan{calls: nil} = plan), do: %{state | plan: plan}

  defp install(state, %Plan{calls: calls} = plan) do
    functions = calls.functions
    bifs = Functions.bif_steps(functions)
    # checked in before any BIF pattern is set (see Kino.Trace.Reaper); a step on every
    # module covers BIFs too
    if bifs != [] or Enum.any?(functions.steps, &match?({{:_, _, _}, _}, &1)), do: Reaper.bif_trace()

    Functions.install(functions, state.session, calls.match_flags)

    guard = StackGuard.set_plan(state.guard || start_guard(state), functions)
    decoder = NativeDecoder.no_returns(state.decoder, functions.no_returns)
    %{state | plan: plan, guard: guard, decoder: decoder, bifs: bifs, probes: probes(calls.patterns)}
  end

  defp apply_patterns(state, patterns), do: install(state, Plan.put_patterns(state.plan, patterns))

  defp remove_patterns(state) do
    targets = Functions.targets(patterns(state))
    for target <- targets, flag <- [:local, :global], do: :trace.function(state.session, target, false, [flag])
    # clearing a BIF pattern switches its tracing off in every session (erlang/otp#10349)
    if state.bifs != [], do: Reaper.bifs_cleared()
    %{state | guard: StackGuard.clear(state.guard, targets), bifs: []}
  end

  # The stack guard samples on its own timer (see Kino.Trace.StackGuard).
  defp start_guard(state) do
    guard = StackGuard.new(state.resource, state.session, state.plan)
    if guard, do: Process.send_after(self(), :stack_guard, StackGuard.interval())
    guard
  end

  # --- requests -----------------------------------------------------------------------
  #
  # Every request is answered in bounded time under any load: nothing here waits for the
  # native queue to become empty (producers may keep it full forever), only for what was
  # queued when the request came, capped.

  @impl true
  def handle_call(:await_setup, _from, %{setup_error: nil} = state), do: {:reply, {:ok, state.id}, state}
  def handle_call(:await_setup, _from, state), do: {:stop, :normal, {:error, state.setup_error}, state}

  def handle_call({:exclude, pid}, _from, state) do
    if tracing?(state) and node(pid) == node(), do: :trace.process(state.session, pid, false, [:all])
    {:reply, :ok, state}
  end

  # A subscriber is not traced while subscribed (it is held): the flags it had are kept
  # and given back when it unsubscribes. `tag` is what its messages carry: the trace's id
  # unless the subscriber asks otherwise (a coordinator of several nodes does).
  def handle_call({:subscribe, pid}, from, state), do: handle_call({:subscribe, pid, state.id}, from, state)

  def handle_call({:subscribe, pid, tag}, _from, state) do
    if Map.has_key?(state.subscribers, pid) do
      {:reply, :ok, state}
    else
      state = hold(state, pid)
      {:reply, :ok, %{state | subscribers: Map.put(state.subscribers, pid, {Process.monitor(pid), tag})}}
    end
  end

  def handle_call({:unsubscribe, pid}, _from, state) do
    {entry, subscribers} = Map.pop(state.subscribers, pid)
    with {ref, _tag} <- entry, do: Process.demonitor(ref, [:flush])
    {:reply, :ok, release(%{state | subscribers: subscribers}, pid)}
  end

  # Not tracing `pid` (a process that consumes this trace's events elsewhere, e.g. a
  # coordinator's subscriber) until it is released.
  def handle_call({:hold, pid}, _from, state), do: {:reply, :ok, hold(state, pid)}
  def handle_call({:release, pid}, _from, state), do: {:reply, :ok, release(state, pid)}

  def handle_call({:events, n}, _from, state) do
    state = catch_up(state, @max_sync_drain)
    {:reply, History.take(state.history, n), state}
  end

  # Delivers what is queued now to the subscribers, then answers: a subscriber that asks
  # has every event queued before it asked (in its mailbox) when the answer comes.
  # `:infinity` is for capture/3, which asks once every event of its block is queued.
  def handle_call({:sync, cap}, _from, state), do: {:reply, :ok, catch_up(state, cap)}

  def handle_call(:info, _from, state), do: {:reply, info(state), state}

  def handle_call({:set_patterns, inputs}, _from, state) do
    results = Pattern.parse_each(inputs, Plan.pattern_opts(state.plan))
    good = for {_input, {:ok, pattern, _warnings}} <- results, do: pattern

    state =
      cond do
        not tracing?(state) -> %{state | plan: Plan.put_patterns(state.plan, good)}
        state.status == :paused -> %{remove_patterns(state) | plan: Plan.put_patterns(state.plan, good)}
        true -> state |> remove_patterns() |> apply_patterns(good)
      end

    reply =
      Enum.map(results, fn
        {input, {:ok, _pattern, []}} -> {input, :ok}
        {input, {:ok, _pattern, warnings}} -> {input, {:ok, warnings}}
        {input, {:error, message}} -> {input, {:error, message}}
      end)

    {:reply, reply, state}
  end

  def handle_call(:pause, _from, %{status: :running} = state) do
    state = remove_patterns(state)
    {:reply, :ok, broadcast_status(%{state | status: :paused})}
  end

  def handle_call(:resume, _from, %{status: :paused} = state) do
    state = apply_patterns(state, patterns(state))
    {:reply, :ok, broadcast_status(%{state | status: :running})}
  end

  def handle_call(op, _from, state) when op in [:pause, :resume], do: {:reply, :ok, state}

  def handle_call(:stop, _from, state) do
    {:stop, :normal, :ok, finish(state, :stopped, :discard)}
  end

  defp hold(state, pid) do
    if Map.has_key?(state.held, pid) do
      state
    else
      flags = if tracing?(state) and node(pid) == node(), do: untrace(state.session, pid), else: []
      %{state | held: Map.put(state.held, pid, flags)}
    end
  end

  defp release(state, pid) do
    {flags, held} = Map.pop(state.held, pid, [])

    if flags != [] and tracing?(state) and Process.alive?(pid) and pid not in Kino.Trace.Internal.pids() do
      :trace.process(state.session, pid, true, flags)
    end

    %{state | held: held}
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
    state = state |> reapply_if_reloaded() |> reassert_bifs()
    {:noreply, %{state | rate: rate, rate_sample: {now, n}}}
  end

  def handle_info(:stack_guard, state) do
    if tracing?(state) do
      {callers, decoder} = NativeDecoder.take_callers(state.decoder)
      {guard, moved} = StackGuard.check(state.guard, callers)
      decoder = Enum.reduce(moved, decoder, &NativeDecoder.unpair(&2, &1))
      Process.send_after(self(), :stack_guard, StackGuard.interval())
      {:noreply, %{state | guard: guard, decoder: decoder}}
    else
      {:noreply, state}
    end
  end

  def handle_info({:DOWN, ref, :process, _pid, _reason}, %{owner_ref: ref} = state) do
    {:stop, :normal, finish(state, :stopped, :discard)}
  end

  def handle_info({:DOWN, ref, :process, pid, _reason}, state) do
    case state.subscribers do
      %{^pid => {^ref, _tag}} -> {:noreply, %{state | subscribers: Map.delete(state.subscribers, pid), held: Map.delete(state.held, pid)}}
      _ -> {:noreply, state}
    end
  end

  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, finish(state, :stopped, :discard)}

  def handle_info(_message, state), do: {:noreply, state}

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
      {state, more} = drain_deliver(state, @max_per_wakeup)
      if more, do: send(self(), :drain)
      state
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
      state |> drain_deliver(min(queued, cap)) |> elem(0)
    after
      Process.flag(:priority, priority)
    end
  end

  # Drains and delivers up to `budget` events, one batch at a time: each is decoded and
  # sent as it comes. Returns whether more are queued.
  defp drain_deliver(state, budget) when budget <= 0, do: {state, true}

  defp drain_deliver(state, budget) do
    case NativeDecoder.drain(state.decoder, state.resource, min(@drain_batch, budget)) do
      {[], more} -> {state, more}
      {events, true} -> state |> deliver_events(events) |> drain_deliver(budget - length(events))
      {events, false} -> {deliver_events(state, events), false}
    end
  end

  defp deliver_events(state, []), do: state

  defp deliver_events(state, events) do
    for {pid, {_ref, tag}} <- state.subscribers, do: send(pid, {:kino_trace, tag, {:events, events}})
    %{state | history: History.push(state.history, events)}
  end

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
    flags = state.plan.calls.match_flags
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
      state = apply_patterns(state, patterns(state))
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
    Kino.Trace.Internal.remove_session(state.session)
    # through the reaper: destroying a session must not switch off other traces of BIFs
    Reaper.bif_trace_ended()
    Reaper.destroy(state.session, Enum.map(patterns(state), &Pattern.mfa/1))
    state = %{state | session: nil, guard: StackGuard.stop(state.guard)}
    # what was queued before is delivered; then the native session closes
    state = if mode == :deliver, do: catch_up(state, :infinity), else: state
    Tracer.close(state.resource)
    if state.timer, do: Process.cancel_timer(state.timer)
    broadcast_status(%{state | status: status, rate: 0.0})
  end

  defp broadcast_status(state) do
    for {pid, {_ref, tag}} <- state.subscribers, do: send(pid, {:kino_trace, tag, {:status, state.status}})
    state
  end

  defp info(state) do
    c = Tracer.counters(state.resource)

    %{
      id: state.id,
      status: state.status,
      patterns: Enum.map(patterns(state), &Pattern.to_string/1),
      accepted: c.accepted,
      delivered: c.delivered,
      queued: c.queued,
      discarded: c.discarded,
      bytes_queued: c.bytes_queued,
      dropped: %{
        rate: c.dropped_rate,
        queue_full: c.dropped_queue_full,
        max_events: c.dropped_max_events,
        no_memory: c.dropped_no_memory,
        closed: c.dropped_closed
      },
      rate: state.rate * 1.0,
      started_at: state.started_at,
      limit: state.plan.options[:limit],
      traced: tracing?(state),
      stack_guarded: StackGuard.count(state.guard),
      subscribers: map_size(state.subscribers),
      reapplied: state.reapplied
    }
  end
end
