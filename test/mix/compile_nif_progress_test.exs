defmodule Mix.Tasks.Compile.KinoTraceNifProgressTest do
  # The NIF build runs inside `mix compile` or `Mix.install/2` for about 20 s; it must
  # say what it builds, how long that takes, each step as CMake reaches it and how long
  # it took (issue 25, "Setup feedback"). A real build, into a directory of its own, with
  # Mix's shell captured (Mix.shell/1 is global: not async).
  use ExUnit.Case, async: false

  @moduletag :slow

  alias Mix.Tasks.Compile.KinoTraceNif

  @root Path.expand("../..", __DIR__)

  setup do
    dir =
      Path.join(System.tmp_dir!(), "kino_trace_progress_#{System.unique_integer([:positive])}")

    shell = Mix.shell()
    Mix.shell(Mix.Shell.Process)

    on_exit(fn ->
      Mix.shell(shell)
      File.rm_rf!(dir)
    end)

    %{dir: dir}
  end

  @tag timeout: 600_000
  test "a build says what it builds and how long it takes, then each step, then its time", %{
    dir: dir
  } do
    priv = Path.join(dir, "priv")
    lib = Path.join(priv, "kino_trace_nif" <> KinoTraceNif.lib_suffix())

    assert KinoTraceNif.build(
             @root,
             Path.join(dir, "cmake"),
             [lib],
             KinoTraceNif.configure_args(priv, "")
           ) == :ok

    assert File.regular?(lib)

    lines = shell_lines()
    [first | rest] = lines
    assert first =~ "kino_trace: building its native tracer (a C++ NIF, with CMake)"
    assert first =~ "about half a minute, once"

    assert hd(rest) == "kino_trace:   configuring (CMake)"

    compiled =
      for line <- rest,
          [_, file] <- [Regex.run(~r/^kino_trace:   compiling (\S+) \[/, line)],
          do: file

    for file <- ~w(kino_trace_nif.cpp tracer_callbacks.cpp session_nifs.cpp decoder_nifs.cpp) do
      assert ("c_src/nif/" <> file) in compiled,
             "not reported: #{file} in\n#{Enum.join(lines, "\n")}"
    end

    assert Enum.any?(rest, &(&1 =~ ~r/^kino_trace:   linking kino_trace_nif\.so \[/))

    assert List.last(lines) =~
             ~r/^==> kino_trace: native tracer built in \d+\.\d s \(kino_trace_nif\.so\)$/

    # in that order: every step between the first line and the last
    assert Enum.find_index(rest, &(&1 =~ "linking")) > Enum.find_index(rest, &(&1 =~ "compiling"))
  end

  test "a failed build's output is still there for the error message", %{dir: dir} do
    # a target CMake does not know: `cmake --build` fails after configuring
    priv = Path.join(dir, "priv")
    lib = Path.join(priv, "no_such_target" <> KinoTraceNif.lib_suffix())
    build = Path.join(dir, "cmake")

    assert {:failed, message} =
             KinoTraceNif.build(@root, build, [lib], KinoTraceNif.configure_args(priv, ""))

    assert message =~ "building the native tracer failed"
    assert message =~ "no_such_target"
    refute List.last(shell_lines()) =~ "built in"
  end

  defp shell_lines(acc \\ []) do
    receive do
      {:mix_shell, :info, [line]} -> shell_lines([line | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end
end
