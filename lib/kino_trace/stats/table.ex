defmodule KinoTrace.Stats.Table do
  @moduledoc false
  # Formats a `Kino.Trace.Stats.Snapshot` as a console table, one function per line,
  # highest total time first, with a total line.

  alias Kino.Trace.Stats.{Row, Snapshot}

  @doc """
  The table as a string (no trailing newline).

  ## Examples

      iex> pid = :c.pid(0, 4242, 0)
      iex> raw = [
      ...>   {{Enum, :sum, 1}, %{call_time: [{pid, 4, 0, 100}], call_memory: [{pid, 4, 40}]}},
      ...>   {{Enum, :map, 2}, %{call_time: [{pid, 2, 0, 300}], call_memory: [{pid, 2, 8}]}}
      ...> ]
      iex> snapshot = Kino.Trace.Stats.Snapshot.build(raw, elapsed_us: 2_000_000)
      iex> snapshot |> KinoTrace.Stats.Table.format() |> String.split("\\n")
      [
        "2 functions, 6 calls in 2.0 s",
        "FUNCTION    CALLS  TIME µs  PER CALL   %TIME  MEMORY words  PER CALL",
        "Enum.map/2      2      300    150.00   75.00             8      4.00",
        "Enum.sum/1      4      100     25.00   25.00            40     10.00",
        "TOTAL           6      400            100.00            48"
      ]

  Time is in microseconds of running time (see `Kino.Trace.Stats.Row`), memory in words.
  With `latency: true`, P50, P99 and MAX are the calls' wall times (the distributions
  of `Kino.Trace.Stats.Row`'s `:latency`), in microseconds. Columns for what the session
  does not measure are left out.

      iex> pid = :c.pid(0, 4242, 0)
      iex> raw = [
      ...>   {{Enum, :sum, 1}, %{call_time: [{pid, 4, 0, 100}]}},
      ...>   {{Enum, :map, 2}, %{call_time: [{pid, 2, 0, 300}]}}
      ...> ]
      iex> latency = %{{Enum, :sum, 1} => %{p50: 1.5, p99: 12.25, max: 1500.0}}
      iex> snapshot = Kino.Trace.Stats.Snapshot.build(raw, elapsed_us: 2_000_000, memory?: false, latency: latency)
      iex> snapshot |> KinoTrace.Stats.Table.format() |> String.split("\\n")
      [
        "2 functions, 6 calls in 2.0 s",
        "FUNCTION    CALLS  TIME µs  PER CALL   %TIME  P50 µs  P99 µs  MAX µs",
        "Enum.map/2      2      300    150.00   75.00",
        "Enum.sum/1      4      100     25.00   25.00    1.50    12.3    1500",
        "TOTAL           6      400            100.00"
      ]

  Options: `:limit` and `:processes`, as `Kino.Trace.Stats.print/2` documents them.
  """
  @spec format(Snapshot.t(), keyword()) :: String.t()
  def format(%Snapshot{} = snapshot, opts \\ []) do
    limit = Keyword.get(opts, :limit, 50)
    processes? = Keyword.get(opts, :processes, false)
    {shown, hidden} = Enum.split(snapshot.rows, limit)
    columns = columns(snapshot)

    header = Enum.map(columns, fn {title, _align, _fun} -> title end)

    body =
      Enum.flat_map(shown, fn row ->
        [cells(columns, row) | if(processes?, do: process_lines(columns, row), else: [])]
      end)

    more =
      case hidden do
        [] -> []
        _ -> [cells(columns, merged(hidden, "(#{length(hidden)} more)"))]
      end

    total = cells(columns, total_row(snapshot))
    lines = render([header | body ++ more ++ [total]], Enum.map(columns, &elem(&1, 1)))
    Enum.join([summary(snapshot) | lines], "\n")
  end

  defp columns(snapshot) do
    [{"FUNCTION", :left, &label/1}, {"CALLS", :right, &int(&1.calls)}] ++
      if(snapshot.time?,
        do: [
          {"TIME µs", :right, &int(&1.time_us)},
          {"PER CALL", :right, &float(&1.per_call_us)},
          {"%TIME", :right, &percent(&1.time_share)}
        ],
        else: []
      ) ++
      if(snapshot.latency?,
        do: [
          {"P50 µs", :right, &latency(&1, :p50)},
          {"P99 µs", :right, &latency(&1, :p99)},
          {"MAX µs", :right, &latency(&1, :max)}
        ],
        else: []
      ) ++
      if(snapshot.memory?,
        do: [
          {"MEMORY words", :right, &int(&1.memory_words)},
          {"PER CALL", :right, &float(&1.per_call_words)}
        ],
        else: []
      )
  end

  defp cells(columns, row), do: Enum.map(columns, fn {_title, _align, fun} -> fun.(row) end)

  defp label(%{label: label}), do: label
  defp label(%Row{} = row), do: Row.name(row)

  defp process_lines(columns, row) do
    for p <- row.processes do
      who = "  " <> inspect(p.pid) <> if(p.name, do: " (#{inspect(p.name)})", else: "")

      %{
        label: who,
        calls: p.calls,
        time_us: p.time_us,
        per_call_us: p.time_us && p.calls > 0 && p.time_us / p.calls,
        time_share: nil,
        memory_words: p.memory_words,
        per_call_words: p.memory_words && p.calls > 0 && p.memory_words / p.calls
      }
      |> then(&cells(columns, &1))
    end
  end

  defp merged(rows, label) do
    %{
      label: label,
      calls: Enum.sum(Enum.map(rows, & &1.calls)),
      time_us: sum_or_nil(rows, :time_us),
      per_call_us: nil,
      time_share: sum_or_nil(rows, :time_share),
      memory_words: sum_or_nil(rows, :memory_words),
      per_call_words: nil
    }
  end

  defp total_row(snapshot) do
    %{
      label: "TOTAL",
      calls: snapshot.calls,
      time_us: snapshot.time_us,
      per_call_us: nil,
      time_share: if(snapshot.time?, do: 1.0),
      memory_words: snapshot.memory_words,
      per_call_words: nil
    }
  end

  defp sum_or_nil(rows, key) do
    case Enum.map(rows, &Map.fetch!(&1, key)) do
      [nil | _] -> nil
      values -> Enum.sum(values)
    end
  end

  defp summary(%Snapshot{} = s) do
    functions = length(s.rows)
    noun = if functions == 1, do: "function", else: "functions"
    calls = if s.calls == 1, do: "call", else: "calls"
    "#{functions} #{noun}, #{s.calls} #{calls} in #{seconds(s.elapsed_us)}"
  end

  defp seconds(us) when us < 1_000_000, do: "#{Float.round(us / 1000, 1)} ms"
  defp seconds(us), do: "#{Float.round(us / 1_000_000, 1)} s"

  # A wall-time figure of the row's latency distribution (`latency: true`).
  defp latency(row, key) do
    case Map.get(row, :latency) do
      %{^key => us} when is_number(us) -> micros(us)
      _ -> ""
    end
  end

  defp micros(us) when us < 10, do: :erlang.float_to_binary(us / 1, decimals: 2)
  defp micros(us) when us < 1000, do: :erlang.float_to_binary(us / 1, decimals: 1)
  defp micros(us), do: Integer.to_string(round(us))

  defp int(nil), do: ""
  defp int(false), do: ""
  defp int(n), do: Integer.to_string(n)

  defp float(value) when is_number(value), do: :erlang.float_to_binary(value / 1, decimals: 2)
  defp float(_), do: ""

  defp percent(nil), do: ""
  defp percent(share), do: :erlang.float_to_binary(share * 100.0, decimals: 2)

  defp render(lines, aligns) do
    widths =
      lines
      |> Enum.map(fn cells -> Enum.map(cells, &String.length/1) end)
      |> Enum.zip_with(&Enum.max/1)

    Enum.map(lines, fn cells ->
      [cells, widths, aligns]
      |> Enum.zip_with(fn [cell, width, align] -> pad(cell, width, align) end)
      |> Enum.join("  ")
      |> String.trim_trailing()
    end)
  end

  defp pad(cell, width, :left), do: String.pad_trailing(cell, width)
  defp pad(cell, width, :right), do: String.pad_leading(cell, width)
end
