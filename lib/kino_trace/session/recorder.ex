defmodule KinoTrace.Session.Recorder do
  @moduledoc false
  # A recorder's part of a session (`Kino.Trace.record/2`): the session's history is its
  # ring (`KinoTrace.History` bounded by `events:` and `bytes:`, counting what it
  # overwrites), kept where every backend's events are decoded, so the native tracer,
  # the fallback and the same code hold it. This part adds:
  #
  #   * snapshots: the ring's events frozen (copied) into a `KinoTrace.Replay` owned by the
  #     session, so a snapshot is a trace value every front end takes and ends with the
  #     recorder; at most `snapshots:` of them and `snapshot_bytes:` in all, the oldest
  #     ended first (counted in `dropped`);
  #   * triggers (`KinoTrace.Plan.Record`): checked on every delivered batch; the first
  #     event that fires one freezes the ring up to it, then the `after:` window (events
  #     or ms, at most the ring's bounds; a window of events ends at the latest
  #     @events_window_ms after it opened) is added, then the snapshot is made. A trigger
  #     that fires while a window is open counts in `fired` and takes no other snapshot;
  #   * an exception fires once, where it is raised: as it goes up through more traced
  #     calls of its process (their exception events) it fires nothing again;
  #   * the open calls of each process (with triggers, :kino_trace_open_calls, the one
  #     definition of them, which another node's agent runs too): a trigger's snapshot
  #     has the calls that led to it in its process even when the ring overwrote them
  #     (within a quarter of the ring's bytes);
  #   * counters for `Kino.Trace.info/1`'s `:recorder`: what the ring keeps and overwrote,
  #     own events left out (`KinoTrace.Session.OwnEvents`), so that
  #     accepted == kept + overwritten + own + queued + discarded.
  #
  # Works on the session's state: its `recorder` and `history` fields.

  alias KinoTrace.Plan.Record
  alias KinoTrace.History
  alias KinoTrace.Session.{Info, Setup}

  defstruct [
    :config,
    # the config's triggers, compiled (:kino_trace_trigger, which runs them)
    triggers: [],
    # newest first: %{pid, id, bytes, events, trigger, taken_at, trigger_us}
    snapshots: [],
    snapshot_bytes: 0,
    dropped: 0,
    # trigger name => times fired (each of :kino_trace_trigger.names/0, set by new/1)
    fired: %{},
    taken: 0,
    # snapshots that could not be made (their replay did not start)
    failed: 0,
    own: 0,
    # an open after-window: %{frozen, tail (newest first), left, bytes, trigger, timer}
    pending: nil,
    # each process's open calls (:kino_trace_open_calls, keyed by event id)
    open_calls: nil,
    # processes whose last event was an exception: the same exception going up through
    # more traced calls fires no trigger again (:kino_trace_trigger.raising/2)
    raising: %{}
  ]

  # an after-window of n events ends at the latest this long after its trigger, with the
  # events it has: after a crash that ends the triggering process, or on a trace that
  # goes quiet, they may never come (the docs of Kino.Trace.record/2 and the guide say 5 s)
  @events_window_ms Record.events_window_ms()

  @type t :: %__MODULE__{}

  @doc "A recorder for the plan's `:record` (`KinoTrace.Plan.Record.t/0`), or nil."
  @spec new(Record.t() | nil) :: t() | nil
  def new(nil), do: nil

  def new(config) do
    KinoTrace.Session.TelemetryTrigger.attach(config.on)

    %__MODULE__{
      config: config,
      triggers: :kino_trace_trigger.compile(config.on),
      fired: Map.new(:kino_trace_trigger.names(), &{&1, 0}),
      # a quarter of the ring's bytes at most
      open_calls: :kino_trace_open_calls.new(div(config.bytes, 4))
    }
  end

  @doc """
  A `:telemetry` event (`KinoTrace.Session.TelemetryTrigger`) emitted by `pid` at `time`
  (system microseconds), the queued events delivered first: the snapshot a trace
  event's trigger takes (the ring, `pid`'s open calls, the after-window), or a count
  when a window is open. Nothing once tracing ended.
  """
  @spec telemetry(map(), pid(), integer()) :: map()
  def telemetry(%{status: status, recorder: %{} = rec} = state, pid, time)
      when status in [:running, :paused] do
    rec = %{rec | fired: Map.update!(rec.fired, :telemetry, &(&1 + 1))}
    state = %{state | recorder: rec}

    if rec.pending,
      do: state,
      else:
        open(state, freeze(state.history, rec, 0, pid), :telemetry, %{
          id: nil,
          pid: pid,
          time: time
        })
  end

  def telemetry(state, _pid, _time), do: state

  @doc "The ring a recorder's session keeps as its history."
  @spec ring(Record.t()) :: History.t()
  def ring(config), do: History.new(config.events, config.bytes)

  @doc """
  After a batch was delivered and pushed into the ring (`own`: how many of kino_trace's
  own events were left out of it): the after-window, the open calls and the triggers.
  """
  @spec delivered(map(), [Kino.Trace.Event.t()], non_neg_integer()) :: map()
  def delivered(%{recorder: nil} = state, _events, _own), do: state

  def delivered(%{recorder: rec} = state, events, own) do
    scan(%{state | recorder: %{rec | own: rec.own + own}}, events, length(events))
  end

  # `left`: how many events of the batch are at the ring's newest end from here on.
  defp scan(state, [], _left), do: state

  defp scan(%{recorder: %{pending: pending}} = state, events, _left) when pending != nil do
    {state, rest} = feed(state, events)
    scan(state, rest, length(rest))
  end

  defp scan(%{recorder: %{config: %{on: []}}} = state, _events, _left), do: state

  defp scan(%{recorder: rec} = state, [event | rest], left) do
    case fires(rec, event) do
      nil ->
        scan(%{state | recorder: track(rec, event)}, rest, left - 1)

      trigger ->
        rec = %{rec | fired: Map.update!(rec.fired, trigger, &(&1 + 1))}
        frozen = freeze(state.history, rec, left - 1, event.pid)
        state = open(%{state | recorder: track(rec, event)}, frozen, trigger, event)
        scan(state, rest, left - 1)
    end
  end

  # The ring's events up to the trigger (the `after` newest are the batch's, after it),
  # with its process's open calls the ring no longer holds, oldest first.
  defp freeze(history, rec, after_count, pid) do
    events = History.take(history, History.size(history))
    events = Enum.take(events, length(events) - after_count)
    first = if events == [], do: :none, else: hd(events).id
    :kino_trace_open_calls.overwritten(rec.open_calls, pid, first) ++ events
  end

  defp fires(rec, event), do: :kino_trace_trigger.fires(rec.triggers, event, rec.raising)

  # (the open calls: :kino_trace_open_calls, each kept as its event, keyed by its id)
  defp track(rec, event) do
    rec = %{rec | raising: :kino_trace_trigger.raising(rec.raising, event)}
    %{rec | open_calls: :kino_trace_open_calls.track(rec.open_calls, event, event.id, event)}
  end

  defp open(%{recorder: rec} = state, frozen, trigger, event) do
    window = %{
      frozen: frozen,
      tail: [],
      bytes: 0,
      trigger: trigger,
      event: event,
      timer: nil,
      left: nil
    }

    case rec.config.after do
      {_, 0} ->
        finish(%{state | recorder: %{rec | pending: window}})

      # (n events, or what came within @events_window_ms: the events may never come)
      {:events, n} ->
        %{
          state
          | recorder: %{rec | pending: %{window | left: n, timer: timer(@events_window_ms)}}
        }

      {:ms, ms} ->
        %{
          state
          | recorder: %{rec | pending: %{window | left: rec.config.events, timer: timer(ms)}}
        }
    end
  end

  defp timer(ms) do
    ref = make_ref()
    {Process.send_after(self(), {:kino_trace_record_after, ref}, ms), ref}
  end

  # The window's events, up to its count and the ring's bytes; the rest of the batch is
  # scanned for triggers again.
  defp feed(%{recorder: %{pending: window} = rec} = state, events) do
    {taken, rest} = Enum.split(events, window.left)
    bytes = window.bytes + Enum.reduce(taken, 0, &(History.bytes_of(&1) + &2))
    rec = Enum.reduce(taken, rec, &(&2 |> count_fired(&1) |> track(&1)))

    window = %{
      window
      | tail: Enum.reverse(taken, window.tail),
        left: window.left - length(taken),
        bytes: bytes
    }

    state = %{state | recorder: %{rec | pending: window}}

    if window.left == 0 or bytes >= rec.config.bytes,
      do: {finish(state), rest},
      else: {state, rest}
  end

  # (a trigger inside a window counts, and takes no snapshot of its own)
  defp count_fired(%{config: %{on: []}} = rec, _event), do: rec

  defp count_fired(rec, event) do
    case fires(rec, event) do
      nil -> rec
      trigger -> %{rec | fired: Map.update!(rec.fired, trigger, &(&1 + 1))}
    end
  end

  @doc """
  Tracing ended at the trace's `:limit` or `:timeout` (its last events delivered): an
  open after-window ends with what it has, so its snapshot is made.
  """
  @spec ended(map()) :: map()
  def ended(%{recorder: %{pending: window}} = state) when window != nil, do: finish(state)
  def ended(state), do: state

  @doc """
  The after-window's time ended (its timer's message: its `ms`, or the bound of a window
  of events, @events_window_ms). The session delivers what is queued first.
  """
  @spec window_ended(map(), reference()) :: map()
  def window_ended(%{recorder: %{pending: %{timer: {_, ref}}}} = state, ref), do: finish(state)
  def window_ended(state, _ref), do: state

  # Makes the pending snapshot.
  defp finish(%{recorder: %{pending: window} = rec} = state) do
    with {timer, _ref} <- window.timer, do: Process.cancel_timer(timer)
    state = %{state | recorder: %{rec | pending: nil}}
    events = window.frozen ++ Enum.reverse(window.tail)

    take(state, events, %{
      trigger: window.trigger,
      event: window.event.id,
      pid: window.event.pid,
      trigger_time: window.event.time
    })
  end

  @doc """
  Takes a snapshot now (`Kino.Trace.snapshot/1`): the ring's events. Returns `{{pid,
  id}, state}`, or `{{:error, reason}, state}`.
  """
  @spec snapshot(map()) :: {{pid(), pos_integer()} | {:error, term()}, map()}
  def snapshot(%{recorder: nil} = state), do: {{:error, :not_a_recorder}, state}

  def snapshot(state) do
    events = History.take(state.history, History.size(state.history))
    state = take(state, events, %{trigger: :manual, event: nil, pid: nil, trigger_time: nil})
    %{session: pid, id: id} = hd(state.recorder.snapshots)
    {{pid, id}, state}
  end

  @doc """
  The ring's events, oldest first, for a snapshot of a recorder of several nodes
  (`KinoTrace.Remote.Coordinator`): `{events, figures}`. Another node's ring is kept
  there by its agent's worker, fetched now and decoded from the decoder's first state
  (each snapshot decodes its ring whole).
  """
  @spec ring_events(map()) :: {[Kino.Trace.Event.t()], map()} | {:error, :not_a_recorder}
  def ring_events(%{recorder: nil}), do: {:error, :not_a_recorder}

  def ring_events(%{backend: %KinoTrace.Backend.Remote{} = backend}),
    do: KinoTrace.Backend.ring(backend)

  def ring_events(%{history: history}),
    do: {History.take(history, History.size(history)), ring_figures(history)}

  @doc """
  Takes in the snapshots that the triggers of a recorder of another node took there
  (its agent's worker keeps them until then: `KinoTrace.Backend.take_snapshots/1`),
  each made a trace value as this node's are.
  """
  @spec fetch(map()) :: map()
  def fetch(%{recorder: %__MODULE__{}, backend: %KinoTrace.Backend.Remote{} = backend} = state) do
    backend
    |> KinoTrace.Backend.take_snapshots()
    |> Enum.reduce(state, fn {meta, events}, state ->
      event = Enum.find(events, &(&1.pid == meta.pid and &1.monotonic == meta.time))

      take(state, events, %{
        trigger: meta.trigger,
        event: event && event.id,
        pid: meta.pid,
        trigger_time: event && event.time,
        taken_at: meta.taken_at
      })
    end)
  end

  def fetch(state), do: state

  @doc """
  Takes a snapshot now of `events` (oldest first), a trace whose `info/1` is `info` with
  the snapshot's figures: a recorder of several nodes (`KinoTrace.Remote.Coordinator`,
  whose state has a `recorder` field too) gives its nodes' rings merged. Returns as
  `snapshot/1` does.
  """
  @spec snapshot_of(map(), [Kino.Trace.Event.t()], map()) ::
          {{pid(), pos_integer()} | {:error, term()}, map()}
  def snapshot_of(%{recorder: nil} = state, _events, _info),
    do: {{:error, :not_a_recorder}, state}

  def snapshot_of(state, events, info) do
    trigger = %{trigger: :manual, event: nil, pid: nil, trigger_time: nil}
    taken = state.recorder.taken
    state = put_snapshot(state, events, trigger, info)

    case state.recorder do
      %{taken: ^taken} -> {{:error, :failed}, state}
      %{snapshots: [%{session: pid, id: id} | _]} -> {{pid, id}, state}
    end
  end

  defp take(state, events, trigger),
    do: put_snapshot(state, events, trigger, Info.build(state, Setup.patterns(state)))

  defp put_snapshot(%{recorder: rec} = state, events, trigger, info) do
    bytes = Enum.reduce(events, 0, &(History.bytes_of(&1) + &2))
    # (when its trigger does not say when it was taken, elsewhere)
    snapshot =
      %{taken_at: System.os_time(:microsecond)}
      |> Map.merge(trigger)
      |> Map.merge(%{events: length(events), bytes: bytes})

    info = Map.put(info, :snapshot, snapshot)
    # (its events are given once it runs, not as the supervisor's start argument)
    with {:ok, pid, id} <- KinoTrace.Replay.start(self(), {:events, info, :put}),
         {:ok, :ok} <- KinoTrace.Client.request(pid, {:put_events, events}, :infinity) do
      # (a snapshot stopped by hand leaves the list: snapshot_down/2)
      # (`session`: its server; `pid` stays the triggering process)
      entry = Map.merge(snapshot, %{session: pid, id: id, ref: Process.monitor(pid)})

      rec = %{
        rec
        | snapshots: [entry | rec.snapshots],
          snapshot_bytes: rec.snapshot_bytes + bytes,
          taken: rec.taken + 1
      }

      %{state | recorder: evict(rec)}
    else
      # (the replay could not start, or ended at once: the snapshot is lost, and counted)
      _ -> %{state | recorder: %{rec | failed: rec.failed + 1}}
    end
  end

  @doc """
  A process the session monitors went down: when it is one of the snapshots (stopped by
  hand), it leaves the list. `:not_mine` for any other.
  """
  @spec snapshot_down(map(), reference()) :: {:ok, map()} | :not_mine
  def snapshot_down(%{recorder: %__MODULE__{snapshots: snapshots} = rec} = state, ref) do
    case Enum.split_with(snapshots, &(&1.ref == ref)) do
      {[gone], kept} ->
        {:ok,
         %{
           state
           | recorder: %{rec | snapshots: kept, snapshot_bytes: rec.snapshot_bytes - gone.bytes}
         }}

      _ ->
        :not_mine
    end
  end

  def snapshot_down(_state, _ref), do: :not_mine

  # The oldest snapshots go while over the count or the bytes (the newest always stays).
  defp evict(%{snapshots: snapshots, config: config} = rec) when length(snapshots) > 1 do
    if length(snapshots) > config.snapshots or rec.snapshot_bytes > config.snapshot_bytes do
      oldest = List.last(snapshots)
      Process.demonitor(oldest.ref, [:flush])
      KinoTrace.Client.stop(oldest.session)

      evict(%{
        rec
        | snapshots: List.delete_at(snapshots, -1),
          snapshot_bytes: rec.snapshot_bytes - oldest.bytes,
          dropped: rec.dropped + 1
      })
    else
      rec
    end
  end

  defp evict(rec), do: rec

  @doc """
  The snapshots kept, newest first (`%{session, id, ...figures}` each, `pid` the
  triggering process), and the state without
  those that have ended (stopped by hand: their monitor's message may still be on its way).
  """
  @spec snapshots(map()) :: {[map()], map()}
  def snapshots(%{recorder: nil} = state), do: {[], state}

  def snapshots(%{recorder: rec} = state) do
    state =
      Enum.reduce(rec.snapshots, state, fn snapshot, state ->
        if Process.alive?(snapshot.session) do
          state
        else
          Process.demonitor(snapshot.ref, [:flush])
          {:ok, state} = snapshot_down(state, snapshot.ref)
          state
        end
      end)

    {state.recorder.snapshots, state}
  end

  @doc "`info` with the recorder's figures under `:recorder` (nothing for another trace)."
  @spec put_info(map(), map()) :: map()
  def put_info(info, %{recorder: nil}), do: info

  def put_info(info, %{recorder: rec} = state) do
    # (another node's ring is kept there: its figures came with its counters)
    {ring, info} = Map.pop(info, :ring)

    Map.put(
      info,
      :recorder,
      %{
        events: rec.config.events,
        bytes: rec.config.bytes,
        open_calls_bytes: :kino_trace_open_calls.bytes(rec.open_calls),
        own: rec.own,
        triggers: Enum.map(rec.config.on, &trigger_text/1),
        after: rec.config.after,
        fired: rec.fired,
        recording_after: rec.pending != nil,
        snapshots: length(rec.snapshots),
        snapshot_bytes: rec.snapshot_bytes,
        snapshots_taken: rec.taken,
        snapshots_dropped: rec.dropped,
        snapshots_failed: rec.failed
      }
      |> Map.merge(ring || ring_figures(state.history))
    )
  end

  defp ring_figures(history) do
    %{
      kept: History.size(history),
      kept_bytes: History.bytes(history),
      memory: History.memory(history),
      overwritten: History.overwritten(history)
    }
  end

  @doc "A trigger as `info/1` shows it: its text for a pattern's."
  @spec trigger_text(Record.trigger()) :: term()
  def trigger_text({:match, {text, _mfa, _spec}}), do: {:match, text}
  def trigger_text({:message, {text, _spec}}), do: {:message, text}
  def trigger_text(trigger), do: trigger
end
