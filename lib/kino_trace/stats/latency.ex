defmodule KinoTrace.Stats.Latency do
  @moduledoc false
  # Latency distributions per function from a trace's events: each `:return` and
  # `:exception` the call pairing rule (KinoTrace.Tracer.Decoder) paired with its call
  # carries the call's duration, which goes into the function's histogram
  # (KinoTrace.Stats.Histogram; exceptions into one of their own). Nothing is kept per
  # call: per function a count of calls and of their ends, so `unknown` (calls whose
  # end the events do not have: traced without returns, still running, their return
  # lost) is the difference, never a zero duration.
  #
  # A return whose call came before the first event (a window of a longer trace: its
  # call id is below the first event's id) still has its duration; it counts as a call
  # of the window too. At most @max_functions functions are kept; the events of others
  # are counted in `functions_left_out`.

  alias Kino.Trace.Event
  alias KinoTrace.Stats.Histogram

  @max_functions 2_000

  defstruct functions: %{}, since: nil, functions_left_out: 0, by: :function

  @type t :: %__MODULE__{}

  @typedoc "A distribution, in microseconds."
  @type distribution :: %{
          count: non_neg_integer(),
          min: float() | nil,
          p50: float() | nil,
          p90: float() | nil,
          p99: float() | nil,
          p999: float() | nil,
          max: float() | nil,
          histogram: [{float(), pos_integer()}]
        }

  @typedoc "A function's distributions: of its returns, its `:exceptions`, and its `:unknown` calls."
  @type report :: %{
          count: non_neg_integer(),
          min: float() | nil,
          p50: float() | nil,
          p90: float() | nil,
          p99: float() | nil,
          p999: float() | nil,
          max: float() | nil,
          histogram: [{float(), pos_integer()}],
          exceptions: distribution(),
          unknown: non_neg_integer()
        }

  @doc """
  An empty accumulator. Option `by:` `:function` (default: keyed by `{m, f, a}`) or
  `:process` (keyed by `{{m, f, a}, pid}`, the same bound on keys).
  """
  @spec new(keyword()) :: t()
  def new(opts \\ []) do
    by = Keyword.get(opts, :by, :function)
    if by not in [:function, :process], do: raise(ArgumentError, "by: is :function or :process, got: #{inspect(by)}")
    %__MODULE__{by: by}
  end

  @doc """
  Adds a batch of events (oldest first).

      iex> alias Kino.Trace.Event
      iex> events = [
      ...>   %Event{id: 1, kind: :call, module: M, function: :f, arity: 0},
      ...>   %Event{id: 2, kind: :return, module: M, function: :f, arity: 0, call_id: 1, duration: 5_000},
      ...>   %Event{id: 3, kind: :call, module: M, function: :f, arity: 0}
      ...> ]
      iex> %{{M, :f, 0} => f} = KinoTrace.Stats.Latency.new() |> KinoTrace.Stats.Latency.add(events) |> KinoTrace.Stats.Latency.report()
      iex> {f.count, f.p50, f.unknown, f.exceptions.count}
      {1, 5.0, 1, 0}
  """
  @spec add(t(), [Event.t()]) :: t()
  def add(acc, []), do: acc

  def add(%{since: nil} = acc, [%Event{id: id} | _] = events),
    do: add(%{acc | since: id || 1}, events)

  def add(acc, events), do: Enum.reduce(events, acc, &add_one/2)

  defp add_one(%Event{kind: :call} = e, acc) do
    case get(acc, key(acc, e)) do
      {mfa, {calls, ended, returns, exceptions}} ->
        put(acc, mfa, {calls + 1, ended, returns, exceptions})

      nil ->
        left_out(acc)
    end
  end

  defp add_one(%Event{kind: kind, call_id: id, duration: d} = e, acc)
       when kind in [:return, :exception] and is_integer(id) and is_integer(d) do
    # a call before the first event counts as a call of these events
    before = if id < acc.since, do: 1, else: 0

    case get(acc, key(acc, e)) do
      {mfa, {calls, ended, returns, exceptions}} when kind == :return ->
        put(acc, mfa, {calls + before, ended + 1, Histogram.record(returns, d), exceptions})

      {mfa, {calls, ended, returns, exceptions}} ->
        put(acc, mfa, {calls + before, ended + 1, returns, Histogram.record(exceptions, d)})

      nil ->
        left_out(acc)
    end
  end

  defp add_one(_event, acc), do: acc

  defp key(%{by: :function}, e), do: Event.mfa(e)
  defp key(%{by: :process}, e), do: {Event.mfa(e), e.pid}

  # A function's figures `{calls, ended, returns, exceptions}` (new ones for a function
  # not seen yet), or nil for a new one past @max_functions (its events are counted).
  defp get(%{functions: functions}, mfa) when is_map_key(functions, mfa),
    do: {mfa, :erlang.map_get(mfa, functions)}

  defp get(%{functions: functions}, mfa) do
    if map_size(functions) < @max_functions, do: {mfa, {0, 0, Histogram.new(), Histogram.new()}}
  end

  defp left_out(acc), do: %{acc | functions_left_out: acc.functions_left_out + 1}

  defp put(acc, mfa, figures), do: %{acc | functions: Map.put(acc.functions, mfa, figures)}

  @doc """
  The distributions of every function seen, in microseconds, keyed by `{m, f, a}` (by
  `{{m, f, a}, pid}` for an accumulator `by: :process`).
  """
  @spec report(t()) :: %{(mfa() | {mfa(), pid()}) => report()}
  def report(%__MODULE__{functions: functions}) do
    Map.new(functions, fn {mfa, {calls, ended, returns, exceptions}} ->
      {mfa,
       Map.merge(distribution(returns), %{
         exceptions: distribution(exceptions),
         unknown: max(calls - ended, 0)
       })}
    end)
  end

  @doc "A histogram's summary, in microseconds (its values in nanoseconds)."
  @spec distribution(Histogram.t()) :: distribution()
  def distribution(h) do
    %{
      count: Histogram.count(h),
      min: us(Histogram.min(h)),
      p50: us(Histogram.percentile(h, 50)),
      p90: us(Histogram.percentile(h, 90)),
      p99: us(Histogram.percentile(h, 99)),
      p999: us(Histogram.percentile(h, 99.9)),
      max: us(Histogram.max(h)),
      histogram: for({low, n} <- Histogram.to_list(h), do: {low / 1000, n})
    }
  end

  defp us(nil), do: nil
  defp us(ns), do: ns / 1000
end
