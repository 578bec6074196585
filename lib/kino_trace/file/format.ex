defmodule KinoTrace.File.Format do
  @moduledoc false
  # Trace files: writing one (`write/4`) and reading one (`read/2`). The "Trace files"
  # guide documents the format; this is its one implementation.
  #
  # A file is a sequence of self-delimiting frames:
  #
  #     <<type::8, size::32, crc32::32, body::binary-size(size)>>
  #
  # `crc32` is `:erlang.crc32(body)`. The first frame is the header (type 1): its body is
  # the magic `"KINO_TRACE"`, the format version (16 bits) and the zlib-compressed
  # header term. Then event frames (type 2), each a zlib-compressed list of events, and
  # an end frame (type 3) with the counts. Terms are `KinoTrace.File.Codec`'s.
  #
  # Reading treats the file as untrusted: frames are read one at a time (a frame is at
  # most @max_frame bytes), each is inflated within what is left of the decompressed
  # budget (`:max_bytes`), decoding within a budget of items, and at most `:max_events`
  # events are kept. A file cut short (its last frame incomplete, no end frame) opens:
  # the bytes of the incomplete frame are counted as its torn tail.

  alias Kino.Trace.Event
  alias KinoTrace.File.{Checks, Codec}

  @magic "KINO_TRACE"
  @version 1
  @header 1
  @events 2
  @end_frame 3
  @head_size 9

  # A frame's body on disk, and decompressed.
  @max_frame 16 * 1024 * 1024
  # What writing puts in one event frame (uncompressed), before starting the next.
  @batch_bytes 256 * 1024

  @fields Checks.fields()

  @doc "The format version this writes, and the only one it reads."
  @spec version() :: pos_integer()
  def version, do: @version

  @doc "The caps `read/2` applies unless told otherwise: `:max_events`, `:max_bytes` (decompressed)."
  @spec default_caps() :: keyword()
  def default_caps, do: [max_events: 1_000_000, max_bytes: 64 * 1024 * 1024]

  @doc "The largest frame, on disk or decompressed."
  @spec max_frame() :: pos_integer()
  def max_frame, do: @max_frame

  @typedoc "What a file holds."
  @type contents :: %{
          info: map(),
          events: [Event.t()],
          file: %{
            format: pos_integer(),
            events: non_neg_integer(),
            torn_bytes: non_neg_integer(),
            complete: boolean(),
            written_at: integer() | nil,
            node: term(),
            otp: String.t() | nil
          }
        }

  @doc """
  Writes `events` (oldest first) and the trace's `info` to `path` (replacing it).
  Returns `:ok` or `{:error, posix}`; raises `ArgumentError` for an event too large for
  a frame. `batch_bytes:` is how much (uncompressed) an event frame holds before the
  next one starts.
  """
  @spec write(Path.t(), map(), [Event.t()], keyword()) :: :ok | {:error, File.posix()}
  def write(path, info, events, opts \\ []) do
    with {:ok, io} <- :file.open(path, [:write, :binary, :raw, :delayed_write]) do
      try do
        write!(io, header_frame(info))
        count = write_events(io, events, Keyword.get(opts, :batch_bytes, @batch_bytes))
        write!(io, end_frame(count))
        # (a delayed write's error comes when the file closes)
        :file.close(io)
      catch
        {:write_error, reason} ->
          :file.close(io)
          {:error, reason}
      end
    end
  end

  @doc """
  The header frame of a file of the trace whose info is `info`, written on `node` (the
  `to:` option's files of another node's events are written there).
  """
  @spec header_frame(map(), node()) :: iodata()
  def header_frame(info, node \\ node()) do
    header = %{
      info: info,
      node: node,
      otp: System.otp_release(),
      written_at: System.os_time(:microsecond)
    }

    frame(@header, [@magic, <<@version::16>>, compress(Codec.encode(header))])
  end

  @doc "Event frames for `events` (about `batch_bytes` each), written to `io`: how many events."
  @spec write_events(:file.io_device(), [Event.t()], pos_integer()) :: non_neg_integer()
  def write_events(io, events, batch_bytes) do
    events
    |> event_frames(batch_bytes)
    |> Enum.reduce(0, fn {frame, n}, count ->
      write!(io, frame)
      count + n
    end)
  end

  @doc """
  The event frames of `events`, each about `batch_bytes` (uncompressed) or one event:
  `{frame, how many events}`, lazily.
  """
  @spec event_frames([Event.t()], pos_integer()) :: Enumerable.t()
  def event_frames(events, batch_bytes) do
    events
    |> Stream.map(&encode_event/1)
    |> Stream.chunk_while({[], 0, 0}, &chunk(&1, &2, batch_bytes), &chunk_done/1)
    |> Stream.map(fn {encoded, n} ->
      {IO.iodata_to_binary(
         frame(@events, compress([Codec.list_head(n), encoded, Codec.encode([])]))
       ), n}
    end)
  end

  @doc "The end frame of a file of `count` events."
  @spec end_frame(non_neg_integer()) :: iodata()
  def end_frame(count), do: frame(@end_frame, compress(Codec.encode(%{events: count})))

  defp write!(io, data) do
    case :file.write(io, data) do
      :ok -> :ok
      {:error, reason} -> throw({:write_error, reason})
    end
  end

  defp encode_event(%Event{} = event) do
    encoded =
      IO.iodata_to_binary(Codec.encode(List.to_tuple(Enum.map(@fields, &Map.fetch!(event, &1)))))

    if byte_size(encoded) > @max_frame,
      do:
        raise(
          ArgumentError,
          "event #{event.id} takes #{byte_size(encoded)} bytes: more than a frame holds"
        )

    encoded
  end

  defp chunk(encoded, {acc, n, bytes}, max) when bytes + byte_size(encoded) > max and n > 0,
    do: {:cont, {Enum.reverse(acc), n}, {[encoded], 1, byte_size(encoded)}}

  defp chunk(encoded, {acc, n, bytes}, _max),
    do: {:cont, {[encoded | acc], n + 1, bytes + byte_size(encoded)}}

  defp chunk_done({_acc, 0, _}), do: {:cont, {[], 0, 0}}
  defp chunk_done({acc, n, _}), do: {:cont, {Enum.reverse(acc), n}, {[], 0, 0}}

  defp compress(iodata), do: :zlib.compress(iodata)

  defp frame(type, body) do
    body = IO.iodata_to_binary(body)
    [<<type, byte_size(body)::32, :erlang.crc32(body)::32>>, body]
  end

  # --- reading ------------------------------------------------------------------------

  @doc """
  Reads the file at `path` within `caps` (`default_caps/0`): `{:ok, contents}`, or
  `{:error, reason, offset}` (`offset` is `nil` when the file could not be read at all).
  `{:ram, bytes}` reads a file's bytes, with the same rules (another node's file,
  fetched: `KinoTrace.File.Fetch`).
  """
  @spec read(Path.t() | {:ram, binary()}, keyword()) ::
          {:ok, contents()} | {:error, String.t(), non_neg_integer() | nil}
  def read(path, caps \\ []) do
    caps = Keyword.merge(default_caps(), caps)

    opened =
      case path do
        {:ram, bytes} when is_binary(bytes) -> :file.open(bytes, [:ram, :read, :binary])
        path -> :file.open(path, [:read, :binary, :raw])
      end

    case opened do
      {:ok, io} ->
        try do
          {:ok, size} = :file.position(io, :eof)
          read_file(io, size, caps)
        catch
          {:bad, reason, offset} -> {:error, reason, offset}
        after
          :file.close(io)
        end

      {:error, posix} ->
        {:error, :file.format_error(posix) |> to_string(), nil}
    end
  end

  defp read_file(io, size, caps) do
    state = %{
      io: io,
      size: size,
      bytes_left: caps[:max_bytes],
      events_left: caps[:max_events],
      max_events: caps[:max_events],
      batches: [],
      count: 0
    }

    case next_frame(state, 0) do
      {:frame, @header, body, offset} ->
        header = header!(body, state)
        frames(%{state | bytes_left: state.bytes_left - header.size}, offset, header.term)

      {:frame, _type, _body, _offset} ->
        throw({:bad, "not a trace file (it does not start with a header frame)", 0})

      {:torn, _bytes} ->
        throw({:bad, "not a trace file, or one cut short before its header was written", 0})

      :eof ->
        throw({:bad, "an empty file", 0})
    end
  end

  defp frames(state, offset, header) do
    case next_frame(state, offset) do
      {:frame, @events, body, next} ->
        frames(events(state, body, offset), next, header)

      {:frame, @end_frame, body, next} ->
        _ = inflate_decode(body, offset, state)
        if next != state.size, do: throw({:bad, "data after the end frame", next})
        done(state, header, 0, true)

      {:frame, type, _body, _next} ->
        throw({:bad, "a frame of unknown type #{type}", offset})

      {:torn, bytes} ->
        done(state, header, bytes, false)

      :eof ->
        done(state, header, 0, false)
    end
  end

  defp done(state, header, torn, complete) do
    events = state.batches |> Enum.reverse() |> Enum.concat()

    {:ok,
     %{
       info: Checks.info(header[:info]),
       events: events,
       file: %{
         format: @version,
         events: state.count,
         torn_bytes: torn,
         complete: complete,
         written_at: if(is_integer(header[:written_at]), do: header[:written_at]),
         node: header[:node],
         otp: if(is_binary(header[:otp]), do: header[:otp])
       }
     }}
  end

  # The next frame at `offset`: `{:frame, type, body, next offset}`, `{:torn, bytes}`
  # for an incomplete last frame, or `:eof`.
  defp next_frame(%{size: size}, offset) when offset >= size, do: :eof

  defp next_frame(%{io: io, size: size}, offset) do
    case :file.pread(io, offset, @head_size) do
      {:ok, <<type, len::32, crc::32>>} ->
        cond do
          len > @max_frame ->
            throw(
              {:bad, "a frame of #{len} bytes, more than the #{@max_frame} a frame may hold",
               offset}
            )

          offset + @head_size + len > size ->
            {:torn, size - offset}

          true ->
            {:ok, body} =
              if len == 0, do: {:ok, <<>>}, else: :file.pread(io, offset + @head_size, len)

            if byte_size(body) != len,
              do: throw({:bad, "the file changed while it was read", offset})

            if :erlang.crc32(body) != crc,
              do: throw({:bad, "a frame whose checksum does not match", offset})

            {:frame, type, body, offset + @head_size + len}
        end

      {:ok, _short} ->
        {:torn, size - offset}

      :eof ->
        :eof

      {:error, posix} ->
        throw({:bad, "could not read it: #{:file.format_error(posix)}", offset})
    end
  end

  defp header!(<<@magic, @version::16, compressed::binary>>, state) do
    {term, size} = inflate_decode_sized(compressed, 0, state)

    unless is_map(term) and is_map(term[:info]),
      do: throw({:bad, "a header without the trace's info", 0})

    %{term: term, size: size}
  end

  defp header!(<<@magic, version::16, _::binary>>, _state),
    do: throw({:bad, "format version #{version}; this kino_trace reads version #{@version}", 0})

  defp header!(_body, _state), do: throw({:bad, "not a trace file (no kino_trace magic)", 0})

  defp events(state, body, offset) do
    {term, size} = inflate_decode_sized(body, offset, state)
    unless is_list(term), do: throw({:bad, "an event frame that holds no list of events", offset})
    n = length(term)

    if n > state.events_left,
      do: throw({:bad, "more than #{state.max_events} events (the max_events: cap)", offset})

    events = Enum.map(term, &Checks.event!(&1, offset))

    %{
      state
      | batches: [events | state.batches],
        count: state.count + n,
        events_left: state.events_left - n,
        bytes_left: state.bytes_left - size
    }
  end

  defp inflate_decode(body, offset, state), do: elem(inflate_decode_sized(body, offset, state), 0)

  # Inflates `body` within what is left of the budget, then decodes it: `{term, size}`.
  defp inflate_decode_sized(body, offset, state) do
    cap = min(@max_frame, state.bytes_left)
    data = inflate(body, cap, offset)

    # every term but [] takes 5 bytes or more: the item budget bounds what a frame of
    # []s could make (a list cell per byte), so memory stays within a few words a byte
    case Codec.decode(data, div(byte_size(data), 2) + 64) do
      {:ok, term, _left} ->
        {term, byte_size(data)}

      {:error, reason, at} ->
        throw({:bad, "#{reason} (#{at} bytes into the frame's data)", offset})
    end
  end

  defp inflate(body, cap, offset) do
    z = :zlib.open()

    try do
      :ok = :zlib.inflateInit(z)
      inflate_loop(z, :zlib.safeInflate(z, body), [], 0, cap, offset)
    rescue
      ErlangError -> throw({:bad, "a frame whose compressed data is corrupt", offset})
    after
      :zlib.close(z)
    end
  end

  defp inflate_loop(z, {status, out}, acc, size, cap, offset) do
    size = size + IO.iodata_length(out)

    if size > cap,
      do:
        throw(
          {:bad, "a frame that inflates to more than #{cap} bytes (the max_bytes: cap)", offset}
        )

    case status do
      :finished ->
        IO.iodata_to_binary(Enum.reverse([out | acc]))

      :continue when out == [] or out == <<>> ->
        throw({:bad, "a frame whose compressed data is cut short", offset})

      :continue ->
        inflate_loop(z, :zlib.safeInflate(z, []), [out | acc], size, cap, offset)
    end
  end

  defp inflate_loop(_z, _other, _acc, _size, _cap, offset),
    do: throw({:bad, "a frame whose compressed data needs a dictionary", offset})
end
