defmodule Kino.Trace.CutTest do
  use ExUnit.Case, async: true

  doctest Kino.Trace.Cut
  doctest KinoTrace.Tracer
end
