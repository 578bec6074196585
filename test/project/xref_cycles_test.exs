defmodule KinoTraceTest.Project.XrefCyclesTest do
  # The layers are a graph without cycles: no file of lib/ depends, through any chain of
  # calls, structs or macros, on a file that depends on it (issue 24, "No cycles"). What
  # `mix xref graph --format cycles` reports, checked in the test run itself.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  test "mix xref graph --format cycles finds no cycle between files" do
    output =
      capture_io(fn ->
        try do
          Mix.Tasks.Xref.run(["graph", "--format", "cycles"])
        rescue
          e in Mix.Error -> IO.puts(Exception.message(e))
        end
      end)

    # (Elixir 1.18 lists cycles, 1.20 the files of each strongly connected group: either
    # way, no file of lib/ may be named)
    in_cycles =
      for [path] <- Regex.scan(~r{^\s+(lib/\S+)}m, output, capture: :all_but_first),
          uniq: true,
          do: path

    assert in_cycles == [], output
    assert output =~ "No cycles found", output
  end
end
