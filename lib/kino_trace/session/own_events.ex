defmodule KinoTrace.Session.OwnEvents do
  @moduledoc false
  # The one place a session's decoded events of kino_trace's own processes are left out
  # (KinoTrace.Internal keeps those processes out of every trace; this catches what
  # they did before they could be kept out).
  #
  # A process traced from its birth (`processes(:new)`, `messages(:new)`, `:all`) makes
  # its first events (`spawned`, `getting_linked`) before its code runs, so before it can
  # register as kino_trace's own: the widget's process, its lifeline, a worker of the
  # front (issue 39 item 4). So, on both tracers:
  #
  #   * `drop/1`, on every drained batch: an event of a registered process is left out,
  #     and so is the birth (`spawned`, `getting_linked`) of a process whose parent (the
  #     linker) is one: what kino_trace's own processes start is its own;
  #   * `own_event?/2` names the events of one process, for the history a session
  #     purges when an own process subscribes (it registered before, but its birth
  #     may have been drained before it registered: the widget's process is started by
  #     Kino's supervisor, not by kino_trace).
  #
  # Only process events are looked at (calls and messages of a process come after it
  # registered, and it is untraced then); a batch with none costs one pass over its kinds.

  alias Kino.Trace.Event

  @process_kinds [
    :spawn,
    :spawned,
    :link,
    :unlink,
    :getting_linked,
    :getting_unlinked,
    :exit,
    :register,
    :unregister
  ]
  @birth [:spawned, :getting_linked]

  @doc "The events of `events` that are not of kino_trace's own processes."
  @spec drop([Event.t()]) :: [Event.t()]
  def drop(events) do
    if Enum.any?(events, &(&1.kind in @process_kinds)) do
      own = MapSet.new(KinoTrace.Internal.pids())
      if MapSet.size(own) == 0, do: events, else: Enum.reject(events, &own?(&1, own))
    else
      events
    end
  end

  @doc "Whether `event` is one of `pid`'s own process events (its birth included)."
  @spec own_event?(Event.t(), pid()) :: boolean()
  def own_event?(%Event{kind: kind, pid: pid}, pid) when kind in @process_kinds, do: true
  def own_event?(%Event{}, _pid), do: false

  defp own?(%Event{kind: kind, pid: pid, peer: peer}, own) when kind in @process_kinds do
    MapSet.member?(own, pid) or (kind in @birth and MapSet.member?(own, peer))
  end

  defp own?(%Event{}, _own), do: false
end
