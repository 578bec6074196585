defmodule KinoTrace.Agent.FilesTest do
  # What holds the `to:` option's cap on another node's disk (kino_trace_agent_files, run
  # by the agent's worker there): whatever it is sent, no file grows past its share, and
  # each closes with the last end frame it was given (issue 37 items 3 and 4).
  use ExUnit.Case, async: true

  setup do
    dir =
      Path.join(System.tmp_dir!(), "kino_trace_agent_files_#{System.unique_integer([:positive])}")

    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf(dir) end)
    %{tmp_dir: dir}
  end

  test "writes past a file's share are refused; a file closes within it", %{tmp_dir: dir} do
    paths = for i <- 0..1, do: Path.join(dir, "t.#{i}.ktrace")
    File.write!(hd(paths), :binary.copy("old", 10_000))

    {:ok, files} = :kino_trace_agent_files.open(paths, 100, {"HEADER", "END"})
    # what was there under these names went first
    assert File.stat!(hd(paths)).size == 6
    refute File.exists?(List.last(paths))

    files =
      Enum.reduce(1..20, files, fn _, files ->
        :kino_trace_agent_files.write(files, :binary.copy("x", 10), "END2")
      end)

    # 6 + 9 frames of 10 + 4 = 100: the tenth and later are refused
    assert %{written: 9, refused: 11} = :kino_trace_agent_files.figures(files)

    # a frame larger than the share, a file index out of range: refused too
    files = :kino_trace_agent_files.write(files, :binary.copy("y", 200), "E")
    files = :kino_trace_agent_files.rotate(files, 5, "HEADER", "END")
    assert %{refused: 13} = :kino_trace_agent_files.figures(files)

    files = :kino_trace_agent_files.rotate(files, 1, "HEADER", "END")
    assert File.read!(hd(paths)) == "HEADER" <> :binary.copy("x", 90) <> "END2"

    files = :kino_trace_agent_files.close(files)
    assert File.read!(List.last(paths)) == "HEADEREND"
    assert %{io: :undefined} = files
  end

  test "a file that cannot be written is an error with its reason", %{tmp_dir: dir} do
    path = Path.join([dir, "no_such_dir", "t.0.ktrace"])
    assert {:error, :enoent} = :kino_trace_agent_files.open([path], 100, {"H", "E"})
  end
end
