defmodule KinoTrace.File.FormatFuzzTest do
  # A trace file is untrusted input (issue 37.3): whatever its bytes, opening it is
  # `{:ok, ...}` or a clear error with an offset, never a crash, a new atom, or memory
  # or time beyond the caps. Bounded to a few seconds.
  use ExUnit.Case, async: false

  alias Kino.Trace.Event
  alias KinoTrace.File.{Codec, Format}
  alias KinoTrace.Base.Name

  setup do
    dir = Path.join(System.tmp_dir!(), "kino_trace_fuzz_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{dir: dir}
  end

  @info %{id: 7, status: :running, patterns: ["Enum.sum/1"], accepted: 12, delivered: 12}

  defp sample_events(n) do
    for i <- 1..n do
      %Event{
        id: i,
        kind: if(rem(i, 2) == 1, do: :call, else: :return),
        node: node(),
        pid: self(),
        module: Enum,
        function: :sum,
        arity: 1,
        args: if(rem(i, 2) == 1, do: [[i, i + 1]]),
        return: if(rem(i, 2) == 0, do: {:ok, "r#{i}", make_ref()}),
        call_id: if(rem(i, 2) == 0, do: i - 1),
        time: 1_000 + i,
        monotonic: i,
        depth: 0
      }
    end
  end

  defp write!(dir, name, events, opts \\ []) do
    path = Path.join(dir, name)
    :ok = Format.write(path, @info, events, opts)
    path
  end

  defp frame(type, body), do: <<type, byte_size(body)::32, :erlang.crc32(body)::32, body::binary>>

  # The offsets where frames start (and the file's size).
  defp boundaries(bin, offset \\ 0, acc \\ [0])
  defp boundaries(bin, offset, acc) when offset >= byte_size(bin), do: Enum.reverse(acc)

  defp boundaries(bin, offset, acc) do
    <<_::binary-size(^offset), _type, len::32, _::binary>> = bin
    next = offset + 9 + len
    boundaries(bin, next, [next | acc])
  end

  defp read(bin, dir, caps \\ []) do
    path = Path.join(dir, "fuzz.ktrace")
    File.write!(path, bin)
    Format.read(path, caps)
  end

  test "a file cut at every offset: before its header an error, after it the events of its whole frames and the torn tail counted",
       %{dir: dir} do
    events = sample_events(6)
    # small frames, so cuts fall between and inside several of them
    full = File.read!(write!(dir, "full.ktrace", events, batch_bytes: 100))
    [0, header_end | _] = bounds = boundaries(full)
    assert length(bounds) >= 5
    {:ok, whole} = read(full, dir)
    assert whole.events == events and whole.file.complete

    for cut <- 0..byte_size(full) do
      case read(binary_part(full, 0, cut), dir) do
        {:error, reason, 0} ->
          assert cut < header_end, "a cut at #{cut} failed: #{reason}"

        {:ok, contents} ->
          assert cut >= header_end
          last_whole = bounds |> Enum.filter(&(&1 <= cut)) |> Enum.max()
          assert contents.file.torn_bytes == cut - last_whole
          assert contents.file.complete == (cut == byte_size(full))
          assert contents.events == Enum.take(events, length(contents.events))
          assert contents.file.events == length(contents.events)
      end
    end
  end

  test "random bit flips: an error with an offset, or (a length flipped past the end) a torn file, never a crash",
       %{dir: dir} do
    full = File.read!(write!(dir, "full.ktrace", sample_events(50)))
    :rand.seed(:exsss, {37, 3, 1})

    outcomes =
      for _ <- 1..400 do
        bit = :rand.uniform(bit_size(full)) - 1
        <<before::bitstring-size(^bit), b::1, rest::bitstring>> = full

        case read(<<before::bitstring, 1 - b::1, rest::bitstring>>, dir) do
          {:error, reason, offset} ->
            assert is_integer(offset) and offset <= byte_size(full)
            refute reason =~ "unexpected"
            :error

          {:ok, contents} ->
            refute contents.file.complete
            :torn
        end
      end

    assert :error in outcomes
  end

  test "hostile frames with valid checksums: the decoder errs with an offset, never raises", %{
    dir: dir
  } do
    file = File.read!(write!(dir, "one.ktrace", sample_events(4)))
    [0, at | _] = boundaries(file)
    <<header::binary-size(^at), 2, len::32, _crc::32, body::binary-size(len), _::binary>> = file
    plain = :zlib.uncompress(body)
    :rand.seed(:exsss, {37, 3, 2})

    for i <- 1..400 do
      mutated =
        case rem(i, 3) do
          # a byte changed
          0 ->
            at = :rand.uniform(byte_size(plain)) - 1
            <<a::binary-size(^at), _, b::binary>> = plain
            <<a::binary, :rand.uniform(256) - 1, b::binary>>

          # cut short
          1 ->
            binary_part(plain, 0, :rand.uniform(byte_size(plain)) - 1)

          # random bytes
          2 ->
            :crypto.strong_rand_bytes(:rand.uniform(64))
        end

      bin = header <> frame(2, :zlib.compress(mutated))

      case read(bin, dir) do
        {:ok, contents} ->
          assert is_list(contents.events)

        {:error, reason, offset} ->
          assert offset == byte_size(header) and not (reason =~ "unexpected")
      end
    end
  end

  test "huge length prefixes and counts are errors naming the offset, before any allocation", %{
    dir: dir
  } do
    header = IO.iodata_to_binary(Format.header_frame(@info))
    at = byte_size(header)

    assert {:error, reason, ^at} = read(header <> <<2, 0xFFFFFFFF::32, 0::32>>, dir)
    assert reason =~ "a frame of 4294967295 bytes"

    for data <- [
          <<7, 0xFFFFFFFF::32>>,
          <<8, 0xFFFFFFFF::32>>,
          <<9, 0xFFFFFFFF::32>>,
          <<5, 0xFFFFFFFF::32, "abc">>,
          <<2, 0, 0xFFFFFFFF::32>>,
          <<4, 0xFFFFFFFF::32>>
        ] do
      assert {:error, reason, ^at} = read(header <> frame(2, :zlib.compress(data)), dir)
      assert reason =~ ~r/elements|keys|bytes|cut short/
    end

    # deep nesting stops at its cap
    deep = :binary.copy(<<7, 1::32>>, 20_000) <> <<0>> <> :binary.copy(<<0>>, 20_000)
    assert {:error, reason, ^at} = read(header <> frame(2, :zlib.compress(deep)), dir)
    assert reason =~ "nested deeper"
  end

  test "a zlib bomb stops at the frame's cap, and at max_bytes:", %{dir: dir} do
    header = IO.iodata_to_binary(Format.header_frame(@info))
    z = :zlib.open()
    :ok = :zlib.deflateInit(z, 9)
    zeros = :binary.copy(<<0>>, 1024 * 1024)
    chunks = for _ <- 1..40, do: :zlib.deflate(z, zeros)
    bomb = IO.iodata_to_binary([chunks, :zlib.deflate(z, [], :finish)])
    :zlib.close(z)
    # 40 MB of zeros in a frame of some 40 KB
    assert byte_size(bomb) < 100_000
    bin = header <> frame(2, bomb)

    {time, result} = :timer.tc(fn -> read(bin, dir) end)
    assert {:error, reason, _} = result
    assert reason =~ "inflates to more than #{Format.max_frame()} bytes"
    # generous: it stops after the frame's cap, not after 40 MB
    assert time < 10_000_000

    assert {:error, reason, _} = read(bin, dir, max_bytes: 100_000)
    assert reason =~ "inflates to more than"
  end

  test "a million distinct atom names create no atom: they stay names", %{dir: dir} do
    # (warm up: the modules opening a file uses are loaded, their atoms made)
    warm = [
      %Event{
        id: 1,
        kind: :call,
        module: %Name{text: "Elixir.KtFuzzGone"},
        function: :f,
        arity: 1,
        args: [%Name{text: "kt_fuzz_warm"}]
      }
    ]

    trace = Kino.Trace.open(write!(dir, "warm.ktrace", warm))
    [opened] = Kino.Trace.events(trace)
    assert inspect(opened) =~ "KtFuzzGone.f(:kt_fuzz_warm)"
    :ok = Kino.Trace.stop(trace)

    # ten events, each with 100_000 names as its arguments, written as bytes
    [0, at | _] = boundaries(File.read!(write!(dir, "header.ktrace", [])))
    header = binary_part(File.read!(Path.join(dir, "header.ktrace")), 0, at)
    fields = Map.from_struct(%Event{id: 1, kind: :call}) |> Enum.sort()

    frames =
      for chunk <- 0..9 do
        names =
          for i <- 1..100_000, into: <<>>, do: atom_bytes("kt_fuzz_atom_#{chunk * 100_000 + i}")

        args = [Codec.list_head(100_000), names, Codec.encode([])]

        event =
          [<<8, length(fields)::32>>]
          |> Kernel.++(
            for {key, value} <- fields, do: if(key == :args, do: args, else: Codec.encode(value))
          )

        frame(2, :zlib.compress([Codec.list_head(1), event, Codec.encode([])]))
      end

    path = Path.join(dir, "atoms.ktrace")
    File.write!(path, [header | frames])
    before = :erlang.system_info(:atom_count)
    assert {:ok, %{events: events}} = Format.read(path)
    assert :erlang.system_info(:atom_count) == before
    assert length(events) == 10
    assert hd(hd(events).args) == %Name{text: "kt_fuzz_atom_1"}
    assert inspect(hd(hd(events).args)) == ":kt_fuzz_atom_1"
  end

  defp atom_bytes(text), do: <<4, byte_size(text)::32, text::binary>>

  test "other bad files are clear errors naming the file", %{dir: dir} do
    missing = Path.join(dir, "missing.ktrace")
    error = assert_raise Kino.Trace.FileError, fn -> Kino.Trace.open(missing) end

    assert Exception.message(error) ==
             "cannot open the trace file #{missing}: no such file or directory"

    not_trace = Path.join(dir, "not.ktrace")
    File.write!(not_trace, "hello, this is not a trace file at all")
    error = assert_raise Kino.Trace.FileError, fn -> Kino.Trace.open(not_trace) end
    assert Exception.message(error) =~ "cannot open the trace file #{not_trace}: "
    assert error.offset == 0

    # a later format version
    <<1, len::32, _crc::32, "KINO_TRACE", 1::16, rest::binary-size(len - 12), tail::binary>> =
      File.read!(write!(dir, "v.ktrace", sample_events(2)))

    body = <<"KINO_TRACE", 2::16, rest::binary>>

    assert {:error, "format version 2; this kino_trace reads version 1", 0} =
             read(frame(1, body) <> tail, dir)

    # an atom name that is not UTF-8, and data after the end frame
    header = IO.iodata_to_binary(Format.header_frame(@info))

    assert {:error, reason, _} =
             read(header <> frame(2, :zlib.compress(<<4, 2::32, 0xFF, 0xFE>>)), dir)

    assert reason =~ "not UTF-8"
    complete = File.read!(write!(dir, "c.ktrace", sample_events(2)))
    assert {:error, "data after the end frame", _} = read(complete <> "x", dir)

    # too many events for max_events:
    assert {:error, reason, _} = read(complete, dir, max_events: 1)
    assert reason =~ "max_events"
  end

  test "a file from a node this node does not know: its names stay names, its pids print as they did",
       %{dir: dir} do
    event = %Event{
      id: 1,
      kind: :send,
      node: node(),
      pid: self(),
      peer: self(),
      data: {:hi, make_ref()}
    }

    encoded =
      IO.iodata_to_binary(
        Codec.encode([
          event |> Map.from_struct() |> Enum.sort() |> Enum.map(&elem(&1, 1)) |> List.to_tuple()
        ])
      )

    here = Atom.to_string(node())
    gone = "kt_gone@nowhere"

    moved =
      :binary.replace(
        encoded,
        <<4, byte_size(here)::32, here::binary>>,
        <<4, byte_size(gone)::32, gone::binary>>,
        [:global]
      )

    header = IO.iodata_to_binary(Format.header_frame(@info))
    assert {:ok, %{events: [opened]}} = read(header <> frame(2, :zlib.compress(moved)), dir)

    assert opened.node == %Name{text: gone}
    assert opened.pid == %Kino.Trace.Foreign{type: :pid, text: inspect(self())}
    assert {:hi, %Kino.Trace.Foreign{type: :reference}} = opened.data
    assert inspect(opened) =~ "kt_gone@nowhere #{inspect(self())}"
  end
end
