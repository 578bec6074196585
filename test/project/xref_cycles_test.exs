defmodule KinoTraceTest.Project.XrefCyclesTest do
  # The layers are a graph without cycles: no file of lib/ depends, through any chain of
  # calls, structs or macros, on a file that depends on it (issue 24, "No cycles"); and
  # the engine's folders are layers whose arrows point down (issue 35.4). What
  # `mix xref graph` reports, checked in the test run itself.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  test "mix xref graph --format cycles finds no cycle between files" do
    output = xref(["graph", "--format", "cycles"])

    # (Elixir 1.18 lists cycles, 1.20 the files of each strongly connected group: either
    # way, no file of lib/ may be named)
    in_cycles =
      for [path] <- Regex.scan(~r{^\s+(lib/\S+)}m, output, capture: :all_but_first),
          uniq: true,
          do: path

    assert in_cycles == [], output
    assert output =~ "No cycles found", output
  end

  # The engine's parts, top to bottom: a part may use the parts below it, never one
  # above. A part is a folder of lib/kino_trace/ with its file (session/ and
  # session.ex), or a file alone there (client.ex). lib/kino/, the public part, is above
  # all of them (the engine reads its data: Event, Cut, Plan...).
  @order [
    # the OTP application: starts the servers below
    "application",
    # the front ends and what they are made of
    "smart_cell",
    "widget",
    "complete",
    "assertions",
    "capture",
    "render",
    # what runs a plan: the stats server (its latency traces through the launcher), the
    # launcher, the servers of several nodes and of one node's trace (whose recorder
    # snapshots into trace-file servers, Replay), what a trace keeps (latency, slow
    # calls, its history), the client every request goes through, and where a trace
    # runs: its backend, the agent on another node, the tracer
    "stats",
    "launcher",
    "remote",
    "session",
    "replay",
    "file",
    "server",
    "latency",
    "client",
    "history",
    "backend",
    "agent",
    "tracer",
    # what a trace is, checked before anything runs
    "plan",
    "pattern",
    # what everything may use: options, limits, kino_trace's own processes, and the
    # bottom layer: names, lookup, suggestions, the BIF table
    "options",
    "limits",
    "front",
    "starter",
    "internal",
    "base"
  ]

  test "the engine's folders are layers: every dependency points down the declared order" do
    edges = file_edges()

    engine =
      for {from, to} <- edges, path <- [from, to], part(path) != nil, uniq: true, do: part(path)

    assert Enum.sort(engine -- @order) == [],
           "parts of lib/kino_trace/ not placed in @order (place each in its layer): " <>
             inspect(Enum.sort(engine -- @order))

    # (and the graph was read: every part placed is one xref names)
    assert Enum.sort(@order -- engine) == [],
           "parts in @order that xref does not name: " <> inspect(Enum.sort(@order -- engine))

    rank = @order |> Enum.with_index() |> Map.new()

    upward =
      for {from, to} <- edges,
          a = part(from),
          b = part(to),
          a != nil and b != nil and a != b,
          rank[a] > rank[b],
          do: "#{from} (#{a}) -> #{to} (#{b})"

    assert upward == [], "dependencies pointing up the layers:\n" <> Enum.join(upward, "\n")
  end

  # {file, file it depends on}, every kind (compile, export, runtime), from
  # `mix xref graph --format plain`.
  defp file_edges do
    {edges, _file} =
      ["graph", "--format", "plain"]
      |> xref()
      |> String.split("\n", trim: true)
      |> Enum.reduce({[], nil}, fn line, {edges, file} ->
        case Regex.run(~r/^(?:\|-- |`-- )(\S+)/, line) do
          [_, dep] -> {[{file, dep} | edges], file}
          nil -> {edges, String.trim(line)}
        end
      end)

    edges
  end

  # The engine's part a file belongs to (nil: not the engine's).
  defp part(path) do
    case Path.split(path) do
      ["lib", "kino_trace", file] -> Path.rootname(file)
      ["lib", "kino_trace", folder | _] -> folder
      _ -> nil
    end
  end

  defp xref(args) do
    capture_io(fn ->
      try do
        Mix.Tasks.Xref.run(args)
      rescue
        e in Mix.Error -> IO.puts(Exception.message(e))
      end
    end)
  end
end
