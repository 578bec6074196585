defmodule KinoTrace.Remote.Recording do
  @moduledoc false
  # A recorder of several nodes (`Kino.Trace.record/2` with `nodes:`): what its
  # `KinoTrace.Remote.Coordinator` does besides a trace's work. Each node's session keeps
  # that node's ring (another node's is kept there by its agent's worker, fetched only
  # for a snapshot: `KinoTrace.Session.Recorder.ring_events/1`); a snapshot merges the
  # rings by time into one trace value the coordinator owns, kept with
  # `KinoTrace.Session.Recorder`'s snapshots (its state's `recorder` field).
  #
  # Triggers run where each ring is: this node's session runs them on its events, and
  # another node's agent's worker on that node's (`kino_trace_agent_worker`, with
  # `:kino_trace_trigger`, the one definition of when an event fires one), which keeps
  # the snapshots they take there, bounded there, until `snapshots/1` fetches them: each
  # becomes a trace value of that node's session here.
  #
  # Works on the coordinator's state: its `nodes`, `plan` and `recorder` fields.

  alias KinoTrace.Remote
  alias KinoTrace.Remote.{Merge, Nodes}
  alias KinoTrace.Session.Recorder

  @doc """
  A snapshot now: every node's ring, merged by time (each node's events in their order,
  the sort is stable) and numbered anew. Returns as `Recorder.snapshot_of/3` does.
  """
  @spec snapshot(map()) :: {{pid(), pos_integer()} | {:error, term()}, map()}
  def snapshot(%{recorder: nil} = state), do: {{:error, :not_a_recorder}, state}

  def snapshot(state) do
    {replies, state} = Nodes.on_nodes(state, :ring)

    {events, _numbering} =
      for({_node, {events, %{}}} <- replies, do: events)
      |> Enum.concat()
      |> Enum.sort_by(& &1.time)
      |> Remote.renumber({1, %{}})

    Recorder.snapshot_of(state, events, Merge.info(state))
  end

  @doc """
  The snapshots, newest first: those taken with `snapshot/1` (this process's) and those
  the triggers took on each node (its session's, fetched from that node now). Returns
  them (as `Recorder.snapshots/1` does) and the state.
  """
  @spec snapshots(map()) :: {[map()], map()}
  def snapshots(%{recorder: nil} = state), do: {[], state}

  def snapshots(state) do
    {own, state} = Recorder.snapshots(state)

    {replies, state} =
      if state.plan.record.on == [], do: {[], state}, else: Nodes.on_nodes(state, :snapshots)

    triggered = for {_node, list} <- replies, is_list(list), snapshot <- list, do: snapshot
    {Enum.sort_by(own ++ triggered, & &1.taken_at, :desc), state}
  end

  @doc """
  The trace's info (`Merge.info/1`); a recorder's has `:recorder`: its nodes' rings
  summed (each node's own under `:nodes`) and its snapshots' figures.
  """
  @spec info(map()) :: map()
  def info(%{recorder: nil} = state), do: Merge.info(state)

  def info(%{recorder: rec, plan: %{record: config}} = state) do
    info = Merge.info(state)
    rings = for {_node, %{recorder: ring}} <- info.nodes, do: ring
    sum = fn key -> rings |> Enum.map(&Map.get(&1, key, 0)) |> Enum.sum() end

    figures =
      [:kept, :kept_bytes, :memory, :overwritten, :own, :open_calls_bytes]
      |> Map.new(&{&1, sum.(&1)})
      |> Map.merge(%{
        events: config.events,
        bytes: config.bytes,
        triggers: Enum.map(config.on, &Recorder.trigger_text/1),
        fired: sum_fired(rings),
        recording_after: Enum.any?(rings, &Map.get(&1, :recording_after, false)),
        after: config.after,
        snapshots: length(rec.snapshots),
        snapshot_bytes: rec.snapshot_bytes,
        snapshots_taken: rec.taken,
        snapshots_dropped: rec.dropped,
        snapshots_failed: rec.failed
      })

    Map.put(info, :recorder, figures)
  end

  defp sum_fired(rings) do
    for ring <- rings, {trigger, n} <- Map.get(ring, :fired, %{}), reduce: %{} do
      sum -> Map.update(sum, trigger, n, &(&1 + n))
    end
  end
end
