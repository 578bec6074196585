defmodule Kino.Trace.PlanTest do
  use ExUnit.Case, async: true

  doctest Kino.Trace.Plan
  doctest Kino.Trace.History
  doctest Kino.Trace.Nodes
  doctest Kino.Trace.Remote
end
