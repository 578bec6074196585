defmodule KinoTrace.Plan.DidYouMeanTest do
  use ExUnit.Case, async: true

  alias KinoTrace.Plan.DidYouMean

  doctest KinoTrace.Plan.DidYouMean

  test "the calls options and the stats options word an unknown option alike" do
    calls = assert_raise ArgumentError, fn -> KinoTrace.Plan.Options.validate!(limt: 1) end
    stats = assert_raise ArgumentError, fn -> KinoTrace.Stats.Options.validate!(tiem: true) end

    assert calls.message ==
             DidYouMean.unknown_option(:limt, Keyword.keys(KinoTrace.Plan.Options.defaults()))

    assert stats.message ==
             DidYouMean.unknown_option(:tiem, Keyword.keys(KinoTrace.Stats.Options.defaults()))

    assert calls.message =~
             ~r/^unknown option :limt \(did you mean :limit\?\)\. Known options: :pids, /

    assert stats.message =~
             ~r/^unknown option :tiem \(did you mean :time\?\)\. Known options: :pids, /
  end
end
