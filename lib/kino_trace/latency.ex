defmodule KinoTrace.Latency do
  @moduledoc false
  # Latency distributions per function from a trace's events: each `:return` and
  # `:exception` the call pairing rule (KinoTrace.Tracer.Decoder) paired with its call
  # carries the call's duration, which goes into the function's histogram
  # (KinoTrace.Latency.Histogram; exceptions into one of their own). Nothing is kept per
  # call: per function a count of calls and of their ends, so `unknown` (calls whose
  # end the events do not have: traced without returns, still running, their return
  # lost) is the difference, never a zero duration.
  #
  # A return whose call came before the first event (a window of a longer trace: its
  # call id is below the first event's id) still has its duration; it counts as a call
  # of the window too. At most @max_functions functions are kept; the events of others
  # are counted in `functions_left_out`.

  alias Kino.Trace.Event
  alias KinoTrace.Latency.Histogram

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
  @type report :: report([{float(), pos_integer()}], distribution())

  @typedoc """
  A report whose histogram is `bars` and whose exceptions are `exceptions`: `report/0`,
  and the widget's coarser form of it (`KinoTrace.Widget.StatsPayload.latency/0`). Its
  first fields are a distribution's.
  """
  @type report(bars, exceptions) :: %{
          count: non_neg_integer(),
          min: float() | nil,
          p50: float() | nil,
          p90: float() | nil,
          p99: float() | nil,
          p999: float() | nil,
          max: float() | nil,
          histogram: bars,
          exceptions: exceptions,
          unknown: non_neg_integer()
        }

  @doc "The most functions whose figures are kept (the others' events are counted)."
  @spec max_functions() :: pos_integer()
  def max_functions, do: @max_functions

  @doc """
  An empty accumulator. Option `by:` `:function` (default: keyed by `{m, f, a}`) or
  `:process` (keyed by `{{m, f, a}, pid}`, the same bound on keys).
  """
  @spec new(keyword()) :: t()
  def new(opts \\ []) do
    by = Keyword.get(opts, :by, :function)

    if by not in [:function, :process],
      do: raise(ArgumentError, "by: is :function or :process, got: #{inspect(by)}")

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
      iex> %{{M, :f, 0} => f} = KinoTrace.Latency.new() |> KinoTrace.Latency.add(events) |> KinoTrace.Latency.report()
      iex> {f.count, f.p50, f.unknown, f.exceptions.count}
      {1, 5.0, 1, 0}
  """
  @spec add(t(), [Event.t()]) :: t()
  def add(acc, []), do: acc

  def add(%{since: nil} = acc, [%Event{id: id} | _] = events),
    do: add(%{acc | since: id || 1}, events)

  # One pass over the batch with the figures unpacked (no accumulator rebuilt per event):
  # it runs in the consumer for every event (bench/consumer.exs, "latency: true").
  def add(
        %__MODULE__{functions: functions, since: since, functions_left_out: left_out, by: by} =
          acc,
        events
      ) do
    {functions, left_out} = add_events(events, functions, {since, by}, left_out)
    %{acc | functions: functions, functions_left_out: left_out}
  end

  defp add_events([], functions, _since, left_out), do: {functions, left_out}

  defp add_events([%Event{kind: :call} = e | rest], functions, since, left_out) do
    mfa = key(e, since)

    case functions do
      %{^mfa => {calls, ended, returns, exceptions}} ->
        add_events(
          rest,
          %{functions | mfa => {calls + 1, ended, returns, exceptions}},
          since,
          left_out
        )

      _ when map_size(functions) < @max_functions ->
        add_events(
          rest,
          Map.put(functions, mfa, {1, 0, Histogram.new(), Histogram.new()}),
          since,
          left_out
        )

      _ ->
        add_events(rest, functions, since, left_out + 1)
    end
  end

  defp add_events(
         [%Event{kind: kind, call_id: id, duration: d} = e | rest],
         functions,
         {first, _} = since,
         left_out
       )
       when kind in [:return, :exception] and is_integer(id) and is_integer(d) do
    mfa = key(e, since)
    # a call before the first event counts as a call of these events
    before = if id < first, do: 1, else: 0

    case functions do
      %{^mfa => {calls, ended, returns, exceptions}} when kind == :return ->
        figures = {calls + before, ended + 1, Histogram.record(returns, d), exceptions}
        add_events(rest, %{functions | mfa => figures}, since, left_out)

      %{^mfa => {calls, ended, returns, exceptions}} ->
        figures = {calls + before, ended + 1, returns, Histogram.record(exceptions, d)}
        add_events(rest, %{functions | mfa => figures}, since, left_out)

      _ when map_size(functions) < @max_functions ->
        functions = Map.put(functions, mfa, {0, 0, Histogram.new(), Histogram.new()})
        add_events([e | rest], functions, since, left_out)

      _ ->
        add_events(rest, functions, since, left_out + 1)
    end
  end

  defp add_events([_event | rest], functions, since, left_out),
    do: add_events(rest, functions, since, left_out)

  # The key of an event's figures: its function's {m, f, a}, with its pid when `by: :process`.
  defp key(%Event{module: nil}, _since), do: nil
  defp key(%Event{module: m, function: f, arity: a}, {_, :function}), do: {m, f, a}

  defp key(%Event{module: m, function: f, arity: a, pid: pid}, {_, :process}),
    do: {{m, f, a}, pid}

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
