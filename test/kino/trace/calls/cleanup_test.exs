defmodule Kino.Trace.Calls.CleanupTest do
  # async: false: compares the VM's trace sessions and kino_trace's session supervisor
  # before and after, which concurrent traces would disturb.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers

  alias Kino.Trace
  alias KinoTrace.Tracer
  alias KinoTraceTest.Sample.{Math, Worker}

  @cycles 1_000

  # Sessions of earlier test modules end when their owners exit, a moment later: wait
  # for the VM to be quiet, so the counts below are this test's alone.
  setup do
    wait_until(fn ->
      kino_sessions() == [] and
        DynamicSupervisor.count_children(KinoTrace.SessionSupervisor).active == 0
    end)

    %{children: 0}
  end

  # Read in a process of its own: a copy of the session's internals in this process holds
  # its OTP session's handle, and so keeps that session alive after the session process
  # is killed, until this process's next full sweep (never, in a test: once a collection
  # while the copy was live moved it to the old heap, the session never went).
  defp resource(trace) do
    fn -> KinoTrace.Client.internals(trace).resource end |> Task.async() |> Task.await()
  end

  defp assert_nothing_left(trace, resource, children) do
    refute Process.alive?(trace.session)
    assert kino_sessions() == []
    assert Tracer.counters(resource).closed
    assert DynamicSupervisor.count_children(KinoTrace.SessionSupervisor).active == children
  end

  @tag :slow
  test "#{@cycles} owners killed while tracing leave nothing behind", %{children: children} do
    sessions_before = :trace.session_info(:all)
    parent = self()
    t0 = System.monotonic_time(:millisecond)

    for i <- 1..@cycles do
      owner =
        spawn(fn ->
          trace = Trace.calls([&Math.echo/1, "KinoTraceTest.Sample.Math.fact/1"], pids: self())
          # some events queued, some delivered, a call left open
          Math.echo(i)
          Math.fact(2)
          send(parent, {:started, self(), trace})

          receive do
            :never -> :ok
          end
        end)

      trace =
        receive do
          {:started, ^owner, trace} -> trace
        after
          10_000 -> flunk("cycle #{i}: the owner did not start its trace")
        end

      resource = resource(trace)
      assert [{:kino_trace, _}] = kino_sessions()
      ref = Process.monitor(trace.session)
      Process.exit(owner, :kill)

      assert_receive {:DOWN, ^ref, :process, _, _},
                     10_000,
                     "cycle #{i}: the session outlived its owner"

      assert_nothing_left(trace, resource, children)
      counters = Tracer.counters(resource)
      assert counters.accepted == counters.delivered + counters.queued + counters.discarded
      assert counters.queued == 0
    end

    KinoTrace.Backend.Reaper.sync()
    assert :trace.session_info(:all) == sessions_before
    elapsed = System.monotonic_time(:millisecond) - t0
    # generous: a few ms per cycle is expected even on 2 busy cores
    assert elapsed < 60_000, "#{@cycles} cycles took #{elapsed} ms"
  end

  test "an owner that exits normally ends its trace", %{children: children} do
    parent = self()

    owner =
      spawn(fn ->
        trace = Trace.calls([&Math.echo/1], pids: self())
        send(parent, {:trace, trace})

        receive do
          :exit -> :ok
        end
      end)

    assert_receive {:trace, trace}, 5_000
    resource = resource(trace)
    send(owner, :exit)
    await_down(trace.session)
    assert_nothing_left(trace, resource, children)
  end

  test "stop/1 leaves nothing behind", %{children: children} do
    trace = Trace.calls([&Math.echo/1], pids: self())
    resource = resource(trace)
    Math.echo(1)
    :ok = Trace.stop(trace)
    assert_nothing_left(trace, resource, children)
  end

  test ":limit ends tracing at once; the process stays for queries until its owner exits", %{
    children: children
  } do
    {worker, _} = in_worker(fn -> :ok end)
    trace = Trace.calls([&Math.echo/1], pids: worker, limit: 2)
    resource = resource(trace)
    :ok = Trace.subscribe(trace)
    Worker.run(worker, fn -> Math.echo(1) end)
    id = trace.id
    assert_receive {:kino_trace, ^id, {:status, :limit_reached}}, 5_000

    assert kino_sessions() == []
    assert Tracer.counters(resource).closed
    assert Process.alive?(trace.session)
    assert length(Trace.events(trace)) == 2

    :ok = Trace.stop(trace)
    assert_nothing_left(trace, resource, children)
  end

  test ":timeout ends tracing; the owner's exit ends the process", %{children: children} do
    parent = self()

    owner =
      spawn(fn ->
        trace = Trace.calls([&Math.echo/1], pids: self(), timeout: 20)
        :ok = Trace.subscribe(trace, parent)
        send(parent, {:trace, trace})

        receive do
          :exit -> :ok
        end
      end)

    assert_receive {:trace, trace}, 5_000
    resource = resource(trace)
    id = trace.id
    assert_receive {:kino_trace, ^id, {:status, :timeout}}, 5_000
    assert kino_sessions() == []
    assert Tracer.counters(resource).closed
    assert Trace.info(trace).status == :timeout

    send(owner, :exit)
    await_down(trace.session)
    assert_nothing_left(trace, resource, children)
  end

  test "a killed session process leaves no trace session and closes its native session" do
    trace = Trace.calls([&Math.echo/1], pids: self())
    resource = resource(trace)
    Math.echo(1)
    Process.exit(trace.session, :kill)
    await_down(trace.session)

    # the OTP session dies with the handle it held; the native session with its owner
    wait_until(fn -> kino_sessions() == [] and Tracer.counters(resource).closed end)
    Math.echo(2)
    assert kino_sessions() == []
  end

  test "capture/3 leaves nothing behind, also when the block raises", %{children: children} do
    Trace.capture([&Math.echo/1], fn -> Math.echo(1) end)
    assert kino_sessions() == []

    assert_raise ArgumentError, fn -> Trace.capture([&Math.echo/1], fn -> Math.boom("x") end) end
    assert kino_sessions() == []
    assert DynamicSupervisor.count_children(KinoTrace.SessionSupervisor).active == children
  end

  # Its trace of sends was registered under the pool worker that set it up, which lives
  # on: the entry kept the OTP session alive for good (OTP 29's full suite found it).
  test "capture/3 whose process is killed inside the block leaves no trace session", %{
    children: children
  } do
    me = self()

    {pid, ref} =
      spawn_monitor(fn ->
        Trace.capture([&Math.echo/1], fn ->
          send(me, :capturing)
          Process.sleep(:infinity)
        end)
      end)

    assert_receive :capturing
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}
    # the capture's trace session process sees its owner's exit a moment later
    wait_until(fn ->
      kino_sessions() == [] and
        DynamicSupervisor.count_children(KinoTrace.SessionSupervisor).active == children
    end)
  end
end
