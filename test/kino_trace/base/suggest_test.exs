defmodule SuggestTestSample do
  @moduledoc false
  def fetch_all(a, b), do: {a, b}
  def put(a, b, c), do: {a, b, c}
end

defmodule KinoTrace.Base.SuggestTest do
  use ExUnit.Case, async: true

  alias KinoTrace.Assertions.{CallPattern, Format, Validation}
  alias SuggestTestSample, as: Sample
  alias KinoTrace.Base.Suggest

  doctest KinoTrace.Base.Suggest

  describe "the rule" do
    test "a few edits away, a quarter of the name's length (1 to 3), a swap counting as one" do
      assert Suggest.closest(:limt, [:pids, :limit, :rate]) == :limit
      assert Suggest.closest(:tiem, [:pids, :time, :memory]) == :time
      assert Suggest.closest("GenServerx", ["GenServer", "Agent"]) == "GenServer"
      # 2 edits: too many for a name of 4, enough for one of 8
      refute Suggest.close?("mpaa", "map")
      assert Suggest.close?("chidlren", "children")
      refute Suggest.close?("abcdefghijkl", "abcdwxyzijkl")
    end

    test "a Jaro similarity of at least 0.9, whatever the edits" do
      assert String.jaro_distance("get_and_update", "get_and_updaet_x") >= 0.9
      assert Suggest.close?("get_and_update", "get_and_updaet_x")
    end

    test "the given name plus a suffix, from a stem of 3" do
      assert Suggest.similar(:fetch, [:fetch_all, :put, :fetch_many]) == [:fetch_all, :fetch_many]
      assert Suggest.close?("flat", "flat_map")
      refute Suggest.close?("fe", "fetch_all")
      # not the other way: a known name that is a prefix of a longer given one
      refute Suggest.close?("Enumm" <> String.duplicate("x", 20), "Enum")
    end

    test "the closest first: fewest edits, then Jaro similarity; never the name itself" do
      assert Suggest.similar("fecth", ["fetch_all", "fetch!", "fetch", "fecth"]) == ["fetch"]
      assert Suggest.similar("fetch", ["fetch_all", "fetch!", "fetch"]) == ["fetch!", "fetch_all"]
      assert Suggest.similar("Enumm", ["Enum", "Enumerable", "Enum.Empty"]) == ["Enum"]
      assert Suggest.similar(:colour, [:pids, :time]) == []
      assert Suggest.closest(:x, []) == nil
    end
  end

  describe "every front end suggests by the rule" do
    # `fetch` for `fetch_all`: a stem. Before KinoTrace.Base.Suggest the pattern checks did
    # not suggest it (they wanted a Jaro similarity of 0.9; it is 0.85), the assertions
    # did (0.8 and 0.75), as did the options (above 0.8).
    test "options, patterns, assertions and failure messages give the same suggestion" do
      assert Suggest.closest(:fetch, Sample.__info__(:functions) |> Keyword.keys()) == :fetch_all

      # options (KinoTrace.Options, every front end's validator)
      schema = [
        fetch_all: {1, KinoTrace.Options.pos_integer()},
        put: {1, KinoTrace.Options.pos_integer()}
      ]

      error =
        assert_raise ArgumentError, fn -> KinoTrace.Options.validate!([fetch: 1], schema) end

      assert error.message ==
               "unknown option :fetch (did you mean :fetch_all?). Known options: :fetch_all, :put"

      # patterns (KinoTrace.Pattern.Preflight)
      assert [{_, {:error, message}}] =
               KinoTrace.Pattern.parse_each(["#{inspect(Sample)}.fetch/2"])

      assert message ==
               "#{inspect(Sample)}.fetch/2 is not a function; did you mean #{inspect(Sample)}.fetch_all/2?"

      # assertions about a function that does not exist (KinoTrace.Assertions.Validation)
      error =
        assert_raise ArgumentError, fn ->
          Validation.validate_function!(%CallPattern{
            module: Sample,
            function: :fetch,
            arity: 2,
            source: "",
            matcher: nil
          })
        end

      assert error.message =~ "(did you mean fetch_all/2?)"

      # the closest calls of a failed assertion (KinoTrace.Assertions.Format)
      assert Format.closest({Sample, :fetch, 2}, [{Sample, :put, 3}, {Sample, :fetch_all, 2}]) ==
               [{Sample, :fetch_all, 2}]
    end

    test "and none of them suggests a name the rule finds far" do
      schema = [fetch_all: {1, KinoTrace.Options.pos_integer()}]

      error =
        assert_raise ArgumentError, fn -> KinoTrace.Options.validate!([colour: 1], schema) end

      refute error.message =~ "did you mean"

      assert [{_, {:error, message}}] =
               KinoTrace.Pattern.parse_each(["#{inspect(Sample)}.colour/2"])

      refute message =~ "did you mean"

      error =
        assert_raise ArgumentError, fn ->
          Validation.validate_function!(%CallPattern{
            module: Sample,
            function: :colour,
            arity: 2,
            source: "",
            matcher: nil
          })
        end

      refute error.message =~ "did you mean"

      assert Format.closest({Sample, :colour, 2}, [{Sample, :put, 3}, {Sample, :fetch_all, 2}]) ==
               []
    end

    test "the calls options and the stats options word an unknown option alike" do
      calls = assert_raise ArgumentError, fn -> KinoTrace.Plan.Options.validate!(limt: 1) end
      stats = assert_raise ArgumentError, fn -> KinoTrace.Stats.Options.validate!(tiem: true) end

      assert calls.message ==
               Suggest.unknown_option(:limt, Keyword.keys(KinoTrace.Plan.Options.defaults()))

      assert stats.message ==
               Suggest.unknown_option(:tiem, Keyword.keys(KinoTrace.Stats.Options.defaults()))

      assert calls.message =~
               ~r/^unknown option :limt \(did you mean :limit\?\)\. Known options: :pids, /

      assert stats.message =~
               ~r/^unknown option :tiem \(did you mean :time\?\)\. Known options: :pids, /
    end

    test "the rule lives in KinoTrace.Base.Suggest only: no other module measures names" do
      offenders =
        for path <- Path.wildcard("lib/**/*.ex"),
            path != "lib/kino_trace/base/suggest.ex",
            File.read!(path) =~ ~r/jaro_distance|edit_distance/,
            do: path

      assert offenders == []
    end
  end
end
