defmodule Kino.Trace.XrefCyclesTest do
  # The layers are a graph without cycles: no file of lib/ depends, through any chain of
  # calls, structs or macros, on a file that depends on it (issue 24, "No cycles"). What
  # `mix xref graph --format cycles` reports, checked in the test run itself.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  # Not broken yet: a module that owns a struct and is also the front door calling
  # down into modules that take that struct (Kino.Trace with Printer, Capture and
  # Mermaid; Kino.Trace.Pattern with its Preflight). The files still in a cycle; remove
  # them as their cycles are broken. Any other file in a cycle fails the test. (Elixir
  # 1.18 lists cycles, 1.20 the files of each strongly connected group: both are read
  # as the set of files in some cycle.)
  @not_yet_broken ~w(
    lib/kino/trace.ex
    lib/kino/trace/capture.ex
    lib/kino/trace/capture/collector.ex
    lib/kino/trace/mermaid.ex
    lib/kino/trace/printer.ex
    lib/kino/trace/pattern.ex
    lib/kino/trace/pattern/preflight.ex
  )

  test "mix xref graph --format cycles finds no cycle between files but the known ones" do
    output =
      capture_io(fn ->
        try do
          Mix.Tasks.Xref.run(["graph", "--format", "cycles"])
        rescue
          e in Mix.Error -> IO.puts(Exception.message(e))
        end
      end)

    in_cycles =
      for [path] <- Regex.scan(~r{^\s+(lib/\S+)}m, output, capture: :all_but_first),
          uniq: true,
          do: path

    assert in_cycles != [] or output =~ "No cycles found", output
    assert in_cycles -- @not_yet_broken == [], output
  end
end
