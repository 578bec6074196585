defmodule Kino.Trace.DidYouMeanTest do
  use ExUnit.Case, async: true

  alias Kino.Trace.DidYouMean

  doctest Kino.Trace.DidYouMean

  test "the calls options and the stats options word an unknown option alike" do
    calls = assert_raise ArgumentError, fn -> Kino.Trace.Options.validate!(limt: 1) end
    stats = assert_raise ArgumentError, fn -> Kino.Trace.Stats.Options.validate!(tiem: true) end

    assert calls.message ==
             DidYouMean.unknown_option(:limt, Keyword.keys(Kino.Trace.Options.defaults()))

    assert stats.message ==
             DidYouMean.unknown_option(:tiem, Keyword.keys(Kino.Trace.Stats.Options.defaults()))

    assert calls.message =~
             ~r/^unknown option :limt \(did you mean :limit\?\)\. Known options: :pids, /

    assert stats.message =~
             ~r/^unknown option :tiem \(did you mean :time\?\)\. Known options: :pids, /
  end
end
