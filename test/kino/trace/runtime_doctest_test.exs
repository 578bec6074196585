defmodule Kino.Trace.RuntimeDoctestTest do
  # The examples of kino_trace's runtime processes. async: false: the reaper's example
  # expects no trace of a BIF to be running.
  use ExUnit.Case, async: false

  doctest Kino.Trace.Internal
  doctest Kino.Trace.Final
  doctest Kino.Trace.Reaper
end
