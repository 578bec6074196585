defmodule Mix.Tasks.Compile.KinoTraceNif.LivebookOutputTest do
  # What the first install says reaches a Livebook notebook (issue 39 item 13). Livebook
  # shows a cell's standard output, which it takes as the group leader of the process
  # evaluating the cell (its IO proxy), and not standard error (that goes to the terminal
  # Livebook runs in). So `Mix.install/1` of a clone runs here in a process whose group
  # leader keeps what it is sent, as Livebook's does, and what the build says must be
  # there: its progress, and the warning of a build that went without the library.
  use ExUnit.Case, async: true

  import KinoTraceTest.InstallClone, only: [clone!: 1, bin_dir!: 1, run: 4]

  setup do
    dir =
      Path.join(
        System.tmp_dir!(),
        "kino_trace_livebook_output_#{System.unique_integer([:positive])}"
      )

    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{dir: dir, clone: clone!(dir)}
  end

  # Mix.install in a process whose group leader is a StringIO; what it got is written to
  # captured.txt.
  @script """
  {:ok, device} = StringIO.open("")
  parent = self()

  spawn(fn ->
    Process.group_leader(self(), device)
    Mix.install([{:kino_trace, path: System.fetch_env!("KINO_TRACE_CLONE")}])
    send(parent, :installed)
  end)

  receive do
    :installed -> File.write!("captured.txt", elem(StringIO.contents(device), 1))
  after
    600_000 -> raise "Mix.install did not finish"
  end
  """

  defp install(dir, clone, path) do
    File.write!(Path.join(dir, "script.exs"), @script)
    {out, status} = run(dir, Path.join(dir, "script.exs"), path, [{"KINO_TRACE_CLONE", clone}])
    assert status == 0, out
    File.read!(Path.join(dir, "captured.txt"))
  end

  @tag timeout: 900_000
  test "without a toolchain, the warning is in the notebook's output", %{dir: dir, clone: clone} do
    captured = install(dir, clone, bin_dir!(dir))

    assert captured =~
             "warning: kino_trace: its native tracer was not built: missing CMake 3.18 or newer"

    assert captured =~ "sudo apt-get install cmake"
  end

  @tag timeout: 900_000
  test "the native build's progress is in the notebook's output", %{dir: dir, clone: clone} do
    captured = install(dir, clone, System.get_env("PATH"))
    assert captured =~ "kino_trace: building its native tracer"
    assert captured =~ ~r/kino_trace:   compiling c_src\/nif\/\S+\.cpp/
    assert captured =~ ~r/native tracer built in \d+\.\d s/
  end
end
