defmodule Kino.Trace.CutTest do
  use ExUnit.Case, async: true

  doctest Kino.Trace.Cut
  doctest Kino.Trace.Tracer
end
