defmodule KinoTraceTest.Project.StructureTest do
  # What issue 24 asks of the structure, checked on the compiled application and the
  # source tree: a small public surface, and small files.
  use ExUnit.Case, async: true

  # The modules HexDocs lists: the API, what it returns, the front ends a user calls,
  # and the Kino adapters. Every other module is `@moduledoc false` (its notes are
  # comments, its examples doctests of its functions). A new public module is a
  # deliberate change of this list.
  @public [
    Kino.Trace,
    Kino.Trace.Assertions,
    Kino.Trace.Capture,
    Kino.Trace.Cut,
    Kino.Trace.Event,
    Kino.Trace.FileError,
    Kino.Trace.Foreign,
    Kino.Trace.Mermaid,
    Kino.Trace.Plan,
    Kino.Trace.Printer,
    Kino.Trace.SmartCell,
    Kino.Trace.Stats,
    Kino.Trace.Stats.Row,
    Kino.Trace.Stats.Snapshot,
    Kino.Trace.StatsWidget,
    Kino.Trace.Widget
  ]

  # The Kino adapters are compiled only where Kino is (never in CI): their files are
  # read instead.
  @kino_adapters %{
    Kino.Trace.SmartCell => "lib/kino/trace/smart_cell.ex",
    Kino.Trace.StatsWidget => "lib/kino/trace/stats_widget.ex",
    Kino.Trace.Widget => "lib/kino/trace/widget.ex"
  }

  test "mix docs groups the public modules, each once" do
    grouped =
      Mix.Project.config()[:docs][:groups_for_modules] |> Keyword.values() |> List.flatten()

    assert Enum.sort(grouped) == Enum.sort(@public)
  end

  test "the tree shows the layers: the public part in lib/kino, the engine in lib/kino_trace" do
    # Every module lives at the path its name gives (Kino.Trace.Stats.Row in
    # lib/kino/trace/stats/row.ex, KinoTrace.Session.Drain in
    # lib/kino_trace/session/drain.ex); the public part is Kino.Trace.*, the engine
    # KinoTrace.*, and nothing else is defined in lib/.
    misplaced =
      for path <- Path.wildcard("lib/**/*.ex"),
          [_, name] <- Regex.scan(~r/^ {0,2}defmodule ([\w.]+) do/m, File.read!(path)),
          top = name |> String.split(".") |> hd(),
          expected = expected_path(name),
          top not in ["Kino", "KinoTrace"] or
            (top == "Kino" and name not in Enum.map(@public, &inspect/1)) or
            (path != expected and not nested?(path, name)),
          do: {name, path}

    assert misplaced == []
  end

  test "everything in lib/kino_trace is @moduledoc false" do
    {:ok, modules} = :application.get_key(:kino_trace, :modules)

    documented =
      for module <- modules,
          String.starts_with?(inspect(module), "KinoTrace."),
          match?({:docs_v1, _, _, _, %{}, _, _}, Code.fetch_docs(module)),
          do: module

    assert documented == []

    # and the Kino-only one, which is not compiled here
    refute File.read!("lib/kino_trace/widget/live.ex") =~ ~r/^\s+@moduledoc """/m
  end

  defp expected_path(name),
    do: "lib/" <> (name |> String.split(".") |> Enum.map_join("/", &Macro.underscore/1)) <> ".ex"

  # A module defined inside another one's file (a struct's helper, say) sits under it.
  defp nested?(path, name) do
    Enum.any?(1..(length(String.split(name, ".")) - 1)//1, fn n ->
      expected_path(name |> String.split(".") |> Enum.drop(-n) |> Enum.join(".")) == path
    end)
  end

  @max_lines 450

  test "at most 16 modules carry a public moduledoc, and they are the listed ones" do
    {:ok, modules} = :application.get_key(:kino_trace, :modules)

    public =
      for module <- modules,
          lib_module?(module),
          match?({:docs_v1, _, _, _, %{}, _, _}, Code.fetch_docs(module)),
          do: module

    adapters =
      for {module, path} <- @kino_adapters,
          File.read!(path) =~ ~r/^\s+@moduledoc """/m,
          do: module

    # with Kino, the adapters are compiled too and found both ways
    assert Enum.sort(Enum.uniq(public ++ adapters)) == Enum.sort(@public)
    assert length(@public) <= 16
  end

  # test/support is compiled into the application in the test environment
  defp lib_module?(module) do
    source = module.module_info(:compile) |> Keyword.get(:source, []) |> List.to_string()
    String.contains?(source, "/lib/")
  end

  # The lines of doc heredocs (@moduledoc, @doc, @typedoc) do not count: every public
  # function's doc has a runnable example (issue 41), which would otherwise push the API's
  # files over the bound without a line more of code.
  test "no file in lib/ or src/ is over #{@max_lines} lines, docs aside" do
    long =
      for path <- Path.wildcard("lib/**/*.ex") ++ Path.wildcard("src/*.erl"),
          lines = path |> File.read!() |> String.split("\n") |> code_lines(),
          lines > @max_lines + 1,
          do: {path, lines}

    assert long == []
  end

  defp code_lines(lines) do
    {count, _in_doc?} =
      Enum.reduce(lines, {0, false}, fn line, {count, in_doc?} ->
        cond do
          in_doc? -> {count, String.trim(line) != ~s(""")}
          line =~ ~r/^\s*@(moduledoc|doc|typedoc)\s+(~[sS])?"""\s*$/ -> {count, true}
          true -> {count + 1, false}
        end
      end)

    count
  end

  # Tests synchronise on events (messages, monitors, trace_delivered, a state polled by
  # wait_until/1), not on sleeps. A timed sleep is left only where time itself is the
  # subject (a rate per window, a timeout to outlast, a figure sampled while a workload
  # runs), and says so: `# time is the subject: why` within the 3 lines above it. A
  # sleep that is the traced workload (a sample function whose job is to wait) is
  # marked `# the workload: what` and not counted; nor is a parked process's
  # sleep(:infinity).
  @max_sleeps 11

  test "fewer than 12 timed sleeps in test/, each saying why time is its subject" do
    sleeps =
      for path <- Path.wildcard("test/**/*.{ex,exs}"),
          lines = path |> File.read!() |> String.split("\n"),
          {line, n} <- Enum.with_index(lines, 1),
          line =~ ~r/(Process\.sleep|:timer\.sleep)\((?!:infinity\))/,
          do: {"#{path}:#{n}", sleep_kind(Enum.slice(lines, max(n - 4, 0)..(n - 2)//1))}

    unexplained = for {where, :unexplained} <- sleeps, do: where
    timed = for {where, :timed} <- sleeps, do: where

    assert unexplained == [],
           "timed sleeps with no \"# time is the subject:\" comment in the 3 lines above: #{Enum.join(unexplained, ", ")}"

    assert length(timed) <= @max_sleeps,
           "#{length(timed)} timed sleeps (at most #{@max_sleeps}): #{Enum.join(timed, ", ")}"
  end

  # What the comments in the 3 lines above a sleep say it is.
  defp sleep_kind(above) do
    cond do
      Enum.any?(above, &(&1 =~ ~r/^\s*# the workload:/)) -> :workload
      Enum.any?(above, &(&1 =~ ~r/^\s*# time is the subject:/)) -> :timed
      true -> :unexplained
    end
  end

  # Tests read a server's state through its :internals request
  # (KinoTrace.Client.internals/1), which says what is there to read, not by reaching
  # into its struct.
  test "no test reads a server's state with :sys.get_state" do
    readers =
      for path <- Path.wildcard("test/**/*.{ex,exs}"),
          path != "test/project/structure_test.exs",
          File.read!(path) =~ ":sys.get_state",
          do: path

    assert readers == []
  end

  # The servers wait on events (a DOWN, a reply, a timer message they handle), never by
  # sleeping: a sleeping server answers nothing meanwhile.
  test "no code in lib/ or src/ sleeps" do
    sleepers =
      for path <- Path.wildcard("lib/**/*.ex") ++ Path.wildcard("src/*.erl"),
          {line, n} <- path |> File.read!() |> String.split("\n") |> Enum.with_index(1),
          not String.starts_with?(String.trim_leading(line), ["#", "%"]),
          line =~ ~r/(Process\.sleep|:timer\.sleep|timer:sleep)\(/,
          do: "#{path}:#{n}"

    assert sleepers == []
  end
end
