defmodule Kino.Trace.PlanTest do
  use ExUnit.Case, async: true

  doctest Kino.Trace.Plan
  doctest KinoTrace.History
  doctest KinoTrace.Plan.Nodes
  doctest KinoTrace.Remote
end
