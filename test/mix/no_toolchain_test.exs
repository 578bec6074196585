defmodule Mix.Tasks.Compile.KinoTraceNif.NoToolchainTest do
  # kino_trace installed where nothing can build its native tracer: `Mix.install/1` of a
  # clone, on a PATH with Elixir, OTP and a few shell tools, and no cmake, make or C/C++
  # compiler. It must install with one warning, and trace on the pure-Erlang tracer.
  use ExUnit.Case, async: true

  @moduletag :slow

  import KinoTraceTest.InstallClone, only: [clone!: 1, bin_dir!: 1, run: 4, result: 2]

  # What the user would run: a trace of calls and returns, a message trace, a capture with
  # assertions, statistics. Each result is printed as one `RESULT name: value` line.
  # (compiled after Mix.install/1 has run: script.exs evaluates it)
  @body ~S"""
  defmodule Shop do
    def place(order), do: {:ok, order}
    def refund(order) when order > 0, do: :refunded
  end

  result = fn name, value -> IO.puts("RESULT #{name}: #{inspect(value)}") end
  delivered = fn -> :erlang.trace_delivered(self()); receive do {:trace_delivered, _, _} -> :ok end end

  t = Kino.Trace.calls(["Shop"], return: true)
  Shop.place(:seven)
  delivered.()
  result.("calls", Enum.map(Kino.Trace.events(t, 10), &{&1.kind, &1.function, &1.args, &1.return}))
  result.("tracer", Kino.Trace.info(t).tracer)
  result.("load_error", KinoTrace.Tracer.load_error())
  Kino.Trace.stop(t)

  me = self()
  m = Kino.Trace.messages([me])
  send(me, {:ping, 1})
  receive do {:ping, 1} -> :ok end
  delivered.()
  kinds = for e <- Kino.Trace.events(m, 100), e.kind in [:send, :receive], match?({:ping, 1}, e.data), do: e.kind
  result.("messages", Enum.sort(kinds))
  Kino.Trace.stop(m)

  require Kino.Trace.Assertions
  capture = Kino.Trace.capture(["Shop"], fn -> Task.await(Task.async(fn -> Shop.refund(3) end)) end)
  Kino.Trace.Assertions.assert_called(capture, Shop.refund(n) when n > 2)
  Kino.Trace.Assertions.assert_returned(capture, Shop.refund(_), :refunded)
  result.("capture", {Kino.Trace.Capture.complete?(capture), length(capture.events), capture.info.tracer})

  s = Kino.Trace.stats(["Shop.place/1"])
  for i <- 1..5, do: Shop.place(i)
  result.("stats", Enum.map(Kino.Trace.stats_snapshot(s).rows, &{&1.mfa, &1.calls}))
  """

  setup do
    dir =
      Path.join(
        System.tmp_dir!(),
        "kino_trace_no_toolchain_#{System.unique_integer([:positive])}"
      )

    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{dir: dir}
  end

  @tag timeout: 600_000
  test "Mix.install of a clone with no cmake and no compilers warns once, and everything traces",
       %{dir: dir} do
    clone = clone!(dir)
    bin = bin_dir!(dir)
    script = Path.join(dir, "script.exs")
    File.write!(Path.join(dir, "body.exs"), @body)

    File.write!(script, """
    Mix.install([{:kino_trace, path: System.fetch_env!("KINO_TRACE_CLONE")}])
    Code.eval_file("body.exs")
    """)

    # only these (no CI=true: a user's machine)
    {out, status} = run(dir, script, bin, [{"KINO_TRACE_CLONE", clone}])

    assert status == 0, out

    # one warning, naming what is missing and how to get it
    assert [_] = Regex.scan(~r/warning: kino_trace: its native tracer was not built/, out), out
    assert out =~ "missing CMake 3.18 or newer (no cmake on PATH)"
    assert out =~ "sudo apt-get install cmake"
    assert out =~ "brew install cmake"
    assert out =~ "winget install Kitware.CMake"
    refute out =~ ~r/could not load its native tracer/

    why =
      "kino_trace: the native tracer was not built: missing CMake 3.18 or newer (no cmake on PATH)"

    assert result(out, "tracer") == inspect({:fallback, why})
    assert result(out, "load_error") == inspect(why)

    assert result(out, "calls") ==
             inspect([{:call, :place, [:seven], nil}, {:return, :place, nil, {:ok, :seven}}])

    assert result(out, "messages") == inspect([:receive, :send])
    assert result(out, "capture") == inspect({true, 2, {:fallback, why}})
    assert result(out, "stats") == inspect([{{Shop, :place, 1}, 5}])
  end
end
