defmodule KinoTrace.Plan.DidYouMean do
  @moduledoc false
  # The "did you mean" of an unknown option: the known option whose name is closest to
  # the one given (`String.jaro_distance/2` above 0.8), when one is close enough.
  # `KinoTrace.Options`, the one validator of options, words unknown-option errors with
  # it; the pattern checks (`KinoTrace.Pattern.Preflight`) suggest modules and
  # functions with `closest/3`.

  # How close a known name must be (Jaro similarity) to be suggested.
  @threshold 0.8

  # Jaro similarity that makes a name (of a module or function, `closest/3`) a
  # suggestion even when it needs more edits than allowed.
  @suggestion_threshold 0.9

  @doc """
  ` (did you mean :known?)` for the known name closest to `given`, or `""` when none is
  close enough (or none is known).

      iex> KinoTrace.Plan.DidYouMean.hint(:limt, [])
      ""

  ## Examples

      iex> KinoTrace.Plan.DidYouMean.hint(:tiem, [:pids, :time, :memory])
      " (did you mean :time?)"
      iex> KinoTrace.Plan.DidYouMean.hint(:colour, [:pids, :time, :memory])
      ""
      iex> KinoTrace.Plan.DidYouMean.unknown_option(:tiem, [:time, :memory])
      "unknown option :tiem (did you mean :time?). Known options: :time, :memory"
  """
  @spec hint(atom(), [atom()]) :: String.t()
  def hint(given, known) when is_list(known) do
    given = to_string(given)

    case Enum.max_by(known, &String.jaro_distance(to_string(&1), given), fn -> nil end) do
      nil ->
        ""

      best ->
        if String.jaro_distance(to_string(best), given) > @threshold,
          do: " (did you mean #{inspect(best)}?)",
          else: ""
    end
  end

  @doc "The error message for the unknown option `given`: its hint and the known options."
  @spec unknown_option(atom(), [atom()]) :: String.t()
  def unknown_option(given, known) when is_list(known) do
    "unknown option #{inspect(given)}" <>
      hint(given, known) <> ". Known options: " <> Enum.map_join(known, ", ", &inspect/1)
  end

  @doc """
  The name among `candidates` closest to `wanted`: fewest edits (a swap of two
  neighbours counts as one; at most a quarter of its length, and at most `max_edits`),
  then highest Jaro similarity (#{@suggestion_threshold} or more makes a name close
  even past the edits allowed); `nil` when none is close.

      iex> KinoTrace.Plan.DidYouMean.closest("Enumm", ["Enum", "Map", "Stream"], 3)
      "Enum"
      iex> KinoTrace.Plan.DidYouMean.closest("Colour", ["Enum", "Map"], 3)
      nil
  """
  @spec closest(String.t(), [String.t()], pos_integer()) :: String.t() | nil
  def closest(wanted, candidates, max_edits) do
    wanted_length = String.length(wanted)
    max_edits = wanted_length |> div(4) |> max(1) |> min(max_edits)
    wanted_graphemes = wanted |> String.graphemes() |> List.to_tuple()

    candidates
    |> Enum.reject(&(&1 == wanted))
    |> Enum.flat_map(fn candidate ->
      length = String.length(candidate)

      cond do
        abs(length - wanted_length) <= max_edits ->
          edits = edit_distance(wanted_graphemes, candidate, max_edits)
          [{candidate, edits, String.jaro_distance(wanted, candidate)}]

        # Jaro similarity is at most (2 + shorter / longer) / 3: skip the
        # candidates whose lengths alone keep it below the threshold.
        min(length, wanted_length) < (3 * @suggestion_threshold - 2) * max(length, wanted_length) ->
          []

        true ->
          [{candidate, max_edits + 1, String.jaro_distance(wanted, candidate)}]
      end
    end)
    |> Enum.filter(fn {_, edits, jaro} -> edits <= max_edits or jaro >= @suggestion_threshold end)
    |> Enum.min_by(fn {_, edits, jaro} -> {edits, -jaro} end, fn -> nil end)
    |> case do
      nil -> nil
      {candidate, _edits, _jaro} -> candidate
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
      {_before_previous, last_row} -> elem(last_row, right_size)
    end
  end

  defp row_min(row), do: row |> Tuple.to_list() |> Enum.min()
end
