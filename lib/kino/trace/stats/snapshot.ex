defmodule Kino.Trace.Stats.Snapshot do
  @moduledoc """
  The statistics of a stats session at one moment: one `Kino.Trace.Stats.Row` per
  function called since the start (or the last reset), sorted by total time, highest
  first (by calls when time is not measured).

  Times are in microseconds, the VM's own resolution for `call_time`, and memory in
  words (`:erlang.system_info(:wordsize)` bytes each).

  `build/2` turns the raw VM counters into a snapshot; it is a plain function, so the
  console table and the widget payload can be tested without tracing:

      iex> pid = :c.pid(0, 4242, 0)
      iex> raw = [
      ...>   {{Enum, :sum, 1}, %{call_time: [{pid, 4, 0, 100}], call_memory: [{pid, 4, 40}]}},
      ...>   {{Enum, :map, 2}, %{call_time: [{pid, 2, 0, 300}], call_memory: [{pid, 2, 8}]}},
      ...>   {{Enum, :zip, 2}, %{call_time: [], call_memory: []}}
      ...> ]
      iex> snapshot = Kino.Trace.Stats.Snapshot.build(raw, time?: true, memory?: true)
      iex> Enum.map(snapshot.rows, &{&1.mfa, &1.calls, &1.time_us, &1.memory_words})
      [{{Enum, :map, 2}, 2, 300, 8}, {{Enum, :sum, 1}, 4, 100, 40}]
      iex> {snapshot.calls, snapshot.time_us, snapshot.memory_words}
      {6, 400, 48}
      iex> hd(snapshot.rows).time_share
      0.75
  """

  alias Kino.Trace.Stats.Row

  defstruct id: nil,
            patterns: [],
            taken_at: nil,
            elapsed_us: 0,
            time?: true,
            memory?: true,
            latency?: false,
            calls: 0,
            time_us: nil,
            memory_words: nil,
            rows: []

  @typedoc """
    * `:id` - the stats session's id
    * `:patterns` - the session's patterns, as text
    * `:taken_at` - system time of the snapshot, in microseconds
    * `:elapsed_us` - microseconds since the session started or was last reset
    * `:time?`, `:memory?` - whether time and memory are measured (otherwise the
      corresponding fields are `nil`)
    * `:latency?` - whether latency distributions are measured (`latency: true`, see
      `Kino.Trace.Stats.Row`)
    * `:calls`, `:time_us`, `:memory_words` - totals over all rows
    * `:rows` - one row per function called at least once
  """
  @type t :: %__MODULE__{
          id: pos_integer() | nil,
          patterns: [String.t()],
          taken_at: integer() | nil,
          elapsed_us: non_neg_integer(),
          time?: boolean(),
          memory?: boolean(),
          latency?: boolean(),
          calls: non_neg_integer(),
          time_us: non_neg_integer() | nil,
          memory_words: non_neg_integer() | nil,
          rows: [Row.t()]
        }

  @typedoc "What `:trace.info(session, mfa, item)` returned, per item."
  @type counters :: %{optional(:call_time | :call_memory | :call_count) => term()}

  @doc """
  Builds a snapshot from `{mfa, counters}` pairs.

  Options: `:time?`, `:memory?` (what is reported, default `true`), `:latency` (the
  distributions by function, as `Kino.Trace.latency/2` gives them; default `nil`, not
  measured), `:latency_processes` (the same keyed by `{mfa, pid}`: each process of a row
  gets its `:latency`, `nil` when it has none; default `nil`), and the fields
  `:id`, `:patterns`, `:taken_at`, `:elapsed_us` copied into the snapshot. Counters that
  are missing, `false` or `:undefined` (a function no longer traced, for example after
  a code reload) count as nothing. A function may come several times (from several
  nodes): its counters are added up into one row (the per-process lists joined, whose
  pids tell their node; `call_count` summed).

      iex> [a, b] = [:c.pid(0, 4242, 0), :c.pid(0, 4243, 0)]
      iex> raw = [
      ...>   {{Enum, :sum, 1}, %{call_time: [{a, 4, 0, 100}]}},
      ...>   {{Enum, :sum, 1}, %{call_time: [{b, 1, 0, 50}]}}
      ...> ]
      iex> [row] = Kino.Trace.Stats.Snapshot.build(raw, memory?: false).rows
      iex> {row.calls, row.time_us, length(row.processes)}
      {5, 150, 2}
  """
  @spec build([{mfa(), counters()}], keyword()) :: t()
  def build(raw, opts \\ []) do
    time? = Keyword.get(opts, :time?, true)
    memory? = Keyword.get(opts, :memory?, true)

    rows =
      raw
      |> merge_same()
      |> Enum.map(fn {mfa, counters} -> Row.build(mfa, counters, time?, memory?) end)
      |> Enum.filter(&(&1.calls > 0))

    total_time = if time?, do: sum(rows, :time_us)
    total_memory = if memory?, do: sum(rows, :memory_words)

    latency = opts[:latency]
    by_process = opts[:latency_processes]

    rows =
      rows
      |> Enum.map(&Row.put_shares(&1, total_time, total_memory))
      |> Enum.map(&if(latency, do: put_latency(&1, latency, by_process), else: &1))
      |> Enum.sort_by(&{-(&1.time_us || 0), -&1.calls, &1.mfa})

    %__MODULE__{
      id: opts[:id],
      patterns: Keyword.get(opts, :patterns, []),
      taken_at: opts[:taken_at],
      elapsed_us: Keyword.get(opts, :elapsed_us, 0),
      time?: time?,
      memory?: memory?,
      latency?: latency != nil,
      calls: sum(rows, :calls),
      time_us: total_time,
      memory_words: total_memory,
      rows: rows
    }
  end

  defp sum(rows, key), do: Enum.reduce(rows, 0, &(Map.fetch!(&1, key) + &2))

  defp put_latency(row, latency, nil), do: %{row | latency: Map.get(latency, row.mfa)}

  defp put_latency(row, latency, by_process) do
    processes =
      Enum.map(row.processes, &Map.put(&1, :latency, Map.get(by_process, {row.mfa, &1.pid})))

    %{row | latency: Map.get(latency, row.mfa), processes: processes}
  end

  # One {mfa, counters} per function, in the order of their first appearance.
  defp merge_same(raw) do
    {order, by_mfa} =
      Enum.reduce(raw, {[], %{}}, fn {mfa, counters}, {order, by_mfa} ->
        case by_mfa do
          %{^mfa => seen} -> {order, %{by_mfa | mfa => Map.merge(seen, counters, &add/3)}}
          _ -> {[mfa | order], Map.put(by_mfa, mfa, counters)}
        end
      end)

    for mfa <- Enum.reverse(order), do: {mfa, Map.fetch!(by_mfa, mfa)}
  end

  defp add(_item, a, b) when is_integer(a) and is_integer(b), do: a + b
  defp add(_item, a, b) when is_list(a) or is_list(b), do: counted(a) ++ counted(b)
  defp add(_item, a, b), do: if(is_integer(a), do: a, else: b)

  defp counted(list) when is_list(list), do: list
  defp counted(_false_or_undefined), do: []

  @doc """
  The row of one function, or `nil` when it was not called.

      iex> stats = Kino.Trace.Stats.start(["Enum.sum/1", "Enum.reverse/1"], pids: self())
      iex> Enum.sum([1])
      1
      iex> snapshot = Kino.Trace.Stats.snapshot(stats)
      iex> {Kino.Trace.Stats.Snapshot.row(snapshot, {Enum, :sum, 1}).calls, Kino.Trace.Stats.Snapshot.row(snapshot, {Enum, :reverse, 1})}
      {1, nil}
  """
  @spec row(t(), mfa()) :: Row.t() | nil
  def row(%__MODULE__{rows: rows}, mfa), do: Enum.find(rows, &(&1.mfa == mfa))
end
