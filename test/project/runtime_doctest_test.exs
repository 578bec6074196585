defmodule KinoTraceTest.Project.RuntimeDoctestTest do
  # The examples of kino_trace's runtime processes. async: false: the reaper's example
  # expects no trace of a BIF to be running.
  use ExUnit.Case, async: false

  doctest KinoTrace.Internal
  doctest KinoTrace.Client.Final
  doctest KinoTrace.Backend.Reaper
  doctest KinoTrace.Backend.BifWorkaround
end
