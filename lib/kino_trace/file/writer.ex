defmodule KinoTrace.File.Writer do
  @moduledoc false
  # The `to:` option of a trace: a subscriber that streams the trace's events to
  # rotating trace files, as dbg's wrap files do.
  #
  # `files` files of at most `max_bytes div files` bytes each, named after `path` with
  # their number (`repo.ktrace` -> `repo.0.ktrace`, `repo.1.ktrace`...), written in
  # turn: when the next frame would not fit (with room kept for the end frame), the
  # file gets its end frame and the next one is started over (truncated first). Each
  # file is a whole trace file (`Kino.Trace.open/2` opens any of them), so the disk they
  # use never exceeds `max_bytes`. An event too large for a file is left out (the
  # writer counts it in its state). A write that fails (a full disk) ends the writer.
  # A file being written when the VM stops is cut short, and opens with its torn tail
  # counted.

  alias KinoTrace.{Client, Internal}
  alias KinoTrace.File.Format

  @typedoc "Where to write: as the `:to` option takes it."
  @type spec :: %{path: Path.t(), max_bytes: pos_integer(), files: pos_integer()}

  @doc """
  The files of `spec`, in the order they are written.

      iex> KinoTrace.File.Writer.paths(%{path: "logs/repo.ktrace", files: 2, max_bytes: 1_000_000})
      ["logs/repo.0.ktrace", "logs/repo.1.ktrace"]
  """
  @spec paths(spec()) :: [Path.t()]
  def paths(%{path: path, files: files}) do
    root = Path.rootname(path)
    ext = Path.extname(path)
    for i <- 0..(files - 1), do: "#{root}.#{i}#{ext}"
  end

  @doc """
  Starts writing `trace`'s events to `spec`'s files and returns the writer's pid. Raises
  `ArgumentError` when a file cannot hold a header and an event frame, or
  `File.Error` when the first file cannot be written.
  """
  @spec attach(Client.trace(), spec()) :: pid()
  def attach(trace, spec) do
    per_file = div(spec.max_bytes, spec.files)
    info = Client.info(trace)
    header = IO.iodata_length(Format.header_frame(info))

    if header + reserve() + 256 > per_file,
      do:
        raise(
          ArgumentError,
          "to: max_bytes gives each of the #{spec.files} files #{per_file} bytes, too few for a trace file (at least #{header + reserve() + 256})"
        )

    # what was there under these names counts against the cap: it goes first
    Enum.each(paths(spec), &File.rm/1)

    state = %{
      trace: trace,
      paths: List.to_tuple(paths(spec)),
      per_file: per_file,
      info: info,
      index: 0,
      io: nil,
      size: 0,
      count: 0,
      dropped: 0
    }

    state = open_file!(state, 0)
    parent = self()

    pid =
      spawn(fn ->
        receive do
          {:go, ^parent} -> :ok
        end

        loop(%{state | io: reopen(state)}, Process.monitor(trace.session))
      end)

    Internal.register(pid)
    :file.close(state.io)
    Client.subscribe(trace, pid)
    send(pid, {:go, parent})
    pid
  end

  # (the file is opened here first, so a path that cannot be written is the caller's
  # error; then again, appending, by the writer that owns it)
  defp open_file!(state, index) do
    path = elem(state.paths, index)

    case :file.open(path, [:write, :binary, :raw]) do
      {:ok, io} ->
        header = Format.header_frame(state.info)
        :ok = :file.write(io, header)
        %{state | io: io, index: index, size: IO.iodata_length(header), count: 0}

      {:error, reason} ->
        raise File.Error, reason: reason, action: "write trace file", path: path
    end
  end

  defp reopen(state) do
    {:ok, io} = :file.open(elem(state.paths, state.index), [:append, :binary, :raw])
    io
  end

  # room kept in every file for its end frame
  defp reserve, do: IO.iodata_length(Format.end_frame(Bitwise.bsl(1, 62))) + 16

  defp loop(state, ref) do
    id = state.trace.id

    receive do
      {:kino_trace, ^id, {:events, events}} ->
        loop(write(state, events), ref)

      {:kino_trace, ^id, {:status, status}} when status in [:running, :paused] ->
        loop(state, ref)

      {:kino_trace, ^id, {:status, _ended}} ->
        finish(state)

      {:DOWN, ^ref, :process, _, _} ->
        finish(state)
    end
  end

  defp write(state, events) do
    room = state.per_file - IO.iodata_length(Format.header_frame(state.info)) - reserve()

    events
    |> Format.event_frames(max(div(room, 2), 64))
    |> Enum.reduce(state, fn {frame, n}, state ->
      cond do
        # one event too large for any file
        byte_size(frame) > room ->
          %{state | dropped: state.dropped + n}

        state.size + byte_size(frame) + reserve() > state.per_file ->
          state |> rotate() |> put(frame, n)

        true ->
          put(state, frame, n)
      end
    end)
  end

  defp put(state, frame, n) do
    :ok = :file.write(state.io, frame)
    %{state | size: state.size + byte_size(frame), count: state.count + n}
  end

  defp rotate(state) do
    :ok = :file.write(state.io, Format.end_frame(state.count))
    :file.close(state.io)
    open_file!(state, rem(state.index + 1, tuple_size(state.paths)))
  end

  defp finish(state) do
    :file.write(state.io, Format.end_frame(state.count))
    :file.close(state.io)
  end
end
