defmodule KinoTrace.Latency.Kept do
  @moduledoc false
  # What a trace keeps since its start as its events are decoded, for the functions that
  # ask a running trace (KinoTrace.Session and KinoTrace.Remote.Coordinator keep one each):
  # its latency distributions (`latency: true`, KinoTrace.Latency) and its slow calls
  # (`slowest:`, `slower_than:`, KinoTrace.Latency.SlowCalls, their events from the trace's
  # history). `nil` when the trace keeps neither.

  alias KinoTrace.History
  alias KinoTrace.Latency
  alias KinoTrace.Latency.SlowCalls

  defstruct [:latency, :slow]

  @type t :: %__MODULE__{latency: Latency.t() | nil, slow: SlowCalls.t() | nil} | nil

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
    slow = if SlowCalls.wanted?(options), do: SlowCalls.new(options)
    if latency || slow, do: %__MODULE__{latency: latency, slow: slow}
  end

  @doc "Adds a batch of events (oldest first), already pushed into `history`."
  @spec add(t(), [Kino.Trace.Event.t()], History.t()) :: t()
  def add(nil, _events, _history), do: nil

  def add(%__MODULE__{latency: latency, slow: slow}, events, history) do
    %__MODULE__{
      latency: latency && Latency.add(latency, events),
      slow: slow && SlowCalls.add(slow, events, &History.call_events(history, &1, &2))
    }
  end

  @doc "The latency distributions (`KinoTrace.Latency`), or `nil`."
  @spec latency(t()) :: Latency.t() | nil
  def latency(kept), do: kept && kept.latency

  @doc "The slow calls (`KinoTrace.Latency.SlowCalls.report/1`), or `nil`."
  @spec slow_calls(t()) :: SlowCalls.report() | nil
  def slow_calls(kept), do: kept && kept.slow && SlowCalls.report(kept.slow)

  @doc "How many open calls the slow calls keep, or `nil`."
  @spec open_calls(t()) :: non_neg_integer() | nil
  def open_calls(kept), do: kept && kept.slow && SlowCalls.open_calls(kept.slow)
end
