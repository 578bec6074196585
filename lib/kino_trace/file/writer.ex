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
  #
  # A trace of other nodes (`nodes:`) writes each node's events on that node, at `path`
  # there (relative to that node's working directory): this process keeps the rules (the
  # frames, when to rotate) and sends that node's ready frames to its agent's worker,
  # whose `kino_trace_agent_files` writes them and holds the cap on that node's disk (it
  # refuses a write past a file's share, and gives the file being written its end frame
  # when the trace ends there). Before those workers end, the trace (its coordinator)
  # has this process send them the frames of every event it delivered, and waits until
  # they took them in (a sync, bounded in time): a file there holds every event the
  # trace delivered, even one delivered just before `stop/1`. Nothing of those events is
  # written here; `Kino.Trace.open({node, path})` fetches a file.

  alias KinoTrace.{Client, Internal}
  alias KinoTrace.File.Format

  # how long stop/1 waits for the writer to write what was delivered (await_end/2)
  @await_end_ms 1_000

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
  Starts writing `trace`'s events to `spec`'s files (each node's on that node) and
  returns the writer's pid. Raises `ArgumentError` when a file cannot hold a header and
  an event frame, or `File.Error` when the first file cannot be written.
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

    files =
      Map.new(Client.call(trace, :workers), fn {node, sink} ->
        file = %{node: node, sink: sink, paths: List.to_tuple(paths(spec)), per_file: per_file}
        {node, start!(file, info)}
      end)

    parent = self()

    pid =
      spawn(fn ->
        receive do
          {:go, ^parent} -> :ok
        end

        files = Map.new(files, fn {node, file} -> {node, reopen(file)} end)
        state = %{trace: trace, info: info, files: files, dropped: 0}
        loop(state, Process.monitor(trace.session))
      end)

    Internal.register(pid)
    for {_node, %{sink: nil, io: io}} <- files, do: :file.close(io)
    Client.subscribe(trace, pid)

    # (the trace's stop/1 waits for this writer to end, and has it catch up first
    # with the workers of other nodes before they end)
    :ok = Client.call(trace, {:files_writer, pid})

    send(pid, {:go, parent})
    pid
  end

  @doc """
  Waits until the writer `pid` (nil: none) has ended, its files closed with their end
  frames, for at most `timeout` ms: `stop/1` answers after it, so that a file opened
  then holds every event the trace delivered. A writer slower than that goes on.
  """
  @spec await_end(pid() | nil, timeout()) :: :ok
  def await_end(pid, timeout \\ @await_end_ms)
  def await_end(nil, _timeout), do: :ok

  def await_end(pid, timeout) when is_pid(pid) do
    ref = Process.monitor(pid)

    receive do
      {:DOWN, ^ref, :process, _, _} -> :ok
    after
      timeout -> Process.demonitor(ref, [:flush])
    end

    :ok
  end

  # The first file of a node: what was there under these names counts against the cap,
  # it goes first. This node's is opened here first, so a path that cannot be written
  # is the caller's error (then again, appending, by the writer that owns it); another
  # node's worker deletes and opens them there.
  defp start!(%{sink: nil} = file, info) do
    Enum.each(Tuple.to_list(file.paths), &File.rm/1)
    open_file!(Map.merge(file, %{io: nil, index: 0, size: 0, count: 0}), 0, info)
  end

  defp start!(%{node: node, sink: worker} = file, info) when is_pid(worker) do
    header = IO.iodata_to_binary(Format.header_frame(info, node))
    paths = Tuple.to_list(file.paths)

    case KinoTrace.Agent.call(worker, {:files_open, paths, file.per_file, {header, end_frame(0)}}) do
      :ok ->
        Map.merge(file, %{io: nil, index: 0, size: byte_size(header), count: 0})

      {:error, reason} ->
        raise File.Error,
          reason: reason,
          action: "write trace file on node #{inspect(node)}",
          path: hd(paths)
    end
  end

  defp start!(%{node: node, sink: error}, _info),
    do:
      raise(
        ArgumentError,
        "to: cannot write the files of node #{inspect(node)}: #{inspect(error)}"
      )

  # (this node's files are opened by the process that writes them: raw files are its own)
  defp open_file!(%{sink: nil} = file, index, info) do
    path = elem(file.paths, index)

    case :file.open(path, [:write, :binary, :raw]) do
      {:ok, io} ->
        header = Format.header_frame(info)
        :ok = :file.write(io, header)
        %{file | io: io, index: index, size: IO.iodata_length(header), count: 0}

      {:error, reason} ->
        raise File.Error, reason: reason, action: "write trace file", path: path
    end
  end

  defp open_file!(%{sink: worker, node: node} = file, index, info) do
    header = IO.iodata_to_binary(Format.header_frame(info, node))
    send(worker, {:kino_trace_files, {:rotate, index, header, end_frame(0)}})
    %{file | index: index, size: byte_size(header), count: 0}
  end

  defp reopen(%{sink: nil} = file) do
    {:ok, io} = :file.open(elem(file.paths, file.index), [:append, :binary, :raw])
    %{file | io: io}
  end

  defp reopen(file), do: file

  defp end_frame(count), do: IO.iodata_to_binary(Format.end_frame(count))

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

      # the trace is ending: what it delivered before is written here, or sent to the
      # workers of other nodes and taken in there
      {:kino_trace_files_sync, from, sync, deadline} ->
        synced(state, deadline)
        send(from, {sync, :synced})
        loop(state, ref)

      {:DOWN, ^ref, :process, _, _} ->
        finish(state)
    end
  end

  # each node's events to its files (events of a node with none are left out, counted)
  defp write(state, events) do
    events
    |> Enum.group_by(&(&1.node || node()))
    |> Enum.reduce(state, fn {node, events}, state ->
      case state.files do
        %{^node => file} ->
          {file, dropped} = write_file(file, events, state.info)
          %{state | files: Map.put(state.files, node, file), dropped: state.dropped + dropped}

        _ ->
          %{state | dropped: state.dropped + length(events)}
      end
    end)
  end

  defp write_file(file, events, info) do
    room = file.per_file - IO.iodata_length(Format.header_frame(info, file.node)) - reserve()

    events
    |> Format.event_frames(max(div(room, 2), 64))
    |> Enum.reduce({file, 0}, fn {frame, n}, {file, dropped} ->
      cond do
        # one event too large for any file
        byte_size(frame) > room ->
          {file, dropped + n}

        file.size + byte_size(frame) + reserve() > file.per_file ->
          {file |> rotate(info) |> put(frame, n), dropped}

        true ->
          {put(file, frame, n), dropped}
      end
    end)
  end

  defp put(%{sink: nil} = file, frame, n) do
    :ok = :file.write(file.io, frame)
    %{file | size: file.size + byte_size(frame), count: file.count + n}
  end

  # (with the end frame of the file as it is after this frame: the worker gives the file
  # the last one it had when the trace ends there)
  defp put(%{sink: worker} = file, frame, n) do
    send(worker, {:kino_trace_files, {:write, frame, end_frame(file.count + n)}})
    %{file | size: file.size + byte_size(frame), count: file.count + n}
  end

  defp rotate(%{sink: nil} = file, info) do
    :ok = :file.write(file.io, Format.end_frame(file.count))
    :file.close(file.io)
    open_file!(file, rem(file.index + 1, tuple_size(file.paths)), info)
  end

  defp rotate(file, info), do: open_file!(file, rem(file.index + 1, tuple_size(file.paths)), info)

  # Each worker has taken in the frames sent before (a call answered after them), by
  # `deadline` (monotonic milliseconds) at the latest.
  defp synced(state, deadline) do
    for {_node, %{sink: worker}} when is_pid(worker) <- state.files,
        request = :gen_server.send_request(worker, :files_sync),
        do: :gen_server.receive_response(request, {:abs, deadline})
  end

  defp finish(state) do
    for {_node, file} <- state.files do
      case file.sink do
        nil ->
          :file.write(file.io, Format.end_frame(file.count))
          :file.close(file.io)

        worker ->
          send(worker, {:kino_trace_files, :close})
      end
    end
  end
end
