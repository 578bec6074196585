defmodule Kino.Trace.FilesNodesTest do
  # Trace files of other nodes (issue 37 items 3 and 4): the `to:` option of a trace of
  # another node writes that node's events on that node, within the cap there, and
  # `Kino.Trace.open({node, path})` fetches one; the node is left as it was, but for the
  # files.
  use KinoTraceTest.PeerCase, async: false

  import KinoTraceTest.Helpers, only: [wait_until: 3]

  alias Kino.Trace
  alias KinoTraceTest.Remote.Echo

  # A peer whose working directory is a folder of its own (outside the temporary
  # directory its footprint lists): relative paths there are not paths here. A first
  # trace loads the OTP modules tracing needs (the node's own, they stay).
  defp peer_with_cwd(name) do
    {_peer, n, tmp} = bare_peer(name)
    cwd = Path.join(System.tmp_dir!(), "kino_trace_cwd_#{System.unique_integer([:positive])}")
    File.mkdir_p!(cwd)
    on_exit(fn -> File.rm_rf(cwd) end)
    :ok = :erpc.call(n, :file, :set_cwd, [cwd])
    {n, tmp, cwd, footprint_after_trace(n, tmp)}
  end

  # the files `to:` writes (repo.N.ktrace) in that node's working directory, and their
  # sizes there (with :file alone, the node's own loaded module)
  defp sizes(n) do
    {:ok, names} = :erpc.call(n, :file, :list_dir, [~c"."])

    for name <- Enum.sort(names),
        List.to_string(name) =~ ~r/^repo\.\d+\.ktrace$/,
        {:ok, info} = :erpc.call(n, :file, :read_file_info, [name]),
        do: {List.to_string(name), elem(info, 1)}
  end

  for agent <- [:auto, :fallback] do
    test "to: on another node writes there, within the cap; open({node, path}) fetches (agent: #{agent})" do
      {n, tmp, cwd, before} = peer_with_cwd(:"files_#{unquote(agent)}")
      cap = 24_000
      # (relative: that node's working directory)
      to = [path: "repo.ktrace", max_bytes: cap, files: 3]

      trace =
        Trace.calls(["KinoTraceTest.Remote.Echo.echo/1"],
          nodes: [n],
          agent: unquote(agent),
          to: to
        )

      # random payloads (zlib cannot shrink them much): a burst, many rotations
      samples =
        for round <- 1..40 do
          payloads = for i <- 1..20, do: {round, i, :crypto.strong_rand_bytes(100)}
          :erpc.call(n, :lists, :foreach, [&Echo.echo/1, payloads])
          :ok = Trace.flush(trace)
          sizes(n)
        end

      # the newest call is in a file there (the writer and that node's worker caught up)
      newest = fn ->
        for {file, _} <- sizes(n),
            opened = Trace.open({n, file}),
            %{kind: :call, args: [{40, 20, _}]} <- Trace.events(opened, 100_000),
            do: file
      end

      wait_until(fn -> newest.() != [] end, 500, fn -> "no file has the newest call" end)

      :ok = Trace.stop(trace)
      assert_clean(n, tmp, before)

      final = sizes(n)

      for sample <- samples ++ [final] do
        used = sample |> Enum.map(&elem(&1, 1)) |> Enum.sum()
        assert used <= cap, "disk use over #{cap} there: #{inspect(sample)}"
      end

      # the files are that node's, where it writes (its working directory), not here
      assert Enum.map(final, &elem(&1, 0)) == ~w(repo.0.ktrace repo.1.ktrace repo.2.ktrace)
      assert File.ls!(cwd) |> Enum.sort() == ~w(repo.0.ktrace repo.1.ktrace repo.2.ktrace)
      refute Enum.any?(~w(repo.0.ktrace repo.1.ktrace repo.2.ktrace), &File.exists?/1)

      # each opens here, fetched, complete (the last one closed there when the trace ended)
      opened = for {file, _} <- final, do: Trace.open({n, file})

      for trace <- opened do
        file = Trace.info(trace).file
        assert %{complete: true, torn_bytes: 0, fetched_from: ^n, node: ^n} = file
      end

      calls =
        for trace <- opened, %{kind: :call} = e <- Trace.events(trace, 100_000), do: e

      assert Enum.all?(calls, &(&1.node == n and node(&1.pid) == n))
      # (the oldest were written over)
      assert length(calls) < 40 * 20
      assert {40, 20, _} = calls |> Enum.map(&hd(&1.args)) |> Enum.max()
    end
  end

  # The writer here sends that node's frames to its agent's worker there, which ends
  # with the trace: stopped right after its events were delivered (the writer still
  # busy with them), the files there still get every one of them, then their end
  # frames. It lost the last ones before the trace had its writer catch up first.
  for agent <- [:auto, :fallback] do
    test "the files there hold every event the trace delivered, stopped at once after (agent: #{agent})" do
      {n, tmp, _cwd, before} = peer_with_cwd(:"files_stop_#{unquote(agent)}")

      trace =
        Trace.calls(["KinoTraceTest.Remote.Echo.echo/1"],
          nodes: [n],
          agent: unquote(agent),
          return: false,
          to: [path: "repo.ktrace", max_bytes: 10_000_000, files: 2]
        )

      # (random payloads: zlib cannot shrink them, the writer has work to do)
      payloads = for i <- 1..5_000, do: {i, :crypto.strong_rand_bytes(200)}
      :erpc.call(n, :lists, :foreach, [&Echo.echo/1, payloads])
      :ok = Trace.flush(trace)
      delivered = for %{kind: :call} = e <- Trace.events(trace, 100_000), do: hd(e.args)
      assert delivered == payloads
      ids = for {i, _} <- delivered, do: i
      :ok = Trace.stop(trace)
      assert_clean(n, tmp, before)

      opened = Trace.open({n, "repo.0.ktrace"})
      assert %{complete: true, torn_bytes: 0} = Trace.info(opened).file
      written = for %{kind: :call} = e <- Trace.events(opened, 100_000), do: hd(e.args)
      assert for({i, _} <- written, do: i) == ids
      assert written == delivered
    end
  end

  test "a hostile or oversized file there is a clear error naming the node, the file and the offset" do
    {_peer, n, _tmp} = bare_peer(:files_hostile)
    dir = Path.join(System.tmp_dir!(), "kino_trace_hostile_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf(dir) end)

    capture = Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
    good = Path.join(dir, "good.ktrace")
    :ok = Trace.save(capture, good)
    bytes = File.read!(good)

    # a bit flipped in the first event frame's body (after the header frame)
    <<_type, header_size::32, _::binary>> = bytes
    at = 9 + header_size
    # (binary_part: a size(...) of a variable bound before the match warns on Elixir 1.20)
    pre = binary_part(bytes, 0, at + 20)
    <<byte, post::binary>> = binary_part(bytes, at + 20, byte_size(bytes) - at - 20)
    bad = Path.join(dir, "bad.ktrace")

    :ok =
      :erpc.call(n, :file, :write_file, [
        bad,
        <<pre::binary, Bitwise.bxor(byte, 1), post::binary>>
      ])

    error = assert_raise Trace.FileError, fn -> Trace.open({n, bad}) end
    assert %{node: ^n, path: ^bad, offset: ^at} = error

    assert Exception.message(error) ==
             "cannot open the trace file #{bad} on node #{inspect(n)}: a frame whose checksum does not match (at byte #{at})"

    # larger than max_bytes: is not fetched at all
    message = "more than the 100 open/2 fetches (its max_bytes:)"

    assert_raise Trace.FileError,
                 ~r/on node #{Regex.escape(inspect(n))}: a file of \d+ bytes there, #{Regex.escape(message)}/,
                 fn ->
                   Trace.open({n, good}, max_bytes: 100)
                 end

    assert_raise Trace.FileError,
                 ~r/no\/such.ktrace on node .*: no such file or directory$/,
                 fn ->
                   Trace.open({n, "no/such.ktrace"})
                 end

    # the good one opens, fetched
    assert {n, good} |> Trace.open() |> Trace.events() |> Enum.map(& &1.kind) == [:call, :return]
  end
end
