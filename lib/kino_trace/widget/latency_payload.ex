defmodule KinoTrace.Widget.LatencyPayload do
  @moduledoc false
  # The trace widget's latency columns (its Stats tab): the distributions of the calls
  # the widget has pushed to browsers (KinoTrace.Latency, by function and by
  # function and process, nothing kept per call), so the work is bounded by the pushes'
  # (at most `:max_batch` events an `:interval`) and the columns count the calls the tab
  # counts; and the JSON-able `"latency"` payload made of them:
  #
  #   %{rows: [%{mfa, latency, processes: [%{pid, latency}], processes_omitted, slow}],
  #     rows_omitted}
  #
  # `slow`: how many slow calls of the function the trace keeps (`slowest:`,
  # `slower_than:`; KinoTrace.Widget.SlowPayload.keyed/1), the count its Stats tab row
  # links to; `nil` when the trace keeps none (the link then finds them in the events
  # the widget keeps).
  #
  # `mfa` reads as the log rows' (`Mod.fun/1`), `latency` as
  # `KinoTrace.Widget.StatsPayload.latency/1` makes it (µs, at most 24 histogram bars).
  # Bounded: at most `:rows` functions (most calls first, default 500) and
  # `:processes` processes a function (default 20), and the accumulators' own bound on
  # keys (KinoTrace.Latency).

  alias KinoTrace.Base.MFA
  alias KinoTrace.Latency
  alias KinoTrace.Widget.StatsPayload

  defstruct functions: Latency.new(), processes: Latency.new(by: :process), changed?: false

  @type t :: %__MODULE__{}

  @doc "No calls yet."
  @spec new() :: t()
  def new, do: %__MODULE__{}

  @doc "Adds a batch of events (oldest first)."
  @spec add(t(), [Kino.Trace.Event.t()]) :: t()
  def add(%__MODULE__{} = l, []), do: l

  def add(%__MODULE__{} = l, events) do
    timed? = Enum.any?(events, &(&1.kind in [:call, :return, :exception]))

    %{
      l
      | functions: Latency.add(l.functions, events),
        processes: Latency.add(l.processes, events),
        changed?: l.changed? or timed?
    }
  end

  @doc """
  The widget's tick: `{[{:broadcast, "latency", payload}], l}` when calls came since the
  last one (or `changed/1` asked for it), else `{[], l}`. `opts_fun` gives the
  payload's options (`payload/2`), called only for a push.
  """
  @spec tick(t(), (-> keyword())) :: {[{:broadcast, String.t(), map()}], t()}
  def tick(l, opts_fun \\ fn -> [] end)

  def tick(%__MODULE__{changed?: true} = l, opts_fun),
    do: {[{:broadcast, "latency", payload(l, opts_fun.())}], %{l | changed?: false}}

  def tick(%__MODULE__{} = l, _opts_fun), do: {[], l}

  @doc "Asks for a payload at the next tick (a browser connected)."
  @spec changed(t()) :: t()
  def changed(%__MODULE__{} = l), do: %{l | changed?: true}

  @doc """
  The payload of the distributions so far.

      iex> alias Kino.Trace.Event
      iex> pid = :c.pid(0, 250, 0)
      iex> events = [
      ...>   %Event{id: 1, kind: :call, pid: pid, module: M, function: :f, arity: 0},
      ...>   %Event{id: 2, kind: :return, pid: pid, module: M, function: :f, arity: 0, call_id: 1, duration: 5_000}
      ...> ]
      iex> alias KinoTrace.Widget.LatencyPayload
      iex> %{rows: [row]} = LatencyPayload.new() |> LatencyPayload.add(events) |> LatencyPayload.payload()
      iex> {row.mfa, row.latency.p50, Enum.map(row.processes, &{&1.pid, &1.latency.count})}
      {"M.f/0", 5.0, [{"#PID<0.250.0>", 1}]}

  Options: `:rows` (default 500) and `:processes` (default 20), the bounds; `:slow`,
  the trace's slow-call counts by key (`KinoTrace.Widget.SlowPayload.keyed/1`; default
  `nil`, it keeps none).
  """
  @spec payload(t(), keyword()) :: map()
  def payload(%__MODULE__{} = l, opts \\ []) do
    max_rows = Keyword.get(opts, :rows, 500)
    max_processes = Keyword.get(opts, :processes, 20)
    slow = Keyword.get(opts, :slow)

    by_process =
      l.processes
      |> Latency.report()
      |> Enum.group_by(fn {{mfa, _pid}, _} -> mfa end, fn {{_mfa, pid}, r} -> {pid, r} end)

    {shown, hidden} =
      l.functions
      |> Latency.report()
      |> Enum.sort_by(fn {mfa, r} -> {-(r.count + r.exceptions.count + r.unknown), mfa} end)
      |> Enum.split(max_rows)

    %{
      rows:
        for {mfa, report} <- shown do
          {procs, rest} =
            by_process
            |> Map.get(mfa, [])
            |> Enum.sort_by(fn {pid, r} -> {-(r.count + r.exceptions.count + r.unknown), pid} end)
            |> Enum.split(max_processes)

          key = MFA.to_string(mfa)

          %{
            mfa: key,
            slow: slow && Map.get(slow, key, 0),
            latency: StatsPayload.latency(report),
            processes:
              for({pid, r} <- procs, do: %{pid: inspect(pid), latency: StatsPayload.latency(r)}),
            processes_omitted: length(rest)
          }
        end,
      rows_omitted: length(hidden)
    }
  end
end
