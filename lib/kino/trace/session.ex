defmodule Kino.Trace.Session do
  @moduledoc """
  One trace: the owner of one OTP `:trace` session and one native session.

  A session runs one `Kino.Trace.Plan` on this node: it starts under kino_trace's
  supervisor for every `Kino.Trace.calls/2` and `Kino.Trace.capture/3` (and on every
  node of a multi-node trace, see `Kino.Trace.Remote`). It

    * creates the native session (the plan's limits live there) and the OTP trace
      session with the native tracer (`:kino_trace_tracer`) as its tracer, then sets the plan's process flags
      and match specs (where the native tracer is not loaded, the pure-Erlang one,
      `Kino.Trace.LocalTracer`);
    * drains the native queue when woken (one message when the queue goes from empty to
      non-empty; paced by `Kino.Trace.DrainPacing`, so a steady stream is drained about
      once a millisecond rather than event by event), its events decoded natively
      (`Kino.Trace.NativeDecoder`; the fallback's and another node's by
      `Kino.Trace.Decoder`), and hands them in batches to its subscribers and to a
      bounded history;
    * monitors its owner: when the owner exits, or on `Kino.Trace.stop/1`, the session
      destroys the trace and closes the native session, so nothing of it remains.
      When the `:limit` or `:timeout` is reached, tracing ends the same way but the
      process stays until its owner exits or `stop/1`, so `events/2` and `info/1` still
      answer.

  The session process and its subscribers are never traced.
  """

  use GenServer
  @behaviour Kino.Trace.Server

  alias Kino.Trace.{Backend, Decoder, DrainPacing, History, NativeDecoder, Pattern, Plan, Reaper, Server}
  alias Kino.Trace.Server.Delivery
  alias Kino.Trace.StackGuard
  alias Kino.Trace.Plan.Functions

  # Events drained, decoded and sent to subscribers at once. Small batches keep what the
  # session holds while decoding within its young heap: decoding 2 000 events at once
  # cost about 4 times as much per event as 100-250 at a time (bench/consumer.exs), most of it
  # garbage collection.
  @drain_batch Delivery.batch_events()
  # Events drained before the mailbox is looked at again: what a request may wait for.
  @max_per_wakeup 2_000
  # How long a request on this node's fallback tracer waits for the VM to deliver the
  # trace messages made before it (see trace_delivered/0).
  @delivered_ms 2_000


  defstruct [
    :id,
    # the id the tracer's messages carry ({:kino_trace, tracer_id, :ready}...): the
    # native session's (which is also the trace's id), the fallback's, or for another
    # node's trace the trace's id (that node's agent puts it on its tracer's messages)
    :tracer_id,
    :owner,
    :owner_ref,
    # where the trace runs (Kino.Trace.Backend): nil until set up on another node
    :backend,
    # the monitor of that node's agent worker
    :worker_ref,
    # that node's agent: :running, then what ending the trace left there
    # (Kino.Trace.Agent.stop/1: :removed, :kept, or :lost when the node was gone)
    :agent,
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
    # pids given to exclude/2 (alive ones): kept out again after the fallback's restore
    excluded: MapSet.new(),
    rate: 0.0,
    rate_sample: {0, 0},
    setup_error: nil,
    probes: %{},
    reapplied: 0,
    guard: nil,
    bifs: [],
    bif_cursor: 0,
    # the tracer's last counters: what info/1 tells once another node's agent is gone
    counters: nil,
    pacing: DrainPacing.new(),
    # a paced drain is due (its timer runs)
    drain_due: false
  ]

  # --- starting ---------------------------------------------------------------------

  @doc """
  Starts a session that runs `plan` on this node, owned by `owner`, and waits until it
  traces. Returns `{:ok, pid, id}`; raises `ArgumentError` when the plan cannot be set
  (a target that exited since the plan was made).

  The supervisor only runs `init/1`, which is cheap: flags and match specs (possibly
  thousands) are set in the new process, so one slow start never holds up other traces.
  """
  @impl Kino.Trace.Server
  @spec start(pid(), Plan.t()) :: {:ok, pid(), pos_integer()} | {:error, term()}
  def start(owner, %Plan{calls: _} = plan) do
    Kino.Trace.Starter.start_session(__MODULE__, {owner, plan})
  end

  @impl true
  def init({owner, plan}) do
    Process.flag(:trap_exit, true)
    Kino.Trace.Internal.register(self())
    [node] = plan.nodes
    # Another node's tracer is started by its agent in handle_continue (it takes round trips).
    backend = if node == node(), do: Backend.start(self(), plan.limits, node)
    # The native tracer's ids count from 1; any other trace's come from the same range
    # as another node's, so no two traces here share one (Kino.Trace.Final keeps them).
    id = if(backend && Backend.native?(backend), do: backend.id, else: Server.new_id())

    state = %__MODULE__{
      id: id,
      tracer_id: if(backend, do: backend.id, else: id),
      owner: owner,
      owner_ref: Process.monitor(owner),
      backend: backend,
      plan: plan,
      # this node's native tracer's events are decoded natively as they are drained;
      # the fallback's come raw, and another node's raw from its agent, with that node's
      # names and time offset
      decoder:
        if(backend && Backend.native?(backend),
          do: NativeDecoder.new(pairing: plan.options[:return]),
          else: Decoder.new(pairing: plan.options[:return], node: node)
        ),
      history: History.new(plan.options[:history]),
      started_at: System.os_time(:microsecond)
    }

    {:ok, state, {:continue, :setup}}
  end

  @impl true
  def handle_continue(:setup, state) do
    state = start_remote(state)
    set_process_flags(state)
    # after the process flags, which may cover every process (another node's agent keeps
    # its own processes out of its traces)
    if Backend.local?(state.backend), do: Kino.Trace.Internal.add_session(state.backend.session)
    state = install(state, state.plan)
    timeout = state.plan.options[:timeout]
    timer = if timeout, do: Process.send_after(self(), :timeout, timeout)
    Process.send_after(self(), :tick, Server.tick_ms())
    state = %{state | timer: timer, rate_sample: {System.monotonic_time(:millisecond), 0}}
    {:noreply, state}
  rescue
    e -> {:noreply, %{finish(state, :stopped, :discard) | setup_error: e}}
  end

  # The tracer of a trace of another node, started there by kino_trace's agent.
  defp start_remote(%{backend: nil, plan: %Plan{nodes: [node]} = plan} = state) do
    case Backend.start_remote(self(), state.id, plan.limits, node, agent: plan.options[:agent]) do
      {:ok, backend} -> %{state | backend: backend, worker_ref: Process.monitor(backend.worker), agent: :running}
      {:error, message} -> raise ArgumentError, message
    end
  end

  defp start_remote(state), do: state

  defp set_process_flags(%{backend: backend, plan: plan}) do
    # the message specs first: until they are set every message of a traced process is
    # recorded (local ones in a trace of messages(:distributed); issue 23 item 3)
    if messages = plan.messages do
      Backend.trace(backend, :send, [messages.specs.send, []])
      Backend.trace(backend, :recv, [messages.specs.recv, []])
    end

    for {targets, flags} <- Plan.process_flags(plan), target <- targets do
      trace_process!(backend, target, flags)
    end

    # Never trace ourselves (we call plenty of functions a user may trace).
    if Backend.local?(backend), do: Backend.trace(backend, :process, [self(), false, [:all]])
  end

  # Sets the plan's process flags again (a target gone since is skipped), then keeps out
  # what is kept out: this process, kino_trace's own, the held and excluded ones, and
  # the stack guard's (moved off this session). Processes that only inherited their
  # flags (children) are not traced again.
  defp restore(%{backend: backend, plan: plan} = state) do
    for {targets, flags} <- Plan.process_flags(plan), target <- targets do
      try do
        trace_process!(backend, target, flags)
      rescue
        ArgumentError -> :ok
      end
    end

    for pid <- [self() | Map.keys(state.held) ++ MapSet.to_list(state.excluded)] do
      try do
        Backend.trace(backend, :process, [pid, false, [:all]])
      rescue
        ArgumentError -> :ok
      end
    end

    Kino.Trace.Internal.add_session(backend.session)
    StackGuard.restore(state.guard)
  end

  # Stops tracing `pid` in this session; returns the flags it had.
  defp untrace(backend, pid) do
    flags =
      case Backend.trace(backend, :info, [pid, :flags]) do
        {:flags, flags} -> flags
        _ -> []
      end

    Backend.trace(backend, :process, [pid, false, [:all]])
    flags
  rescue
    ArgumentError -> []
  end

  # `:all` and `:existing` on this node: every process but kino_trace's own, one by one,
  # so that none of those is traced even for a moment (Kino.Trace.Internal keeps them
  # out of the session once it is added, but what they did meanwhile would be recorded:
  # issue 23 item 3); `:new` ones are kept out as they register. (`:all` sets processes'
  # flags, not ports', either way.)
  defp trace_process!(%Backend{worker: nil} = backend, target, flags) when target in [:all, :existing] do
    if target == :all, do: Backend.trace(backend, :process, [:new, true, flags])
    own = MapSet.new([self() | Kino.Trace.Internal.pids()])

    for pid <- Process.list(), not MapSet.member?(own, pid) do
      try do
        Backend.trace(backend, :process, [pid, true, flags])
      rescue
        # exited meanwhile
        ArgumentError -> :ok
      end
    end

    :ok
  end

  # A pid that exited since the options were checked is a bad target, not a crash.
  defp trace_process!(backend, target, flags) when is_pid(target) do
    Backend.trace(backend, :process, [target, true, flags])
  rescue
    ArgumentError -> raise ArgumentError, "cannot trace #{inspect(target)}: the process is not alive"
  end

  defp trace_process!(backend, target, flags), do: Backend.trace(backend, :process, [target, true, flags])

  defp patterns(%{plan: %Plan{calls: nil}}), do: []
  defp patterns(%{plan: %Plan{calls: calls}}), do: calls.patterns

  # Sets the plan's match specs: one per target, broadest first (see
  # Kino.Trace.Plan.Functions), linear in the number of patterns.
  defp install(state, %Plan{calls: nil} = plan), do: %{state | plan: plan}

  defp install(state, %Plan{calls: calls} = plan) do
    functions = calls.functions
    local? = Backend.local?(state.backend)
    # the Reaper's work-around (erlang/otp#10349) and the stack guard are this node's
    bifs = if local?, do: Functions.bif_steps(functions), else: []
    # checked in before any BIF pattern is set (see Kino.Trace.Reaper); a step on every
    # module covers BIFs too
    if local? and (bifs != [] or Enum.any?(functions.steps, &match?({{:_, _, _}, _}, &1))), do: Reaper.bif_trace()

    {ops, after_ops} = Functions.install_ops(functions, calls.match_flags)
    Backend.run(state.backend, ops, after_ops)

    guard = if local?, do: StackGuard.set_plan(state.guard || start_guard(state), functions)
    decoder = decoder_module(state).no_returns(state.decoder, functions.no_returns)
    probes = if local?, do: probes(calls.patterns), else: %{}
    %{state | plan: plan, guard: guard, decoder: decoder, bifs: bifs, probes: probes}
  end

  defp apply_patterns(state, patterns), do: install(state, Plan.put_patterns(state.plan, patterns))

  defp remove_patterns(state) do
    targets = Functions.targets(patterns(state))
    # a BIF's pattern is never cleared: that switches it off in every session (erlang/otp#10349)
    Backend.run(state.backend, Reaper.untrace_ops(targets, state.plan.calls.match_flags))
    %{state | guard: StackGuard.clear(state.guard, targets), bifs: []}
  end

  # The stack guard samples on its own timer (see Kino.Trace.StackGuard).
  defp start_guard(state) do
    guard = StackGuard.new(state.backend.tracer, state.backend.session, state.plan)
    if guard, do: Process.send_after(self(), :stack_guard, StackGuard.interval())
    guard
  end

  # --- requests -----------------------------------------------------------------------
  #
  # Every request is answered in bounded time under any load: nothing here waits for the
  # native queue to become empty (producers may keep it full forever), only for what was
  # queued when the request came, capped.

  # Another node's agent may be gone at any request (Kino.Trace.Backend exits with
  # {:agent_down, worker}): the trace then ends, as when its monitor says so.
  @impl true
  def handle_call(request, from, state) do
    handle_request(request, from, state)
  catch
    :exit, {:agent_down, _} -> agent_gone(state, {:error, "the node's agent is gone"})
  end

  @impl Kino.Trace.Server
  def handle_request(:await_setup, _from, %{setup_error: nil} = state), do: {:reply, {:ok, state.id}, state}
  def handle_request(:await_setup, _from, state), do: {:stop, :normal, {:error, state.setup_error}, state}

  def handle_request({:exclude, pid}, _from, state) do
    if tracing?(state) and node(pid) == state.backend.node, do: Backend.trace(state.backend, :process, [pid, false, [:all]])
    excluded = state.excluded |> Enum.filter(&Process.alive?/1) |> MapSet.new() |> MapSet.put(pid)
    {:reply, :ok, %{state | excluded: if(node(pid) == node(), do: excluded, else: state.excluded)}}
  end

  # A subscriber is not traced while subscribed (it is held): the flags it had are kept
  # and given back when it unsubscribes. `tag` is what its messages carry: the trace's id
  # unless the subscriber asks otherwise (a coordinator of several nodes does).
  def handle_request({:subscribe, pid}, from, state), do: handle_request({:subscribe, pid, state.id}, from, state)

  def handle_request({:subscribe, pid, tag}, _from, state) do
    if Map.has_key?(state.subscribers, pid) do
      {:reply, :ok, state}
    else
      state = hold(state, pid)
      {:reply, :ok, %{state | subscribers: Map.put(state.subscribers, pid, {Process.monitor(pid), tag})}}
    end
  end

  def handle_request({:unsubscribe, pid}, _from, state) do
    {entry, subscribers} = Map.pop(state.subscribers, pid)
    with {ref, _tag} <- entry, do: Process.demonitor(ref, [:flush])
    {:reply, :ok, release(%{state | subscribers: subscribers}, pid)}
  end

  # Not tracing `pid` (a process that consumes this trace's events elsewhere, e.g. a
  # coordinator's subscriber) until it is released.
  def handle_request({:hold, pid}, _from, state), do: {:reply, :ok, hold(state, pid)}
  def handle_request({:release, pid}, _from, state), do: {:reply, :ok, release(state, pid)}

  def handle_request({:events, n}, _from, state) do
    state = catch_up(state, Server.max_sync_drain())
    {:reply, History.take(state.history, n), state}
  end

  # Delivers what is queued now to the subscribers, then answers: a subscriber that asks
  # has every event queued before it asked (in its mailbox) when the answer comes.
  # `:infinity` is for capture/3, which asks once every event of its block is queued.
  def handle_request({:sync, cap}, _from, state), do: {:reply, :ok, catch_up(state, cap)}

  # (this node's fallback tracer first takes in its mailbox: its counters then count
  # every event traced before the request, as the native tracer's do)
  def handle_request(:info, _from, state) do
    state = if tracing?(state), do: state |> first_batch(@drain_batch) |> elem(0), else: state
    {:reply, info(state), state}
  end

  # What this node's OTP session names as its tracer (Kino.Trace.Capture.Sends asks);
  # nil for another node's trace.
  def handle_request(:tracer, _from, state) do
    tracer = state.backend && state.backend.tracer
    {:reply, tracer && Kino.Trace.LocalTracer.tracer_spec(tracer), state}
  end

  # What tests and debugging read of the session (Kino.Trace.Client.internals/1).
  def handle_request(:internals, _from, %{backend: backend} = state) do
    internals = %{
      plan: state.plan,
      held: Map.keys(state.held),
      resource: backend && backend.resource,
      otp_session: backend && backend.session,
      worker: backend && backend.worker
    }

    {:reply, internals, state}
  end

  def handle_request({:set_patterns, inputs}, _from, state) do
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

  def handle_request(:pause, _from, %{status: :running} = state) do
    state = remove_patterns(state)
    {:reply, :ok, broadcast_status(%{state | status: :paused})}
  end

  def handle_request(:resume, _from, %{status: :paused} = state) do
    state = apply_patterns(state, patterns(state))
    {:reply, :ok, broadcast_status(%{state | status: :running})}
  end

  def handle_request(op, _from, state) when op in [:pause, :resume], do: {:reply, :ok, state}

  def handle_request(:stop, _from, state) do
    {:stop, :normal, :ok, finish(state, :stopped, :discard)}
  end

  defp hold(state, pid) do
    if Map.has_key?(state.held, pid) do
      state
    else
      flags = if tracing?(state) and node(pid) == state.backend.node, do: untrace(state.backend, pid), else: []
      %{state | held: Map.put(state.held, pid, flags)}
    end
  end

  defp release(state, pid) do
    {flags, held} = Map.pop(state.held, pid, [])

    if flags != [] and tracing?(state) and Process.alive?(pid) and pid not in Kino.Trace.Internal.pids() do
      Backend.trace(state.backend, :process, [pid, true, flags])
    end

    %{state | held: held}
  end

  # --- native wake-ups and timers -----------------------------------------------------

  @impl true
  def handle_info(message, state) do
    message(message, state)
  catch
    :exit, {:agent_down, _} -> agent_gone(state, nil)
  end

  defp message({:kino_trace, id, :ready}, %{tracer_id: id} = state), do: {:noreply, ready(state)}
  defp message(:drain, state), do: {:noreply, drain(state)}
  defp message(:paced_drain, state), do: {:noreply, drain(%{state | drain_due: false})}

  defp message({:kino_trace, id, :limit_reached}, %{tracer_id: id} = state) do
    {:noreply, finish(state, :limit_reached, :deliver)}
  end

  defp message(:timeout, state), do: {:noreply, finish(state, :timeout, :deliver)}

  # This node's fallback tracer: its mailbox guard switched the session's process flags
  # off, and its mailbox is empty again.
  defp message({:kino_trace, id, :restore}, %{tracer_id: id} = state) do
    if tracing?(state) and Backend.local?(state.backend), do: restore(state)
    {:noreply, state}
  end

  # Another kino_trace session cleared a BIF pattern (see Kino.Trace.Reaper).
  defp message(:reassert_bifs, state), do: {:noreply, reassert_bifs(state, length(state.bifs))}

  defp message(:tick, state) do
    {t0, n0} = state.rate_sample
    now = System.monotonic_time(:millisecond)
    %{accepted: n} = counters = counters(state)
    rate = if now > t0, do: (n - n0) * 1000 / (now - t0), else: 0.0
    if tracing?(state), do: Process.send_after(self(), :tick, Server.tick_ms())
    state = state |> reapply_if_reloaded() |> reassert_bifs()
    {:noreply, %{state | rate: rate, rate_sample: {now, n}, counters: counters}}
  end

  defp message(:stack_guard, state) do
    if tracing?(state) do
      # (this node's trace only: the stack guard samples this node's processes)
      decoder_module = decoder_module(state)
      {callers, decoder} = decoder_module.take_callers(state.decoder)
      {guard, moved} = StackGuard.check(state.guard, callers)
      decoder = Enum.reduce(moved, decoder, &decoder_module.unpair(&2, &1))
      Process.send_after(self(), :stack_guard, StackGuard.interval())
      {:noreply, %{state | guard: guard, decoder: decoder}}
    else
      {:noreply, state}
    end
  end

  defp message({:DOWN, ref, :process, _pid, _reason}, %{owner_ref: ref} = state) do
    {:stop, :normal, finish(state, :stopped, :discard)}
  end

  # Another node's agent is gone (the node went down or disconnected): the trace ends,
  # and whoever watches this session sees why.
  defp message({:DOWN, ref, :process, _pid, reason}, %{worker_ref: ref} = state) do
    {:stop, {:shutdown, {:agent_down, reason}}, finish(%{state | agent: :lost}, :stopped, :discard)}
  end

  defp message({:DOWN, ref, :process, pid, _reason}, state) do
    case state.subscribers do
      %{^pid => {^ref, _tag}} -> {:noreply, %{state | subscribers: Map.delete(state.subscribers, pid), held: Map.delete(state.held, pid)}}
      _ -> {:noreply, state}
    end
  end

  defp message({:EXIT, _pid, reason}, state), do: {:stop, reason, finish(state, :stopped, :discard)}

  defp message(_message, state), do: {:noreply, state}

  # A request to the agent failed: its monitor tells why (the node disconnected...), or
  # it did not answer in time.
  defp agent_gone(state, reply) do
    ref = state.worker_ref

    reason =
      receive do
        {:DOWN, ^ref, :process, _pid, reason} -> reason
      after
        1_000 -> :not_answering
      end

    state = finish(%{state | agent: :lost}, :stopped, :discard)
    reason = {:shutdown, {:agent_down, reason}}
    if reply, do: {:stop, reason, reply, state}, else: {:stop, reason, state}
  end

  @impl true
  def terminate(_reason, state) do
    state = state |> finish(:stopped, :discard) |> release_agent()
    if state.setup_error == nil, do: Kino.Trace.Final.put(state.id, info(state))
    :ok
  end

  # Another node's trace: its agent's worker ends and this waits until that node is as
  # it was (stop/1 answers after this), or another trace of it goes on there.
  defp release_agent(%{agent: :running} = state), do: %{state | agent: Backend.release(state.backend)}
  defp release_agent(state), do: state

  # --- draining -----------------------------------------------------------------------

  # A wake-up soon after a drain emptied the queue drains a moment later
  # (Kino.Trace.DrainPacing): what comes in meanwhile is drained with it.
  defp ready(%{drain_due: true} = state), do: state

  defp ready(state) do
    case DrainPacing.ready(state.pacing, DrainPacing.now()) do
      :now ->
        drain(state)

      {:after, ms} ->
        Process.send_after(self(), :paced_drain, ms)
        %{state | drain_due: true}
    end
  end

  # Drains up to @max_per_wakeup events, then yields to the mailbox (a :drain message
  # continues). While a subscriber is backlogged the queue is left alone: it fills and
  # the native side drops and counts, so memory stays bounded.
  defp drain(%{backend: nil} = state), do: state

  defp drain(state) do
    if Delivery.backlogged?(state.subscribers, :session) do
      Process.send_after(self(), :drain, 5)
      state
    else
      case drain_deliver(state, @max_per_wakeup) do
        {state, true} ->
          send(self(), :drain)
          state

        {state, false} ->
          %{state | pacing: DrainPacing.emptied(state.pacing, DrainPacing.now())}
      end
    end
  end

  # Delivers what is queued now, at most `cap` events: producers that keep the queue
  # full never hold a request up for longer than that.
  defp catch_up(%{backend: nil} = state, _cap), do: state

  # Someone is waiting for this bounded work, so it runs at high priority: processes
  # flooding the trace must not stretch it out. Background draining stays normal.
  defp catch_up(state, cap) do
    priority = Process.flag(:priority, :high)

    try do
      {state, taken} = first_batch(state, cap)
      %{queued: queued} = Backend.counters(state.backend)
      left = if cap == :infinity, do: queued, else: min(queued, cap - taken)
      state |> drain_deliver(left) |> elem(0)
    after
      Process.flag(:priority, priority)
    end
  end

  # The native tracer queues each event in the traced process, so its counters are up
  # to date; this node's fallback tracer queues what is in its mailbox, so one drain
  # (a request it answers after the messages that came before it) comes first, once the
  # VM has delivered every trace message made so far (they travel as signals from the
  # traced processes: a call made before the request may still be on its way).
  defp first_batch(%{decoder: %Decoder{}, backend: %Backend{worker: nil}} = state, cap) when cap > 0 do
    trace_delivered()
    {events, _more, state} = drain_batch(state, min(@drain_batch, cap))
    {deliver_events(state, events), length(events)}
  end

  defp first_batch(state, _cap), do: {state, 0}

  # Waits (at most @delivered_ms) until the trace messages of every process made before
  # now are in their tracers' mailboxes.
  defp trace_delivered do
    ref = :erlang.trace_delivered(:all)

    receive do
      {:trace_delivered, :all, ^ref} -> :ok
    after
      @delivered_ms -> :ok
    end
  end

  # Drains and delivers up to `budget` events, one batch at a time: each is decoded and
  # sent as it comes. Returns whether more are queued.
  defp drain_deliver(state, budget) when budget <= 0, do: {state, true}

  defp drain_deliver(state, budget) do
    case drain_batch(state, min(@drain_batch, budget)) do
      {[], more, state} -> {state, more}
      {events, true, state} -> state |> deliver_events(events) |> drain_deliver(budget - length(events))
      {events, false, state} -> {deliver_events(state, events), false}
    end
  end

  # This node's events come decoded from the native tracer; another node's raw, decoded here.
  defp drain_batch(%{decoder: %Decoder{}} = state, max) do
    {raw, more, context} = Backend.drain(state.backend, max)
    {events, decoder} = Decoder.decode(state.decoder, raw, context)
    {events, more, %{state | decoder: decoder}}
  end

  defp drain_batch(state, max) do
    {events, more} = NativeDecoder.drain(state.decoder, state.backend.resource, max)
    {events, more, state}
  end

  defp decoder_module(%{decoder: %Decoder{}}), do: Decoder
  defp decoder_module(_state), do: NativeDecoder

  defp deliver_events(state, events) do
    Delivery.notify(state.subscribers, {:events, events})
    guard_loops(%{state | history: History.push(state.history, events)}, events)
  end

  # Tail-call loops the code did not show, taken off return tracing at once: sampling
  # their stacks would be too late (Kino.Trace.StackGuard.loops/2).
  # (not once tracing ended: what is delivered then must not make the guard a session)
  defp guard_loops(%{guard: guard, status: :running} = state, events) when guard != nil do
    if tracing?(state) do
      {guard, moved} = StackGuard.loops(guard, events)
      decoder = Enum.reduce(moved, state.decoder, &decoder_module(state).unpair(&2, &1))
      %{state | guard: guard, decoder: decoder}
    else
      state
    end
  end

  defp guard_loops(state, _events), do: state

  # --- BIFs (OTP 27.3, erlang/otp#10349: see Kino.Trace.Reaper) ---------------------------

  # Another tool ending its trace session switches BIF tracing off without a trace of
  # it (:trace.info/3 still says traced), so a trace of BIFs sets its BIF patterns
  # again: every tick, at most @bifs_per_tick of them in turn (each call costs the VM a
  # code barrier). They stay set in the session; this switches them back on.
  @bifs_per_tick 32

  defp reassert_bifs(state, count \\ @bifs_per_tick)

  defp reassert_bifs(%{status: :running, bifs: [_ | _] = bifs} = state, count) do
    flags = state.plan.calls.match_flags
    n = length(bifs)
    cursor = rem(state.bif_cursor, n)
    batch = bifs |> Stream.cycle() |> Stream.drop(cursor) |> Enum.take(min(count, n))
    if tracing?(state), do: Backend.run(state.backend, for({mfa, spec} <- batch, do: {:function, [mfa, spec, flags]}))
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

  defp reapply_if_reloaded(%{status: :running} = state) do
    reloaded? =
      tracing?(state) and
      Enum.any?(state.probes, fn {m, mfa} ->
        :erlang.module_loaded(m) and Backend.trace(state.backend, :info, [mfa, :traced]) == {:traced, false}
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

  defp tracing?(%{backend: backend}), do: backend != nil and Backend.tracing?(backend)

  # Ends tracing. `:discard` (stop/1, the owner exits): the native session closes first,
  # so nothing more is admitted, and what is queued is freed natively (counted as
  # discarded, never decoded); then the OTP session is destroyed. `:deliver` (the limit
  # or the timeout): the OTP session is destroyed and what it queued before is delivered,
  # which is bounded by the queue's caps; the process lives on for events/2 and info/1.
  # Idempotent.
  defp finish(state, status, mode) do
    if mode == :discard and state.backend, do: Backend.close(state.backend)
    end_tracing(state, status, mode)
  end

  defp end_tracing(state, status, mode) do
    if tracing?(state), do: do_end_tracing(state, status, mode), else: state
  end

  defp do_end_tracing(state, status, mode) do
    if Backend.local?(state.backend) do
      Kino.Trace.Internal.remove_session(state.backend.session)
      # through the reaper: destroying a session must not switch off other traces of BIFs
      Reaper.bif_trace_ended()
    end

    backend = Backend.destroy(state.backend, Enum.map(patterns(state), &Pattern.mfa/1))
    state = %{state | backend: backend, guard: StackGuard.stop(state.guard)}
    # what was queued before is delivered; then the native session closes
    state = if mode == :deliver, do: catch_up(state, :infinity), else: state
    Backend.close(state.backend)
    if state.timer, do: Process.cancel_timer(state.timer)
    broadcast_status(%{state | status: status, rate: 0.0})
  end

  defp broadcast_status(state) do
    Delivery.notify(state.subscribers, {:status, state.status})
    state
  end

  # The tracer's counters; another node's last known ones when its agent is gone.
  @no_counters Map.new(
                 ~w(accepted delivered queued discarded bytes_queued dropped_rate dropped_queue_full dropped_max_events dropped_no_memory dropped_closed)a,
                 &{&1, 0}
               )

  defp counters(%{backend: nil} = state), do: state.counters || @no_counters

  defp counters(state) do
    Backend.counters(state.backend)
  catch
    :exit, {:agent_down, _} -> state.counters || @no_counters
  end

  defp info(state) do
    c = counters(state)

    %{
      id: state.id,
      status: state.status,
      patterns: Enum.map(patterns(state), &Pattern.to_string/1),
      what: Plan.summary(state.plan),
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
      reapplied: state.reapplied,
      tracer: if(state.backend, do: state.backend.mode, else: :native)
    }
    |> put_fallback(c)
    |> put_agent(state.agent)
  end

  # The fallback tracer of another node also tells the trace messages it received and
  # how often its mailbox guard switched tracing off (calls meanwhile were not traced).
  defp put_fallback(info, %{fallback: figures}) do
    Map.put(info, :fallback, %{received: figures.received, switched_off: figures.guard_trips})
  end

  defp put_fallback(info, _counters), do: info

  # Another node's trace tells what its agent there is doing, or what ending left there.
  defp put_agent(info, nil), do: info
  defp put_agent(info, agent), do: Map.put(info, :agent, agent)
end
