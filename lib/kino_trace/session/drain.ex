defmodule KinoTrace.Session.Drain do
  @moduledoc false
  # Draining a session's queue: when (on the tracer's wake-up, paced by
  # KinoTrace.Session.DrainPacing so a steady stream is drained about once a millisecond rather
  # than event by event), how much at a time (batches of @drain_batch, yielding to the
  # mailbox every @max_per_wakeup), what a request may wait for (what was queued when it
  # came, capped), backpressure (nothing drained while a subscriber is backlogged:
  # the queue fills and the native side drops and counts), and the recheck: a native
  # drain that put the queue to sleep (`:recheck`, see `t:KinoTrace.Tracer.more/0`) is
  # followed by one more drain a moment later, for an event whose wake-up was missed
  # (the producer's path has no fence: c_src/core/session_core.hpp, "Wake-up"); the
  # paced drain's timer serves for it, and a recheck of a queue already asleep arms
  # nothing. Drained events come decoded from the backend and go to its
  # subscribers, its history, what it keeps since the start (KinoTrace.Latency.Kept: latency
  # distributions, slow calls) and the stack guard's loop check.
  #
  # Works on the session's state: its `backend`, `history`, `kept`, `pacing`
  # and `drain_due` fields.

  alias KinoTrace.Server.Delivery

  alias KinoTrace.{Backend, History}
  alias KinoTrace.Session.{DrainPacing, OwnEvents, Recorder, Safeguards, Subscribers}

  alias KinoTrace.Latency.Kept

  # Events drained, decoded and sent to subscribers at once. Small batches keep what the
  # session holds while decoding within its young heap: decoding 2 000 events at once
  # cost about 4 times as much per event as 100-250 at a time (bench/consumer.exs), most of it
  # garbage collection.
  @drain_batch Delivery.batch_events()
  # How long after a drain that put the native queue to sleep the recheck comes: far
  # longer than a producer's store takes to become visible, short enough that a missed
  # wake-up delays its event about as much as the pacing does.
  @recheck_ms 1
  # Events drained before the mailbox is looked at again: what a request may wait for.
  @max_per_wakeup 2_000
  # How long a request on this node's fallback tracer waits for the VM to deliver the
  # trace messages made before it (see trace_delivered/0).
  @delivered_ms 2_000

  # At most this many queued events are decoded to answer one request (events/2): under
  # a flood the queue never empties, and a request must not wait for it.
  @max_sync_drain KinoTrace.Server.max_sync_drain()

  @doc "Whatever a request on the trace's events (events/2) waits for: at most #{@max_sync_drain} events."
  @spec for_request(map()) :: map()
  def for_request(state), do: catch_up(state, @max_sync_drain)

  @doc """
  Before info/1 answers: this node's fallback tracer first takes in its mailbox (its
  counters then count every event traced before the request, as the native tracer's do).
  """
  @spec take_in(map()) :: map()
  def take_in(state) do
    if Backend.tracing?(state.backend),
      do: state |> first_batch(@drain_batch) |> elem(0),
      else: state
  end

  @doc "A paced drain is due (its timer ran)."
  @spec paced(map()) :: map()
  def paced(state), do: drain(%{state | drain_due: false})

  # A wake-up soon after a drain emptied the queue drains a moment later
  # (KinoTrace.Session.DrainPacing): what comes in meanwhile is drained with it.
  @spec ready(map()) :: map()
  def ready(%{drain_due: true} = state), do: state

  def ready(state) do
    case DrainPacing.ready(state.pacing, DrainPacing.now()) do
      :now ->
        drain(state)

      {:after, ms} ->
        paced_after(state, ms)
    end
  end

  # A paced drain in `ms` (one at a time: one that is due already serves).
  defp paced_after(%{drain_due: true} = state, _ms), do: state

  defp paced_after(state, ms) do
    Process.send_after(self(), :paced_drain, ms)
    %{state | drain_due: true}
  end

  # Drains up to @max_per_wakeup events, then yields to the mailbox (a :drain message
  # continues). While a subscriber is backlogged the queue is left alone: it fills and
  # the native side drops and counts, so memory stays bounded.
  @spec drain(map()) :: map()
  def drain(%{backend: nil} = state), do: state

  def drain(state) do
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
  @spec catch_up(map(), non_neg_integer() | :infinity) :: map()
  def catch_up(%{backend: nil} = state, _cap), do: state

  # Someone is waiting for this bounded work, so it runs at high priority: processes
  # flooding the trace must not stretch it out. Background draining stays normal.
  def catch_up(state, cap) do
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
  defp first_batch(state, cap) when cap > 0 do
    if Backend.in_flight?(state.backend) do
      trace_delivered()
      {events, _more, state} = drain_batch(state, min(@drain_batch, cap))
      {deliver_events(state, events), length(events)}
    else
      {state, 0}
    end
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
      {[], more, state} ->
        {state, more}

      {events, true, state} ->
        state |> deliver_events(events) |> drain_deliver(budget - length(events))

      {events, false, state} ->
        {deliver_events(state, events), false}
    end
  end

  # Every backend drains decoded events (this node's native tracer's decoded natively).
  defp drain_batch(state, max) do
    {events, more, backend} = Backend.drain(state.backend, max)
    recheck(events, more, %{state | backend: backend})
  end

  # The native queue just went to sleep: drain once more in a moment (see the top).
  defp recheck(events, :recheck, state), do: {events, false, paced_after(state, @recheck_ms)}
  defp recheck(events, more, state), do: {events, more, state}

  defp deliver_events(state, all) do
    events = OwnEvents.drop(all)
    Subscribers.broadcast(state, {:events, events})
    history = History.push(state.history, events)
    state = %{state | history: history, kept: Kept.add(state.kept, events, history)}
    # (a recorder: its triggers and after-window; own events left out are counted)
    state =
      Recorder.delivered(
        state,
        events,
        if(state.recorder, do: length(all) - length(events), else: 0)
      )

    Safeguards.guard_loops(state, events)
  end
end
