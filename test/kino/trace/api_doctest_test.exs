defmodule KinoTraceTest.ApiDoctestTest do
  # The examples of the API's docs, run on real traces of the calling process (each
  # example's trace ends with its test). The other public modules' examples run in
  # their own tests (plan_test, printer_test, event_test, cut_test, mermaid_test,
  # loss_test for Kino.Trace.Capture, stats_payload_test for the stats snapshot).
  use ExUnit.Case, async: true

  doctest Kino.Trace
  doctest Kino.Trace.Assertions
  doctest Kino.Trace.Stats
  doctest Kino.Trace.FileError
  doctest Kino.Trace.Foreign
end
