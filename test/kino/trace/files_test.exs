defmodule Kino.Trace.FilesTest do
  # Trace files (issue 37.3): a live trace saved and opened again is a trace value that
  # every front end takes, on both tracers. (The untrusted-input side, the fuzz, is in
  # files_fuzz_test.exs.)
  use ExUnit.Case, async: false
  use Kino.Trace.Assertions

  alias Kino.Trace
  alias KinoTraceTest.Helpers
  alias KinoTraceTest.Sample.{Math, Worker}

  setup do
    dir = Path.join(System.tmp_dir!(), "kino_trace_files_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{dir: dir}
  end

  # A live trace of calls (with returns and an exception) and of the worker's messages.
  defp live_trace do
    worker = Worker.start()

    trace =
      Trace.trace([calls: ["KinoTraceTest.Sample.Math"], messages: [worker]],
        pids: worker
      )

    Worker.run(worker, fn ->
      Math.double(21)
      Math.safe_boom("bad")
      send(self(), {:note, [1, 2.5, "text", {:a, %{b: <<1::3>>}}], self(), make_ref()})
      receive do: ({:note, _, _, _} -> :ok)
    end)

    Helpers.trace_delivered(worker)
    :ok = Trace.flush(trace)
    {trace, worker}
  end

  # What a file keeps of an event: everything, but a fun is what it printed (the
  # worker's messages carry the funs it runs).
  defp as_saved(events) do
    for event <- events do
      Map.new(Map.from_struct(event), fn {key, value} -> {key, unfun(value)} end)
      |> then(&struct(Kino.Trace.Event, &1))
    end
  end

  defp unfun(f) when is_function(f), do: %Kino.Trace.Foreign{type: :fun, text: inspect(f)}
  defp unfun(list) when is_list(list), do: unfun_list(list)

  defp unfun(tuple) when is_tuple(tuple),
    do: tuple |> Tuple.to_list() |> Enum.map(&unfun/1) |> List.to_tuple()

  defp unfun(%_{} = struct), do: struct
  defp unfun(map) when is_map(map), do: Map.new(map, fn {k, v} -> {unfun(k), unfun(v)} end)
  defp unfun(term), do: term

  defp unfun_list([]), do: []
  defp unfun_list([h | t]), do: [unfun(h) | unfun_list(t)]
  defp unfun_list(tail), do: unfun(tail)

  for tracer <- [:native, :fallback] do
    @tag tracer: tracer
    test "a #{tracer} trace saved and opened: events, info, Mermaid, stream, printer, assertions",
         %{dir: dir} = ctx do
      if ctx.tracer == :fallback, do: Helpers.use_fallback_tracer()
      {live, worker} = live_trace()
      path = Path.join(dir, "live.ktrace")
      assert :ok = Trace.save(live, path)

      live_events = Trace.events(live)
      live_info = Trace.info(live)
      assert Enum.any?(live_events, &(&1.kind == :exception))
      assert Enum.any?(live_events, &(&1.kind == :receive))

      opened = Trace.open(path)
      # everything comes back equal, pids and references too; funs as they printed
      assert Enum.any?(live_events, &match?({:run, f, _, _} when is_function(f), &1.data))
      assert Trace.events(opened) == as_saved(live_events)
      assert Trace.events(opened, 2) == as_saved(Enum.take(live_events, -2))
      assert Trace.to_mermaid(opened) == Trace.to_mermaid(live)
      assert Trace.to_mermaid(opened, args: true) == Trace.to_mermaid(live, args: true)
      assert opened |> Trace.stream() |> Enum.to_list() == as_saved(live_events)

      info = Trace.info(opened)
      assert info.status == :stopped and info.traced == false
      assert info.patterns == live_info.patterns
      assert info.what == live_info.what
      assert info.accepted == live_info.accepted
      assert info.tracer == live_info.tracer
      assert info.file.events == length(live_events)
      assert info.file.complete and info.file.torn_bytes == 0
      assert info.file.path == path and info.file.status == :running

      # the assertions take it as a capture of its events
      assert [_] = assert_called(opened, Math.double(21))
      assert_returned opened, Math.double(_), 42
      assert_raised_in opened, Math.boom(_), ArgumentError
      refute_called opened, Math.fact(_)

      # the printer prints its events, then its end
      {:ok, device} = StringIO.open("")
      printer = Kino.Trace.Printer.attach(opened, device: device, colors: false)
      ref = Process.monitor(printer)
      :ok = Trace.stop(opened)
      assert_receive {:DOWN, ^ref, :process, _, _}
      {_, printed} = StringIO.contents(device)
      assert printed =~ "KinoTraceTest.Sample.Math.double(21)"
      assert printed =~ "-- trace stopped --"

      # stopped: its info stays, its events are freed
      assert Trace.info(opened).file.path == path
      assert_raise ArgumentError, ~r/ended/, fn -> Trace.events(opened) end

      :ok = Trace.stop(live)
      Worker.stop(worker)
    end
  end

  test "it traces nothing: patterns are refused, pause and resume are no-ops, it ends with its owner",
       %{dir: dir} do
    capture = Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
    path = Path.join(dir, "capture.ktrace")
    :ok = Trace.save(capture, path)

    test = self()

    {owner, owner_ref} =
      spawn_monitor(fn ->
        send(test, {:opened, Trace.open(path)})
        receive do: (:done -> :ok)
      end)

    assert_receive {:opened, opened}
    assert Trace.events(opened) == capture.events
    assert [{"Enum.map/2", {:error, message}}] = Trace.set_patterns(opened, ["Enum.map/2"])
    assert message =~ "opened from a file"
    assert Trace.pause(opened) == :ok and Trace.resume(opened) == :ok
    assert Trace.flush(opened) == :ok
    assert Trace.info(opened).patterns == ["Enum.sum/1"]

    session = Process.monitor(opened.session)
    send(owner, :done)
    assert_receive {:DOWN, ^owner_ref, :process, _, _}
    assert_receive {:DOWN, ^session, :process, _, _}
  end

  test "to: streams to rotating files whose disk use never exceeds max_bytes", %{dir: dir} do
    worker = Worker.start()
    cap = 24_000
    to = [path: Path.join(dir, "repo.ktrace"), max_bytes: cap, files: 3]
    trace = Trace.calls(["KinoTraceTest.Sample.Math.echo/1"], pids: worker, to: to)
    [writer] = KinoTrace.Client.internals(trace).held
    writer_ref = Process.monitor(writer)

    used = fn ->
      dir
      |> Path.join("repo.*.ktrace")
      |> Path.wildcard()
      |> Enum.map(&File.stat!(&1).size)
      |> Enum.sum()
    end

    # random payloads (zlib cannot shrink them much): many rotations
    samples =
      for round <- 1..60 do
        Worker.run(worker, fn ->
          for i <- 1..20, do: Math.echo({round, i, :crypto.strong_rand_bytes(100)})
        end)

        Helpers.trace_delivered(worker)
        :ok = Trace.flush(trace)
        used.()
      end

    :ok = Trace.stop(trace)
    assert_receive {:DOWN, ^writer_ref, :process, _, _}, 10_000

    assert Enum.all?(samples ++ [used.()], &(&1 <= cap)),
           "disk use over #{cap}: #{inspect(samples)}"

    # every file opens; the newest events are in the one written last
    paths = KinoTrace.File.Writer.paths(Map.new(to))
    assert Enum.all?(paths, &File.exists?/1)
    opened = for path <- paths, do: Trace.open(path)

    calls =
      for trace <- opened,
          %{kind: :call} = event <- Trace.events(trace, 100_000),
          do: hd(event.args)

    newest = Enum.max(calls)
    # (the files hold the newest calls only: the oldest were written over)
    assert length(calls) < 60 * 20
    assert {60, 20, _} = newest
    assert Enum.all?(opened, &Trace.info(&1).file.complete)
    Worker.stop(worker)
  end

  for tracer <- [:native, :fallback] do
    @tag tracer: tracer
    test "to: the file holds every event the trace delivered once stop/1 returns (#{tracer})",
         %{dir: dir} = ctx do
      if ctx.tracer == :fallback, do: Helpers.use_fallback_tracer()
      worker = Worker.start()
      path = Path.join(dir, "all.ktrace")
      trace = Trace.calls(["KinoTraceTest.Sample.Math.echo/1"], pids: worker, to: [path: path])
      Worker.run(worker, fn -> for i <- 1..5_000, do: Math.echo(i) end)
      Helpers.trace_delivered(worker)
      :ok = Trace.flush(trace)
      delivered = Trace.info(trace).delivered
      :ok = Trace.stop(trace)
      # at once: no wait for the writer
      opened = Trace.open(Path.join(dir, "all.0.ktrace"))
      calls = for %{kind: :call} = e <- Trace.events(opened, 100_000), do: hd(e.args)
      assert Trace.info(opened).file.complete
      assert calls == Enum.to_list(1..5_000)
      assert delivered >= 10_000
      Trace.stop(opened)
      Worker.stop(worker)
    end
  end

  test "to: refuses files too small to hold a trace, and leaves no trace running", %{dir: dir} do
    before = Helpers.kino_sessions()

    assert_raise ArgumentError, ~r/to: gives each of its 4 files 1000 bytes/, fn ->
      Trace.calls(["Enum.sum/1"],
        to: [path: Path.join(dir, "x.ktrace"), max_bytes: 4_000, files: 4]
      )
    end

    assert Helpers.kino_sessions() == before
  end

  test "a file that cannot be written is a File.Error naming it", %{dir: dir} do
    capture = Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1]) end)
    path = Path.join([dir, "no_such_dir", "x.ktrace"])
    error = assert_raise File.Error, fn -> Trace.save(capture, path) end
    assert Exception.message(error) =~ path
  end

  test "an opened trace saved again is the same file's events", %{dir: dir} do
    capture =
      Trace.capture(["KinoTraceTest.Sample.Math"], fn ->
        Math.echo({self(), make_ref(), &Math.add/2})
      end)

    first = Path.join(dir, "first.ktrace")
    second = Path.join(dir, "second.ktrace")
    :ok = Trace.save(capture, first)
    opened = Trace.open(first)
    :ok = Trace.save(opened, second)
    again = Trace.open(second)

    assert Trace.events(again) == Trace.events(opened)
    # a fun comes back as what it printed
    [call | _] = Trace.events(opened)
    assert [{pid, ref, %Kino.Trace.Foreign{type: :fun, text: text}}] = call.args
    assert pid == self() and is_reference(ref)
    assert text == inspect(&Math.add/2)
  end

  test "assertions on a trace whose history lost events fail and say why", %{dir: dir} do
    worker = Worker.start()

    live =
      Trace.calls(["KinoTraceTest.Sample.Math.echo/1"], pids: worker, history: 2, return: false)

    Worker.run(worker, fn -> for i <- 1..5, do: Math.echo(i) end)
    Helpers.trace_delivered(worker)
    :ok = Trace.flush(live)
    path = Path.join(dir, "short.ktrace")
    :ok = Trace.save(live, path)
    opened = Trace.open(path)
    assert length(Trace.events(opened)) == 2

    for trace <- [live, opened] do
      error = assert_raise ExUnit.AssertionError, fn -> refute_called(trace, Math.echo(1)) end
      assert error.message =~ "3 of the events it delivered are no longer in its history"
    end

    :ok = Trace.stop(live)
    Worker.stop(worker)
  end
end
