defmodule KinoTraceTest.Project.ReadmeFactsTest do
  # Facts the contributors' guide (CONTRIBUTING.md, where the README's architecture
  # section moved) states about the code, checked against the code: the drop reasons of
  # its accounting, and who destroys the OTP trace sessions.
  use ExUnit.Case, async: true

  @readme Path.expand("../../CONTRIBUTING.md", __DIR__)

  test "the architecture notes' drop reasons are the code's" do
    readme = File.read!(@readme)
    [_, list] = Regex.run(~r/dropped with one\s+reason \(([^)]*?)(?::[^)]*)?\)/, readme)
    listed = for [_, reason] <- Regex.scan(~r/`(\w+)`/, list), do: reason

    # what Kino.Trace.info/1 reports, whichever tracer runs
    trace = Kino.Trace.calls([&String.length/1], pids: [self()])
    reported = Kino.Trace.info(trace).dropped |> Map.keys() |> Enum.map(&Atom.to_string/1)
    :ok = Kino.Trace.stop(trace)
    assert Enum.sort(listed) == Enum.sort(reported)

    # and what the native tracer counts
    if KinoTrace.Tracer.loaded?() do
      resource = KinoTrace.Tracer.new_session(self(), %{})

      counted =
        for key <- Map.keys(KinoTrace.Tracer.counters(resource)),
            "dropped_" <> reason <- [Atom.to_string(key)],
            do: reason

      KinoTrace.Tracer.close(resource)
      assert Enum.sort(listed) == Enum.sort(counted)
    end
  end

  test "the architecture notes name every module that destroys a trace session" do
    readme = File.read!(@readme)
    root = Path.expand("../..", __DIR__)

    destroyers =
      for path <- Path.wildcard(Path.join(root, "{lib,src}/**/*.{ex,erl}")),
          File.read!(path) =~ ~r/session_destroy\(|&:trace\.session_destroy\//,
          do: Path.relative_to(path, root)

    assert destroyers != []

    for path <- destroyers do
      name =
        case Path.extname(path) do
          ".erl" ->
            path

          ".ex" ->
            path |> File.read!() |> then(&Regex.run(~r/defmodule ([\w.]+)/, &1)) |> List.last()
        end

      assert readme =~ name or readme =~ String.replace(name, "KinoTrace.Session.", ""),
             "#{path} destroys trace sessions: CONTRIBUTING.md's architecture section must say so"
    end
  end
end
