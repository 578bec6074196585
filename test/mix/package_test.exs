defmodule KinoTraceTest.Mix.PackageTest do
  # What Hex would ship (mix.exs, `package: files:`) builds on its own: exactly those
  # files, copied into an empty directory, compile as a path dependency of a scratch
  # project, the native tracer included (KINO_TRACE_NATIVE=required: a failed native
  # build is an error), with no Hex (an empty MIX_HOME: the scratch project fetches
  # nothing). A trace then runs on the native tracer. Slow (it builds everything once):
  # `make test-quick` leaves it out. Not async: it would hold one of the few async slots
  # for minutes (isolation_test's two modules must run at the same time).
  use ExUnit.Case, async: false

  @moduletag :slow
  @moduletag timeout: 900_000

  @root Path.expand("../..", __DIR__)

  # The package's files, as Hex expands `files:` (a directory with all it holds, a glob),
  # relative to the project's root.
  defp package_files do
    Mix.Project.config()[:package][:files]
    |> Enum.flat_map(&Path.wildcard(Path.join(@root, &1), match_dot: true))
    |> Enum.flat_map(fn path ->
      if File.dir?(path), do: Path.wildcard(Path.join(path, "**"), match_dot: true), else: [path]
    end)
    |> Enum.reject(&File.dir?/1)
    |> Enum.map(&Path.relative_to(&1, @root))
    |> Enum.uniq()
    |> Enum.sort()
  end

  test "the package ships no tests, benchmarks, builds or JS sources, and has what it needs" do
    files = package_files()

    shipped_dev =
      for file <- files,
          part <- Path.split(file),
          part in ~w(test tests bench _build _build29 deps node_modules .git) or
            String.starts_with?(file, "assets/"),
          uniq: true,
          do: file

    assert shipped_dev == []

    for needed <- ~w(mix.exs LICENSE CHANGELOG.md README.md CMakeLists.txt
                     mix/compile.kino_trace_nif.ex lib/kino/trace.ex src/kino_trace_tracer.erl
                     c_src/nif/kino_trace_nif.cpp c_src/core/session_core.hpp),
        do: assert(needed in files, "#{needed} is not in the package")

    # the committed bundles `use Kino.JS, assets_path:` serves
    for bundle <- ~w(trace stats smart_cell),
        do: assert(Enum.any?(files, &String.starts_with?(&1, "lib/assets/#{bundle}/build/")))
  end

  @scratch_mix """
  defmodule Scratch.MixProject do
    use Mix.Project
    def project, do: [app: :scratch, version: "0.0.1", deps: [{:kino_trace, path: "../kino_trace"}]]
  end
  """

  @script ~S"""
  defmodule Scratch.Shop do
    def place(order), do: {:ok, order}
  end

  t = Kino.Trace.calls(["Scratch.Shop.place/1"], return: true)
  Scratch.Shop.place(:seven)
  :erlang.trace_delivered(self())
  receive do {:trace_delivered, _, _} -> :ok end
  IO.puts("RESULT tracer: #{inspect(Kino.Trace.info(t).tracer)}")
  IO.puts("RESULT load_error: #{inspect(KinoTrace.Tracer.load_error())}")
  IO.puts("RESULT events: #{inspect(Enum.map(Kino.Trace.events(t, 10), &{&1.kind, &1.args, &1.return}))}")
  Kino.Trace.stop(t)
  """

  setup do
    dir = Path.join(System.tmp_dir!(), "kino_trace_package_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{dir: dir}
  end

  test "exactly the package's files compile as a dependency, with the native tracer", %{dir: dir} do
    package = Path.join(dir, "kino_trace")

    for file <- package_files() do
      File.mkdir_p!(Path.dirname(Path.join(package, file)))
      File.cp!(Path.join(@root, file), Path.join(package, file))
    end

    scratch = Path.join(dir, "scratch")
    File.mkdir_p!(scratch)
    File.write!(Path.join(scratch, "mix.exs"), @scratch_mix)
    File.write!(Path.join(scratch, "script.exs"), @script)

    # Mix and the build see nothing of this project's environment: no MIX_* variable, an
    # empty MIX_HOME and HOME (no Hex, no archives).
    env =
      for(
        {name, _} <- System.get_env(),
        String.starts_with?(name, ["MIX_", "KINO_TRACE_"]),
        do: {name, nil}
      ) ++
        [
          {"MIX_ENV", "dev"},
          {"MIX_HOME", Path.join(dir, "mix_home")},
          {"HEX_HOME", Path.join(dir, "hex_home")},
          {"HOME", Path.join(dir, "home")},
          {"KINO_TRACE_NATIVE", "required"},
          {"CI", nil}
        ]

    {out, status} =
      System.cmd("mix", ["run", "script.exs"], cd: scratch, env: env, stderr_to_stdout: true)

    assert status == 0, out
    refute out =~ "Hex", out
    assert result(out, "tracer") == ":native", out
    assert result(out, "load_error") == "nil", out

    assert result(out, "events") ==
             inspect([{:call, [:seven], nil}, {:return, nil, {:ok, :seven}}])

    # the build is the scratch project's: nothing was written into the package
    assert Enum.sort(relative_files(package)) == package_files()
  end

  defp relative_files(dir),
    do:
      for(
        f <- Path.wildcard(Path.join(dir, "**"), match_dot: true),
        not File.dir?(f),
        do: Path.relative_to(f, dir)
      )

  defp result(out, name) do
    case Regex.run(~r/^RESULT #{name}: (.*)$/m, out, capture: :all_but_first) do
      [value] -> value
      nil -> flunk("no RESULT #{name} in:\n#{out}")
    end
  end
end
