defmodule KinoTrace.Session do
  @moduledoc false
  # One trace: the owner of one OTP `:trace` session and one native session.
  #
  # A session runs one `Kino.Trace.Plan` on this node: it starts under kino_trace's
  # supervisor for every `Kino.Trace.calls/2` and `Kino.Trace.capture/3` (and on every
  # node of a multi-node trace, see `KinoTrace.Remote`). It
  #
  #   * creates the native session (the plan's limits live there) and the OTP trace
  #     session with the native tracer (`:kino_trace_tracer`) as its tracer, then sets the plan's process flags
  #     and match specs (where the native tracer is not loaded, the pure-Erlang one:
  #     `KinoTrace.Backend`, one struct per mode, chosen once);
  #   * drains the native queue when woken (one message when the queue goes from empty to
  #     non-empty; paced by `KinoTrace.Session.DrainPacing`, so a steady stream is drained about
  #     once a millisecond rather than event by event), its events decoded natively
  #     (`KinoTrace.Tracer.NativeDecoder`; the fallback's and another node's by
  #     `KinoTrace.Tracer.Decoder`, in their backends), and hands them in batches to its subscribers and to a
  #     bounded history;
  #   * monitors its owner: when the owner exits, or on `Kino.Trace.stop/1`, the session
  #     destroys the trace and closes the native session, so nothing of it remains.
  #     When the `:limit` or `:timeout` is reached, tracing ends the same way but the
  #     process stays until its owner exits or `stop/1`, so `events/2` and `info/1` still
  #     answer.
  #
  # The session process and its subscribers are never traced.
  #
  # The server keeps the lifecycle (setting up, the owner's and the agent's monitors,
  # ending) and dispatches requests and messages to its parts, which work on its state:
  # Session.Setup (the tracer, process flags and match specs), Session.Subscribers
  # (subscribers, held and excluded processes), Session.Drain (draining, pacing,
  # backpressure), Session.Safeguards (what only a trace of this node does: the BIF
  # re-assert, the reload probes, the stack guard) and Session.Info. Whether the trace is
  # this node's is decided once, in `init/1`.

  use GenServer
  @behaviour KinoTrace.Server

  alias Kino.Trace.Plan
  alias KinoTrace.{Backend, History, Pattern, Server}
  alias KinoTrace.Latency.Kept

  alias KinoTrace.Session.{
    Drain,
    DrainPacing,
    Info,
    OwnEvents,
    Recorder,
    Safeguards,
    Setup,
    Subscribers
  }

  @typedoc """
  A session's state. Its fields that need a word:

    * `tracer_id`: the id the tracer's messages carry (`{:kino_trace, tracer_id, :ready}`…):
      the native session's (which is also the trace's id), the fallback's, or for another
      node's trace the trace's id (that node's agent puts it on its tracer's messages);
    * `backend`: where the trace runs and how its events are decoded (KinoTrace.Backend:
      one struct per mode, chosen once: in init/1 for this node, by Session.Setup for
      another node; this node's safeguards run where `Backend.safeguards?/1` says so),
      nil until set up on another node; `worker_ref` monitors that node's agent worker; `agent` is `:running`,
      then what ending the trace left there (KinoTrace.Agent.stop/1: `:removed`,
      `:kept`, or `:lost` when the node was gone);
    * `kept`: what it keeps since the start (KinoTrace.Latency.Kept): latency distributions
      with `latency: true`, slow calls with `slowest:` or `slower_than:`;
    * `recorder`: a recorder's part (Kino.Trace.record/2; KinoTrace.Session.Recorder),
      whose ring is then the history;
    * `subscribers`: pid => `{monitor, tag}`, events go to pid as `{:kino_trace, tag, ...}`;
    * `held`: pid => the trace flags it had before it was held (not traced while subscribed);
    * `excluded`: pids given to exclude/2 (alive ones), kept out again after the
      fallback's restore;
    * `counters`: the tracer's last counters, what info/1 tells once another node's agent
      is gone;
    * `drain_due`: a paced drain is due (its timer runs);
    * `files_writer`: the `to:` option's writer (KinoTrace.File.Writer), which stop/1
      waits for.
  """
  @type t :: %__MODULE__{}

  defstruct [
    :id,
    :tracer_id,
    :owner,
    :owner_ref,
    :backend,
    :worker_ref,
    :agent,
    :plan,
    :timer,
    :started_at,
    :history,
    :kept,
    :recorder,
    status: :running,
    subscribers: %{},
    held: %{},
    excluded: MapSet.new(),
    rate: 0.0,
    rate_sample: {0, 0},
    setup_error: nil,
    files_writer: nil,
    probes: %{},
    reapplied: 0,
    guard: nil,
    bifs: [],
    bif_cursor: 0,
    bif_watch: nil,
    counters: nil,
    pacing: DrainPacing.new(),
    drain_due: false
  ]

  # --- starting ---------------------------------------------------------------------

  @doc """
  Starts a session that runs `plan` on this node, owned by `owner`, and waits until it
  traces, or for at most `await` milliseconds (see `KinoTrace.Starter.start_session/3`).
  Returns `{:ok, pid, id}`; raises `ArgumentError` when the plan cannot be set (a target
  that exited since the plan was made) and that was known within `await`.

  The supervisor only runs `init/1`, which is cheap: flags and match specs (possibly
  thousands) are set in the new process, so one slow start never holds up other traces.
  """
  @impl KinoTrace.Server
  @spec start(pid(), Plan.t(), timeout()) :: {:ok, pid(), pos_integer()} | {:error, term()}
  def start(owner, %Plan{calls: _} = plan, await \\ :infinity) do
    KinoTrace.Starter.start_session(__MODULE__, {owner, plan, self()}, await)
  end

  @impl true
  def init({owner, plan, starter}) do
    Process.flag(:trap_exit, true)
    # untraced in the live sessions in handle_continue/2: here that would hold up the
    # supervisor, so every other start, for one `:trace` call per live session
    KinoTrace.Internal.mark(self())
    [node] = plan.nodes
    # Another node's tracer is started by its agent in handle_continue (it takes round trips).
    backend =
      if node == node(),
        do: Backend.start(self(), plan.limits, node, pairing: plan.options[:return])

    # The native tracer's ids count from 1; any other trace's come from the same range
    # as another node's, so no two traces here share one (KinoTrace.Client.Final keeps them).
    id = Backend.trace_id(backend) || Server.new_id()

    state = %__MODULE__{
      id: id,
      tracer_id: if(backend, do: backend.id, else: id),
      owner: owner,
      owner_ref: Process.monitor(owner),
      backend: backend,
      plan: plan,
      history:
        if(plan.record, do: Recorder.ring(plan.record), else: History.new(plan.options[:history])),
      recorder: Recorder.new(plan.record),
      kept: Kept.new(plan.options),
      started_at: System.os_time(:microsecond)
    }

    KinoTrace.Starter.started(starter, id)
    # what info/1 tells should this process be killed while it sets up (stop/1)
    {:ok, keep_final(state), {:continue, :setup}}
  end

  @impl true
  def handle_continue(:setup, state) do
    state =
      Server.urgent(fn ->
        KinoTrace.Internal.untrace_everywhere(self())
        Setup.start(state)
      end)

    timeout = state.plan.options[:timeout]
    timer = if timeout, do: Process.send_after(self(), :timeout, timeout)
    Process.send_after(self(), :tick, Server.tick_ms())
    state = %{state | timer: timer, rate_sample: {System.monotonic_time(:millisecond), 0}}
    {:noreply, keep_final(state)}
  rescue
    e -> {:noreply, %{finish(state, :stopped, :discard) | setup_error: e}}
  end

  # --- requests -----------------------------------------------------------------------
  #
  # Every request is answered in bounded time under any load: nothing here waits for the
  # native queue to become empty (producers may keep it full forever), only for what was
  # queued when the request came, capped.

  # Another node's agent may be gone at any request (KinoTrace.Backend exits with
  # {:agent_down, worker}): the trace then ends, as when its monitor says so.
  @impl true
  def handle_call(request, from, state) do
    handle_request(request, from, state)
  catch
    :exit, {:agent_down, _} -> agent_gone(state, {:error, "the node's agent is gone"})
  end

  @impl KinoTrace.Server
  def handle_request(:await_setup, _from, %{setup_error: nil} = state),
    do: {:reply, {:ok, state.id}, state}

  def handle_request(:await_setup, _from, state),
    do: {:stop, :normal, {:error, state.setup_error}, state}

  def handle_request({:exclude, pid}, _from, state),
    do: {:reply, :ok, Subscribers.exclude(state, pid)}

  # A subscriber is not traced while subscribed (it is held): the flags it had are kept
  # and given back when it unsubscribes. `tag` is what its messages carry: the trace's id
  # unless the subscriber asks otherwise (a coordinator of several nodes does).
  def handle_request({:subscribe, pid}, from, state),
    do: handle_request({:subscribe, pid, state.id}, from, state)

  def handle_request({:subscribe, pid, tag}, _from, state),
    do: {:reply, :ok, state |> forget_own(pid) |> Subscribers.subscribe(pid, tag)}

  def handle_request({:unsubscribe, pid}, _from, state),
    do: {:reply, :ok, Subscribers.unsubscribe(state, pid)}

  # Not tracing `pid` (a process that consumes this trace's events elsewhere, e.g. a
  # coordinator's subscriber) until it is released.
  def handle_request({:hold, pid}, _from, state), do: {:reply, :ok, Subscribers.hold(state, pid)}

  def handle_request({:release, pid}, _from, state),
    do: {:reply, :ok, Subscribers.release(state, pid)}

  def handle_request({:events, n}, _from, state),
    do: state |> Drain.for_request() |> then(&{:reply, History.take(&1.history, n), &1})

  # A recorder's snapshot now (Kino.Trace.snapshot/1), of what is queued too (capped).
  def handle_request(:snapshot, _from, state) do
    {reply, state} = state |> Drain.for_request() |> Recorder.snapshot()
    {:reply, reply, state}
  end

  # A recorder's ring, for a snapshot of a recorder of several nodes.
  def handle_request(:ring, _from, state),
    do: state |> Drain.for_request() |> then(&{:reply, Recorder.ring_events(&1), &1})

  # (another node's triggered snapshots are fetched now: its agent's worker kept them)
  def handle_request(:snapshots, _from, state) do
    {snapshots, state} = state |> Recorder.fetch() |> Recorder.snapshots()
    {:reply, snapshots, state}
  end

  def handle_request(kept, _from, state)
      when kept in [:latency, :latency_processes, :slow_calls, :slow_counts] do
    state = Drain.for_request(state)
    {:reply, kept_reply(kept, state.kept), state}
  end

  # Delivers what is queued now to the subscribers, then answers: a subscriber that asks
  # has every event queued before it asked (in its mailbox) when the answer comes.
  # `:infinity` is for capture/3, which asks once every event of its block is queued.
  def handle_request({:sync, cap}, _from, state), do: {:reply, :ok, Drain.catch_up(state, cap)}

  # (this node's fallback tracer first takes in its mailbox: its counters then count
  # every event traced before the request, as the native tracer's do)
  def handle_request(:info, _from, state) do
    # (a recorder's snapshots stopped by hand are gone from its figures)
    {_snapshots, state} = state |> Drain.take_in() |> Recorder.snapshots()
    {:reply, info(state), state}
  end

  # What this node's OTP session names as its tracer (KinoTrace.Capture.Sends asks);
  # nil for another node's trace.
  def handle_request(:tracer, _from, state),
    do: {:reply, state.backend && Backend.tracer_spec(state.backend), state}

  # Its node and, for another node's trace, that node's agent worker (where the `to:`
  # option's files of its events are written: KinoTrace.File.Writer).
  def handle_request(:workers, _from, state), do: {:reply, Backend.workers(state.backend), state}

  # What tests and debugging read of the session (KinoTrace.Client.internals/1).
  def handle_request(:internals, _from, %{backend: backend} = state) do
    internals = %{
      plan: state.plan,
      held: Map.keys(state.held),
      backend: backend,
      resource: backend && Map.get(backend, :resource),
      otp_session: backend && backend.session,
      worker: backend && Map.get(backend, :worker),
      slow_open_calls: Kept.open_calls(state.kept)
    }

    {:reply, internals, state}
  end

  def handle_request({:set_patterns, inputs}, _from, state) do
    {reply, state} = Setup.set_patterns(state, inputs)
    {:reply, reply, state}
  end

  def handle_request(:pause, _from, %{status: :running} = state) do
    state = Setup.remove_patterns(state)
    {:reply, :ok, broadcast_status(%{state | status: :paused})}
  end

  def handle_request(:resume, _from, %{status: :paused} = state) do
    state = Setup.apply_patterns(state, Setup.patterns(state))
    {:reply, :ok, broadcast_status(%{state | status: :running})}
  end

  def handle_request(op, _from, state) when op in [:pause, :resume], do: {:reply, :ok, state}

  # (stop/1 answers once the `to:` option's files hold what was delivered: their writer
  # told its pid, and stop/1 waits for it to end)
  def handle_request(:stop, _from, state),
    do: {:stop, :normal, :ok, finish(state, :stopped, :discard) |> await_writer()}

  def handle_request({:files_writer, pid}, _from, state),
    do: {:reply, :ok, %{state | files_writer: pid}}

  defp kept_reply(:latency, kept), do: Kept.latency(kept)
  defp kept_reply(:latency_processes, kept), do: Kept.latency_processes(kept)
  defp kept_reply(:slow_calls, kept), do: Kept.slow_calls(kept)
  defp kept_reply(:slow_counts, kept), do: Kept.slow_counts(kept)

  # --- native wake-ups and timers -----------------------------------------------------

  @impl true
  def handle_info(message, state) do
    message(message, state)
  catch
    :exit, {:agent_down, _} -> agent_gone(state, nil)
  end

  defp message({:kino_trace, id, :ready}, %{tracer_id: id} = state),
    do: {:noreply, Drain.ready(state)}

  defp message(:drain, state), do: {:noreply, Drain.drain(state)}
  defp message(:paced_drain, state), do: {:noreply, Drain.paced(state)}

  defp message({:kino_trace, id, :limit_reached}, %{tracer_id: id} = state) do
    {:noreply, finish(state, :limit_reached, :deliver)}
  end

  defp message(:timeout, state), do: {:noreply, finish(state, :timeout, :deliver)}

  # A recorder's after-window's time ended: what was queued until then goes in first.
  defp message({:kino_trace_record_after, ref}, state),
    do: {:noreply, state |> Drain.for_request() |> Recorder.window_ended(ref)}

  defp message({:kino_trace_telemetry, _name, pid, time}, state),
    do: {:noreply, state |> Drain.for_request() |> Recorder.telemetry(pid, time)}

  # This node's fallback tracer: its mailbox guard switched the session's process flags
  # off, and its mailbox is empty again.
  defp message({:kino_trace, id, :restore}, %{tracer_id: id} = state) do
    if tracing?(state) and Backend.safeguards?(state.backend), do: Setup.restore(state)
    {:noreply, state}
  end

  # Another kino_trace session cleared a BIF pattern (see KinoTrace.Backend.BifWorkaround).
  defp message(:reassert_bifs, state), do: {:noreply, Safeguards.reassert_all_bifs(state)}

  defp message(:tick, state) do
    state = Info.sample(state)
    if tracing?(state), do: Process.send_after(self(), :tick, Server.tick_ms())
    {:noreply, state |> keep_final() |> Setup.reapply_if_reloaded() |> Safeguards.reassert_bifs()}
  end

  # This node's tracer holds a process that looped (KinoTrace.Session.StackGuard.held/3).
  defp message({:kino_trace, id, {:loop, pid, mfa}}, %{tracer_id: id} = state) do
    {:noreply, Safeguards.loop_held(state, pid, mfa)}
  end

  # (this node's trace only: the stack guard samples this node's processes)
  defp message(:stack_guard, state), do: {:noreply, Safeguards.check_stacks(state)}

  defp message({:DOWN, ref, :process, _pid, _reason}, %{owner_ref: ref} = state) do
    {:stop, :normal, finish(state, :stopped, :discard)}
  end

  # Another node's agent is gone (the node went down or disconnected): the trace ends,
  # and whoever watches this session sees why.
  defp message({:DOWN, ref, :process, _pid, reason}, %{worker_ref: ref} = state) do
    {:stop, {:shutdown, {:agent_down, reason}},
     finish(%{state | agent: :lost}, :stopped, :discard)}
  end

  # (a recorder's snapshot stopped by hand leaves its list)
  defp message({:DOWN, ref, :process, pid, _reason}, state) do
    case Recorder.snapshot_down(state, ref) do
      {:ok, state} -> {:noreply, state}
      :not_mine -> {:noreply, Subscribers.down(state, ref, pid)}
    end
  end

  defp message({:EXIT, _pid, reason}, state),
    do: {:stop, reason, finish(state, :stopped, :discard)}

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

  # What info/1 tells should this process be killed (KinoTrace.Client.stop/1 kills one
  # that does not answer in time): the trace as it is now, as ended. terminate/2 puts
  # the final one.
  defp keep_final(state) do
    KinoTrace.Client.Final.put(state.id, info(%{state | status: :stopped, rate: 0.0}))

    state
  end

  @impl true
  def terminate(_reason, state) do
    state = state |> finish(:stopped, :discard) |> release_agent()

    if state.setup_error == nil, do: KinoTrace.Client.Final.put(state.id, info(state))

    :ok
  end

  defp info(state), do: state |> Info.build(Setup.patterns(state)) |> Recorder.put_info(state)

  # Another node's trace: its agent's worker ends and this waits until that node is as
  # it was (stop/1 answers after this), or another trace of it goes on there.
  defp release_agent(%{agent: :running} = state),
    do: %{state | agent: Backend.release(state.backend)}

  defp release_agent(state), do: state

  # --- ending ---------------------------------------------------------------------------

  defp tracing?(%{backend: backend}), do: Backend.tracing?(backend)

  # Ends tracing. `:discard` (stop/1, the owner exits): the native session closes first,
  # so nothing more is admitted, and what is queued is freed natively (counted as
  # discarded, never decoded); then the OTP session is destroyed. `:deliver` (the limit
  # or the timeout): the OTP session is destroyed and what it queued before is delivered,
  # which is bounded by the queue's caps; the process lives on for events/2 and info/1.
  # Idempotent.
  defp finish(state, status, mode), do: Server.urgent(fn -> do_finish(state, status, mode) end)

  defp do_finish(state, status, mode) do
    if mode == :discard and state.backend, do: Backend.close(state.backend)
    end_tracing(state, status, mode)
  end

  defp end_tracing(state, status, mode) do
    if tracing?(state), do: do_end_tracing(state, status, mode), else: state
  end

  defp do_end_tracing(state, status, mode) do
    Safeguards.ending(state)
    if state.recorder, do: KinoTrace.Session.TelemetryTrigger.detach(state.recorder.config.on)
    backend = Backend.destroy(state.backend, Enum.map(Setup.patterns(state), &Pattern.mfa/1))
    state = Safeguards.stop_guard(%{state | backend: backend})
    # what was queued before is delivered; then the native session closes
    state =
      if mode == :deliver, do: state |> Drain.catch_up(:infinity) |> Recorder.ended(), else: state

    Backend.close(state.backend)
    if state.timer, do: Process.cancel_timer(state.timer)
    broadcast_status(%{state | status: status, rate: 0.0})
  end

  defp broadcast_status(state), do: Subscribers.broadcast(state, {:status, state.status})
  defp await_writer(state), do: tap(state, &KinoTrace.File.Writer.await_end(&1.files_writer))

  # A subscriber of kino_trace's own (a widget) registered as such before it subscribed,
  # but its birth may have been recorded before that (KinoTrace.Session.OwnEvents).
  defp forget_own(%{history: history} = state, pid) do
    if history != nil and pid in KinoTrace.Internal.pids(),
      do: %{state | history: History.reject(history, &OwnEvents.own_event?(&1, pid))},
      else: state
  end
end
