defmodule KinoTrace.Widget.StatsPayload do
  @moduledoc false
  # Turns a `Kino.Trace.Stats.Snapshot` into the JSON-able map a stats table widget shows:
  # rows with shares of the total (for bars), and a per-process drill-down per row.
  #
  # Only strings, numbers, booleans, `nil`, lists and maps with atom keys: the map can be
  # JSON-encoded as it is. Nothing here needs Kino. Any source of per-function figures
  # (for example durations from a call trace) can be put in a `Snapshot` with
  # `Kino.Trace.Stats.Snapshot.build/2` and rendered with the same table.

  alias Kino.Trace.Stats.{Row, Snapshot}

  @typedoc """
  One process in a row's drill-down; shares are of the row's totals. `latency`: its
  calls' distribution (`t:latency/0`) when the session measures it (`latency: true`),
  else `nil`.
  """
  @type process :: %{
          pid: String.t(),
          name: String.t() | nil,
          calls: non_neg_integer(),
          time_us: non_neg_integer() | nil,
          time_share: float() | nil,
          memory_words: non_neg_integer() | nil,
          memory_share: float() | nil,
          latency: latency() | nil
        }

  @typedoc "One function; shares are of the snapshot's totals (0.0 to 1.0)."
  # the most histogram bars a row's latency has
  @max_bars 24

  @type row :: %{
          key: String.t(),
          name: String.t(),
          title: String.t() | nil,
          module: String.t(),
          function: String.t(),
          arity: non_neg_integer(),
          calls: non_neg_integer(),
          time_us: non_neg_integer() | nil,
          per_call_us: float() | nil,
          time_share: float() | nil,
          memory_words: non_neg_integer() | nil,
          per_call_words: float() | nil,
          memory_share: float() | nil,
          latency: latency() | nil,
          processes: [process()],
          processes_omitted: map() | nil
        }

  @typedoc """
  A row's latency distribution (`latency: true`), in microseconds of wall time:
  `Kino.Trace.Stats.Row`'s `:latency` with at most #{@max_bars} histogram bars
  (`[low_us, count]`, adjacent buckets added up), and the exceptions' `count`, `p50`,
  `p99` and `max`.
  """
  @type latency ::
          KinoTrace.Latency.report(
            [[number()]],
            %{
              count: non_neg_integer(),
              p50: float() | nil,
              p99: float() | nil,
              max: float() | nil
            }
          )

  @type t :: %{
          id: pos_integer() | nil,
          patterns: [String.t()],
          taken_at: integer() | nil,
          elapsed_us: non_neg_integer(),
          measured: %{time: boolean(), memory: boolean(), latency: boolean()},
          totals: %{
            calls: non_neg_integer(),
            functions: non_neg_integer(),
            time_us: non_neg_integer() | nil,
            memory_words: non_neg_integer() | nil
          },
          rows: [row()],
          rows_omitted: non_neg_integer()
        }

  @doc """
  The payload of a snapshot. See the module docs for the options.

  ## Examples

      iex> pid = :c.pid(0, 4242, 0)
      iex> raw = [
      ...>   {{Enum, :sum, 1}, %{call_time: [{pid, 4, 0, 100}], call_memory: [{pid, 4, 40}]}},
      ...>   {{Enum, :map, 2}, %{call_time: [{pid, 2, 0, 300}], call_memory: [{pid, 2, 8}]}}
      ...> ]
      iex> payload = raw |> Kino.Trace.Stats.Snapshot.build() |> KinoTrace.Widget.StatsPayload.snapshot()
      iex> payload.totals
      %{calls: 6, functions: 2, memory_words: 48, time_us: 400}
      iex> [top, _] = payload.rows
      iex> {top.key, top.calls, top.time_us, top.per_call_us, top.time_share}
      {"Enum.map/2", 2, 300, 150.0, 0.75}
      iex> hd(top.processes)
      %{pid: "#PID<0.4242.0>", name: nil, calls: 2, time_us: 300, time_share: 1.0, memory_words: 8, memory_share: 1.0, latency: nil}

  Options:

    * `:rows` - the most rows sent (default 500); `:rows_omitted` says how many more
    * `:processes` - the most processes per row (default 20); the rest are summed in
      the row's `:processes_omitted`
  """
  @spec snapshot(Snapshot.t(), keyword()) :: t()
  def snapshot(%Snapshot{} = s, opts \\ []) do
    {shown, hidden} = Enum.split(s.rows, Keyword.get(opts, :rows, 500))
    max_processes = Keyword.get(opts, :processes, 20)
    # two functions the compiler made in one function are told apart (issue 39 item 10)
    names = KinoTrace.Base.MFA.labels(Enum.map(shown, & &1.mfa))

    %{
      id: s.id,
      patterns: s.patterns,
      taken_at: s.taken_at,
      elapsed_us: s.elapsed_us,
      measured: %{time: s.time?, memory: s.memory?, latency: s.latency?},
      totals: %{
        calls: s.calls,
        functions: length(s.rows),
        time_us: s.time_us,
        memory_words: s.memory_words
      },
      rows: Enum.map(shown, &row(&1, max_processes, names[&1.mfa])),
      rows_omitted: length(hidden)
    }
  end

  @doc """
  The payload of one row, with at most `max_processes` processes. `name` is how the
  function reads (`Row.name/1` unless given: `snapshot/2` tells alike names apart);
  `:title`, the raw name shown on hover, is there when the name is not the raw name.
  """
  @spec row(Row.t(), non_neg_integer(), String.t() | nil) :: row()
  def row(%Row{mfa: {m, f, a}} = r, max_processes \\ 20, name \\ nil) do
    {shown, hidden} = Enum.split(r.processes, max_processes)
    name = name || Row.name(r)
    key = Row.key(r)

    %{
      key: key,
      name: name,
      title: if(name != key, do: key),
      module: inspect(m),
      function: Atom.to_string(f),
      arity: a,
      calls: r.calls,
      time_us: r.time_us,
      per_call_us: round_to(r.per_call_us, 2),
      time_share: round_to(r.time_share, 4),
      memory_words: r.memory_words,
      per_call_words: round_to(r.per_call_words, 2),
      memory_share: round_to(r.memory_share, 4),
      latency: latency(r.latency),
      processes: Enum.map(shown, &process(&1, r)),
      processes_omitted: omitted(hidden)
    }
  end

  @doc """
  A latency distribution (`Kino.Trace.latency/2`'s, in microseconds) as the tables show
  it: see `t:latency/0`; `nil` stays `nil`.
  """
  @spec latency(map() | nil) :: latency() | nil
  def latency(nil), do: nil

  def latency(l) do
    l
    |> Map.take([:count, :unknown, :min, :p50, :p90, :p99, :p999, :max])
    |> Map.new(fn {k, v} -> {k, if(is_float(v), do: round_to(v, 3), else: v)} end)
    |> Map.merge(%{
      histogram: bars(l.histogram),
      exceptions:
        Map.new(Map.take(l.exceptions, [:count, :p50, :p99, :max]), fn {k, v} ->
          {k, if(is_float(v), do: round_to(v, 3), else: v)}
        end)
    })
  end

  # At most @max_bars bars: adjacent buckets added up, each bar at its first bucket's low.
  defp bars(buckets) do
    size = max(1, ceil(length(buckets) / @max_bars))

    for chunk <- Enum.chunk_every(buckets, size) do
      [round_to(elem(hd(chunk), 0), 3), Enum.reduce(chunk, 0, &(elem(&1, 1) + &2))]
    end
  end

  defp process(p, row) do
    %{
      pid: inspect(p.pid),
      name: if(p.name, do: KinoTrace.Render.process_name(p.name)),
      calls: p.calls,
      time_us: p.time_us,
      time_share: share(p.time_us, row.time_us),
      memory_words: p.memory_words,
      memory_share: share(p.memory_words, row.memory_words),
      latency: latency(p[:latency])
    }
  end

  defp omitted([]), do: nil

  defp omitted(processes) do
    %{
      count: length(processes),
      calls: Enum.reduce(processes, 0, &(&1.calls + &2)),
      time_us: sum(processes, :time_us),
      memory_words: sum(processes, :memory_words)
    }
  end

  defp sum([%{} = first | _] = list, key) do
    if Map.fetch!(first, key), do: Enum.reduce(list, 0, &(Map.fetch!(&1, key) + &2))
  end

  defp share(nil, _total), do: nil
  defp share(_part, 0), do: 0.0
  defp share(part, total), do: round_to(part / total, 4)

  defp round_to(nil, _digits), do: nil
  defp round_to(value, digits), do: Float.round(value / 1, digits)
end
