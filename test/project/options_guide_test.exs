defmodule KinoTraceTest.Project.OptionsGuideTest do
  # The table of guides/options_and_limits.md says what the code does: one row per option
  # of a trace (the options KinoTrace.Plan.Options checks), its default as the code has
  # it, and each bound in its "at most" column accepted while one more is refused; each
  # default and bound of a limit is the one of the table of limits (KinoTrace.Limits).
  use ExUnit.Case, async: true

  alias KinoTrace.Plan.Options

  @guide Path.expand("../../guides/options_and_limits.md", __DIR__)
  @external_resource @guide

  # option => {default as written, "at most" cell}
  defp rows do
    for [_, option, default, bound] <-
          Regex.scan(~r/^\| `:(\w+)` \| `([^`]+)` \|([^|]*)\|/m, File.read!(@guide)),
        into: %{},
        do: {String.to_existing_atom(option), {default, bound}}
  end

  defp integers(cell),
    do:
      for(
        [n] <- Regex.scan(~r/\d[\d_]*/, cell),
        do: n |> String.replace("_", "") |> String.to_integer()
      )

  test "the table has one row per option, with the code's default" do
    rows = rows()
    defaults = Options.defaults()
    assert Enum.sort(Map.keys(rows)) == Enum.sort(Keyword.keys(defaults))

    for {option, {default, _bound}} <- rows do
      {value, []} = Code.eval_string(default)

      assert value == defaults[option],
             "#{option}: the guide says #{default}, the code #{inspect(defaults[option])}"
    end
  end

  test "each default and bound of a limit is the one in the table of limits (KinoTrace.Limits)" do
    rows = rows()

    for {option, limits} <- Enum.group_by(KinoTrace.Limits.table(), &option_of/1),
        option != nil and not match?({:record, _}, option) do
      assert {default, cell} = rows[option], "#{option} has no row in the guide"
      maxima = limits |> Enum.map(& &1.max) |> Enum.dedup()

      assert integers(cell) == maxima,
             "#{option}: the guide says at most #{String.trim(cell)}, the table #{inspect(maxima, charlists: :as_lists)}"

      {value, []} = Code.eval_string(default)

      expected =
        case limits do
          [%{option: {:queue, _}} | _] ->
            for %{option: {:queue, part}, default: d} <- limits, do: {part, d}

          [%{option: {:rate, _}} | _] ->
            nil

          [%{default: d}] ->
            d
        end

      assert value == expected,
             "#{option}: the guide says #{default}, the table #{inspect(expected)}"
    end
  end

  defp option_of(%{option: {:record, _} = option}), do: option
  defp option_of(%{option: {option, _part}}), do: option
  defp option_of(%{option: option}), do: option

  # The values to try for a bound of `option`: each {at the bound, one past it}.
  defp probes(:rate, [count, period]),
    do: [{{count, 1}, {count + 1, 1}}, {{1, period}, {1, period + 1}}]

  defp probes(:queue, [max]),
    do: [{[events: max], [events: max + 1]}, {[bytes: max], [bytes: max + 1]}]

  defp probes(_option, [max]), do: [{max, max + 1}]

  test "each bound of the table is the code's: accepted, and one more refused" do
    bounded =
      for {option, {_default, cell}} <- rows(), integers(cell) != [], do: {option, integers(cell)}

    assert Enum.sort(Keyword.keys(bounded)) ==
             Enum.sort([
               :limit,
               :rate,
               :queue,
               :max_depth,
               :max_items,
               :max_binary,
               :max_bytes,
               :timeout,
               :history,
               :slowest
             ])

    for {option, bound} <- bounded, {at, past} <- probes(option, bound) do
      assert Options.validate!([{option, at}])[option] == at or option == :queue

      error = assert_raise ArgumentError, fn -> Options.validate!([{option, past}]) end
      assert error.message =~ "invalid value for #{inspect(option)}: expected", error.message
      assert error.message =~ "at most", error.message
    end
  end

  test "the recorder's table has one row per option of record/2, with the code's default and the table's bound" do
    rows =
      for [_, option, default, bound] <-
            Regex.scan(~r/^\| `(\w+):` \| `([^`]+)` \|([^|]*)\|/m, File.read!(@guide)),
          into: %{},
          do: {String.to_existing_atom(option), {default, bound}}

    schema = KinoTrace.Plan.Record.schema()
    assert Enum.sort(Map.keys(rows)) == Enum.sort(Keyword.keys(schema))
    defaults = KinoTrace.Options.defaults(schema)

    maxima =
      for %{option: {:record, option}, max: max} <- KinoTrace.Limits.table(),
          into: %{},
          do: {option, max}

    for {option, {default, cell}} <- rows do
      {value, []} = Code.eval_string(default)

      assert value == defaults[option],
             "#{option}: the guide says #{default}, the code #{inspect(defaults[option])}"

      assert integers(cell) == List.wrap(maxima[option]),
             "#{option}: the guide says at most #{cell}"
    end
  end
end
