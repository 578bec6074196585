defmodule KinoTrace.Latency.Kept do
  @moduledoc false
  # What a trace keeps since its start as its events are decoded, for the functions that
  # ask a running trace (KinoTrace.Session and KinoTrace.Remote.Coordinator keep one each):
  # its latency distributions (`latency: true`, KinoTrace.Latency) and its slow calls
  # (`slowest:`, `slower_than:`, KinoTrace.Latency.SlowCalls, their events from the trace's
  # history). `nil` when the trace keeps neither. A stats session's trace of durations
  # (KinoTrace.Stats.Options.latency_plan/2) also keeps them per function and process
  # (`latency_by_process: true` in its plan's options, set there, no option of a trace):
  # its widget's per-process drill-down.

  alias KinoTrace.History
  alias KinoTrace.Latency
  alias KinoTrace.Latency.SlowCalls

  defstruct [:latency, :processes, :slow]

  @type t ::
          %__MODULE__{
            latency: Latency.t() | nil,
            processes: Latency.t() | nil,
            slow: SlowCalls.t() | nil
          }
          | nil

  @doc """
  What a trace with these options keeps (`nil`: nothing).

      iex> KinoTrace.Latency.Kept.new(latency: false)
      nil
      iex> KinoTrace.Latency.Kept.new(latency: true) |> KinoTrace.Latency.Kept.slow_calls()
      nil
  """
  @spec new(keyword()) :: t()
  def new(options) do
    latency = if options[:latency], do: Latency.new()

    processes =
      if options[:latency] && options[:latency_by_process], do: Latency.new(by: :process)

    slow = if SlowCalls.wanted?(options), do: SlowCalls.new(options)

    if latency || slow,
      do: %__MODULE__{latency: latency, processes: processes, slow: slow}
  end

  @doc "Adds a batch of events (oldest first), already pushed into `history`."
  @spec add(t(), [Kino.Trace.Event.t()], History.t()) :: t()
  def add(nil, _events, _history), do: nil

  def add(%__MODULE__{latency: latency, processes: processes, slow: slow}, events, history) do
    %__MODULE__{
      latency: latency && Latency.add(latency, events),
      processes: processes && Latency.add(processes, events),
      slow: slow && SlowCalls.add(slow, events, &History.call_events(history, &1, &2))
    }
  end

  @doc "The latency distributions (`KinoTrace.Latency`), or `nil`."
  @spec latency(t()) :: Latency.t() | nil
  def latency(kept), do: kept && kept.latency

  @doc """
  The latency distributions per function and process (`KinoTrace.Latency`, `by:
  :process`), kept with `latency_by_process: true`, else `nil`.

      iex> kept = KinoTrace.Latency.Kept.new(latency: true, latency_by_process: true)
      iex> KinoTrace.Latency.Kept.latency_processes(kept).by
      :process
      iex> KinoTrace.Latency.Kept.new(latency: true) |> KinoTrace.Latency.Kept.latency_processes()
      nil
  """
  @spec latency_processes(t()) :: Latency.t() | nil
  def latency_processes(kept), do: kept && kept.processes

  @doc "The slow calls (`KinoTrace.Latency.SlowCalls.report/1`), or `nil`."
  @spec slow_calls(t()) :: SlowCalls.report() | nil
  def slow_calls(kept), do: kept && kept.slow && SlowCalls.report(kept.slow)

  @doc """
  How many slow calls it keeps per function (`KinoTrace.Latency.SlowCalls.counts/1`: a
  small map, where `slow_calls/1` holds every kept call whole), or `nil`.
  """
  @spec slow_counts(t()) :: %{mfa() => pos_integer()} | nil
  def slow_counts(kept), do: kept && kept.slow && SlowCalls.counts(SlowCalls.report(kept.slow))

  @doc "How many open calls the slow calls keep, or `nil`."
  @spec open_calls(t()) :: non_neg_integer() | nil
  def open_calls(kept), do: kept && kept.slow && SlowCalls.open_calls(kept.slow)
end
