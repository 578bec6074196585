defmodule Kino.Trace.Calls.PidNamesTest do
  # Processes named as GenServer names them: a registered atom, {:global, name} or
  # {:via, module, name}, wherever pids are accepted (the :pids option of calls/2,
  # capture/3 and stats/2, the targets of messages/2 and processes/2).
  use ExUnit.Case, async: true

  import KinoTraceTest.Helpers, only: [events_after: 1, await_events: 2]

  alias Kino.Trace.{Event, Stats}
  alias KinoTraceTest.Sample.{Math, Worker}

  setup do
    registry = :"#{__MODULE__}.Registry#{System.unique_integer([:positive])}"
    start_supervised!({Registry, keys: :unique, name: registry})
    worker = Worker.start()
    global = {:global, {__MODULE__, System.unique_integer([:positive])}}
    via = {:via, Registry, {registry, :worker}}
    :yes = :global.register_name(elem(global, 1), worker)
    # Registry.register/3 registers the caller: the worker registers itself.
    {:ok, _} = Worker.run(worker, fn -> Registry.register(registry, :worker, nil) end)

    on_exit(fn -> :global.unregister_name(elem(global, 1)) end)
    %{worker: worker, names: [global, via]}
  end

  test "calls/2 traces the process a name stands for, and only it", %{
    worker: worker,
    names: names
  } do
    for name <- names do
      trace = Kino.Trace.calls([&Math.echo/1], pids: name, return: false)
      # calls/2 returns after at most a second still setting up (a loaded machine's full
      # run: the worker's call came before the pattern was set); info/1 answers once set
      _ = Kino.Trace.info(trace)
      Math.echo(:caller)
      Worker.run(worker, fn -> Math.echo(name) end)

      assert [%Event{kind: :call, pid: ^worker, args: [^name]}] = events_after(trace)
      Kino.Trace.stop(trace)
    end
  end

  test "capture/3 adds the named process", %{worker: worker, names: names} do
    for name <- names do
      capture =
        Kino.Trace.capture([&Math.echo/1], fn -> Worker.run(worker, fn -> Math.echo(1) end) end,
          pids: [name]
        )

      assert [%Event{kind: :call, pid: ^worker}, %Event{kind: :return, pid: ^worker}] =
               capture.events
    end
  end

  test "stats/2 counts the named process's calls", %{worker: worker, names: names} do
    for name <- names do
      stats = Stats.start([&Math.echo/1], pids: name)
      Math.echo(:caller)
      Worker.run(worker, fn -> Math.echo(1) && Math.echo(2) end)
      assert Stats.snapshot(stats).calls == 2
      Stats.stop(stats)
    end
  end

  test "messages/2 and processes/2 take names as targets", %{worker: worker, names: names} do
    for name <- names do
      trace = Kino.Trace.trace(messages: [name], processes: name)
      me = self()
      Worker.run(worker, fn -> Process.link(me) && Process.unlink(me) end)

      events = await_events(trace, &Enum.any?(&1, fn e -> e.kind == :unlink end))
      assert Enum.any?(events, &match?(%Event{kind: :receive, pid: ^worker}, &1))
      assert Enum.any?(events, &match?(%Event{kind: :send, pid: ^worker, peer: ^me}, &1))
      assert Enum.any?(events, &match?(%Event{kind: :link, pid: ^worker, peer: ^me}, &1))
      Kino.Trace.stop(trace)
    end
  end
end
