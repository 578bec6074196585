defmodule KinoTrace.Base.Suggest do
  @moduledoc false
  # "Did you mean": the one rule every front end suggests names with (an unknown option
  # in `KinoTrace.Options`, an unknown module or function in a pattern
  # (`KinoTrace.Pattern.Preflight`), an assertion about a function that does not exist
  # (`KinoTrace.Assertions.Validation`), the closest calls of a failed assertion
  # (`KinoTrace.Assertions.Format`)). A bottom-layer module: it uses nothing of
  # kino_trace, and anything may use it.
  #
  # The rule: a known name is close to the given one when
  #   * it is at most a few edits away: a quarter of the given name's length, at least 1,
  #     at most 3 (an edit: a grapheme added, removed or replaced, or two neighbours
  #     swapped), or
  #   * its Jaro similarity (`String.jaro_distance/2`) is at least 0.9, or
  #   * it is the given name (of at least 3 graphemes) plus a suffix: `fetch_all` for
  #     `fetch`.
  # The closest comes first: fewest edits, then highest Jaro similarity.

  @max_edits 3
  @jaro 0.9
  @min_stem 3

  @typedoc "A name: a string, or an atom compared by its text."
  @type name :: String.t() | atom()

  @doc """
  The names among `candidates` close to `given`, closest first (`given` itself is left
  out).

      iex> KinoTrace.Base.Suggest.similar("fetch", ["fetch", "put", "fetch_all", "fetch!"])
      ["fetch!", "fetch_all"]
      iex> KinoTrace.Base.Suggest.similar(:tiem, [:pids, :time, :memory])
      [:time]
  """
  @spec similar(name(), [name()]) :: [name()]
  def similar(given, candidates) do
    wanted = to_string(given)
    wanted_length = String.length(wanted)
    allowed = wanted_length |> div(4) |> max(1) |> min(@max_edits)
    wanted_graphemes = wanted |> String.graphemes() |> List.to_tuple()

    candidates
    |> Enum.flat_map(fn candidate ->
      text = to_string(candidate)

      case score(wanted, wanted_graphemes, wanted_length, allowed, text) do
        nil -> []
        {edits, jaro} -> [{edits, -jaro, candidate}]
      end
    end)
    |> Enum.sort_by(fn {edits, negative_jaro, _} -> {edits, negative_jaro} end)
    |> Enum.map(&elem(&1, 2))
  end

  @doc """
  The name among `candidates` closest to `given`, or `nil` when none is close.

      iex> KinoTrace.Base.Suggest.closest("Enumm", ["Enum", "Map", "Stream"])
      "Enum"
      iex> KinoTrace.Base.Suggest.closest("Colour", ["Enum", "Map"])
      nil
  """
  @spec closest(name(), [name()]) :: name() | nil
  def closest(given, candidates) do
    case similar(given, candidates) do
      [best | _] -> best
      [] -> nil
    end
  end

  @doc """
  Whether `candidate` is close to `given` (and not `given` itself).

      iex> KinoTrace.Base.Suggest.close?(:fetch, :fetch_all)
      true
      iex> KinoTrace.Base.Suggest.close?(:fetch, :put)
      false
  """
  @spec close?(name(), name()) :: boolean()
  def close?(given, candidate), do: similar(given, [candidate]) != []

  @doc """
  ` (did you mean :known?)` for the known name closest to `given`, or `""` when none is
  close (or none is known).

      iex> KinoTrace.Base.Suggest.hint(:tiem, [:pids, :time, :memory])
      " (did you mean :time?)"
      iex> KinoTrace.Base.Suggest.hint(:colour, [:pids, :time, :memory])
      ""
  """
  @spec hint(atom(), [atom()]) :: String.t()
  def hint(given, known) when is_list(known) do
    case closest(given, known) do
      nil -> ""
      best -> " (did you mean #{inspect(best)}?)"
    end
  end

  @doc """
  The error message for the unknown option `given`: its hint and the known options.

      iex> KinoTrace.Base.Suggest.unknown_option(:tiem, [:time, :memory])
      "unknown option :tiem (did you mean :time?). Known options: :time, :memory"
  """
  @spec unknown_option(atom(), [atom()]) :: String.t()
  def unknown_option(given, known) when is_list(known) do
    "unknown option #{inspect(given)}" <>
      hint(given, known) <> ". Known options: " <> Enum.map_join(known, ", ", &inspect/1)
  end

  # {edits, jaro} when `text` is close to `wanted`, else nil. Edits past `allowed` count
  # as allowed + 1 (the edit distance stops there).
  defp score(wanted, _graphemes, _length, _allowed, wanted), do: nil

  defp score(wanted, graphemes, wanted_length, allowed, text) do
    length = String.length(text)

    edits =
      if abs(length - wanted_length) <= allowed,
        do: edit_distance(graphemes, text, allowed),
        else: allowed + 1

    cond do
      edits <= allowed ->
        {edits, String.jaro_distance(wanted, text)}

      wanted_length >= @min_stem and String.starts_with?(text, wanted) ->
        {edits, String.jaro_distance(wanted, text)}

      # Jaro similarity is at most (2 + shorter / longer) / 3: the lengths alone may
      # keep it below the threshold (most candidates, cheaply).
      min(length, wanted_length) < (3 * @jaro - 2) * max(length, wanted_length) ->
        nil

      true ->
        jaro = String.jaro_distance(wanted, text)
        if jaro >= @jaro, do: {edits, jaro}
    end
  end

  # Optimal string alignment distance (Levenshtein plus adjacent swaps) between
  # `left` (a tuple of graphemes) and `right`, or
  # `limit + 1` as soon as two rows in a row exceed `limit` (every alignment
  # crosses one of them: a swap skips one row at most).
  defp edit_distance(left, right, limit) do
    right = right |> String.graphemes() |> List.to_tuple()
    right_size = tuple_size(right)
    first_row = List.to_tuple(Enum.to_list(0..right_size))

    Enum.reduce_while(1..tuple_size(left)//1, {nil, first_row}, fn i,
                                                                   {before_previous, previous} ->
      row =
        Enum.reduce(1..right_size//1, [i], fn j, [left_cell | _] = reversed ->
          cost = if elem(left, i - 1) == elem(right, j - 1), do: 0, else: 1

          best = min(min(left_cell + 1, elem(previous, j) + 1), elem(previous, j - 1) + cost)

          swapped? =
            i > 1 and j > 1 and elem(left, i - 1) == elem(right, j - 2) and
              elem(left, i - 2) == elem(right, j - 1)

          [if(swapped?, do: min(best, elem(before_previous, j - 2) + 1), else: best) | reversed]
        end)

      row = row |> Enum.reverse() |> List.to_tuple()

      if row_min(row) > limit and row_min(previous) > limit,
        do: {:halt, :over},
        else: {:cont, {previous, row}}
    end)
    |> case do
      :over -> limit + 1
      {_before_previous, last_row} -> min(elem(last_row, right_size), limit + 1)
    end
  end

  defp row_min(row), do: row |> Tuple.to_list() |> Enum.min()
end
