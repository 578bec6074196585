defmodule KinoTrace.Session.OpenCalls do
  @moduledoc false
  # The calls still open in each process, as a recorder's events show them
  # (KinoTrace.Session.Recorder): a trigger's snapshot adds those of the triggering
  # process that its ring overwrote, the calls that led to it. A call is pushed, its
  # return or exception pops it (and any left above it); a lost event forgets what was
  # open. Bounded: at most @depth calls per process (the outermost go first), @pids
  # processes and `max_bytes` in all (each event's size in memory); beyond the last two,
  # every process's open calls are forgotten.

  alias KinoTrace.History

  @depth 32
  @pids 1_000

  defstruct max_bytes: 0, bytes: 0, stacks: %{}

  @typedoc "pid => its open calls with their bytes, innermost first; their bytes in all."
  @type t :: %__MODULE__{
          max_bytes: non_neg_integer(),
          bytes: non_neg_integer(),
          stacks: %{pid() => [{Kino.Trace.Event.t(), non_neg_integer()}]}
        }

  @doc "No open call, within `max_bytes`."
  @spec new(non_neg_integer()) :: t()
  def new(max_bytes), do: %__MODULE__{max_bytes: max_bytes}

  @doc "The open calls of `pid`, outermost first."
  @spec of(t(), pid()) :: [Kino.Trace.Event.t()]
  def of(%__MODULE__{stacks: stacks}, pid),
    do: for({event, _bytes} <- Enum.reverse(Map.get(stacks, pid, [])), do: event)

  @doc "Their bytes in all."
  @spec bytes(t()) :: non_neg_integer()
  def bytes(%__MODULE__{bytes: bytes}), do: bytes

  @doc "After `event`: a call pushed, a return or exception popping its call."
  @spec track(t(), Kino.Trace.Event.t()) :: t()
  def track(open, %{kind: :call, pid: pid} = event) do
    open =
      if map_size(open.stacks) >= @pids and not Map.has_key?(open.stacks, pid),
        do: forget(open),
        else: open

    old = Map.get(open.stacks, pid, [])
    {kept, gone} = if event.lost, do: {[], old}, else: Enum.split(old, @depth - 1)
    bytes = History.bytes_of(event)
    total = open.bytes + bytes - sum_bytes(gone)

    if total > open.max_bytes,
      do: forget(open),
      else: %{open | stacks: Map.put(open.stacks, pid, [{event, bytes} | kept]), bytes: total}
  end

  def track(open, %{kind: kind, pid: pid, call_id: call_id}) when kind in [:return, :exception] do
    with %{^pid => stack} <- open.stacks,
         {inner, [{%{id: ^call_id}, _} = call | outer]} <-
           Enum.split_while(stack, fn {e, _} -> e.id != call_id end) do
      stacks =
        if outer == [], do: Map.delete(open.stacks, pid), else: Map.put(open.stacks, pid, outer)

      %{open | stacks: stacks, bytes: open.bytes - sum_bytes([call | inner])}
    else
      _ -> open
    end
  end

  def track(open, _event), do: open

  defp forget(open), do: %{open | stacks: %{}, bytes: 0}

  defp sum_bytes(entries), do: Enum.reduce(entries, 0, fn {_event, bytes}, sum -> sum + bytes end)
end
