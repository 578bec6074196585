defmodule KinoTrace.OptionsTest do
  use ExUnit.Case, async: true

  doctest KinoTrace.Options

  test "every validator words an unknown option and a bad value alike" do
    # Kino.Trace.calls/2, Kino.Trace.Stats.start/2, Kino.Trace.Mermaid and the widgets'
    # controllers all validate with KinoTrace.Options
    for {validate, key, known} <- [
          {&KinoTrace.Plan.Options.validate!/1, :limit, KinoTrace.Plan.Options.defaults()},
          {&KinoTrace.Stats.Options.validate!/1, :memory, KinoTrace.Stats.Options.defaults()},
          {&Kino.Trace.Mermaid.diagram([], &1), :last,
           [max_messages: 200, calls: true, args: false, max_label: 80, last: 10_000]}
        ] do
      typo = :"#{key}x"

      assert_raise ArgumentError,
                   KinoTrace.Base.Suggest.unknown_option(typo, Keyword.keys(known)),
                   fn ->
                     validate.([{typo, 1}])
                   end

      assert_raise ArgumentError,
                   ~r/^invalid value for #{inspect(key)}: expected .*, got: :nope$/,
                   fn ->
                     validate.([{key, :nope}])
                   end
    end
  end

  test "a bounded count names its bound, and its unit" do
    check = KinoTrace.Options.bounded_pos_integer(10, unit: "ms", nil: true)

    assert KinoTrace.Options.validate!([t: nil], t: {5, check}) == [t: nil]

    assert_raise ArgumentError, "invalid value for :t: expected at most 10 (ms), got: 11", fn ->
      KinoTrace.Options.validate!([t: 11], t: {5, check})
    end

    assert_raise ArgumentError, "invalid value for :t: expected a positive integer, got: 0", fn ->
      KinoTrace.Options.validate!([t: 0], t: {5, check})
    end
  end
end
