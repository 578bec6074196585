defmodule KinoTrace.SessionTest do
  # async: false: these traces follow every process (pids: :all, :new, :existing) or use
  # the VM-wide :dbg tracer, so they must not run beside other tests' traces.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers

  alias Kino.Trace
  alias Kino.Trace.Event
  alias KinoTraceTest.Sample.{Math, Worker}

  describe "flush/2" do
    test "a subscriber that flushes has every event queued before in its mailbox" do
      trace = Trace.calls(["KinoTraceTest.Sample.Math.add/2"], pids: self())
      # the session sends its events before it answers
      parent = self()

      subscriber =
        spawn_link(fn ->
          :ok = Trace.subscribe(trace)
          send(parent, :subscribed)
          receive do: (:flush -> :ok)
          :ok = Trace.flush(trace)
          {:messages, messages} = Process.info(self(), :messages)

          send(
            parent,
            {:seen, for({:kino_trace, _, {:events, events}} <- messages, e <- events, do: e.kind)}
          )
        end)

      assert_receive :subscribed
      for i <- 1..500, do: Math.add(i, 1)
      ref = :erlang.trace_delivered(self())
      assert_receive {:trace_delivered, _, ^ref}
      send(subscriber, :flush)
      assert_receive {:seen, kinds}, 10_000
      assert length(kinds) == 1_000
      Trace.stop(trace)
      assert_raise ArgumentError, ~r/the trace has ended/, fn -> Trace.flush(trace) end
    end
  end

  describe ":pids" do
    test ":all traces processes that exist and processes spawned later" do
      old = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: :all, return: false)
      new = Worker.start()
      Worker.run(old, fn -> Math.echo(:old) end)
      Worker.run(new, fn -> Math.echo(:new) end)

      assert [{old, [:old]}, {new, [:new]}] == Enum.map(Trace.events(trace), &{&1.pid, &1.args})
    end

    test ":new traces only processes spawned after the trace started" do
      old = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: :new, return: false)
      new = Worker.start()
      Worker.run(old, fn -> Math.echo(:old) end)
      Worker.run(new, fn -> Math.echo(:new) end)
      Math.echo(:test_process)

      assert [{new, [:new]}] == Enum.map(Trace.events(trace), &{&1.pid, &1.args})
    end

    test ":existing traces only processes that existed when the trace started" do
      old = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: :existing, return: false)
      new = Worker.start()
      Worker.run(old, fn -> Math.echo(:old) end)
      Worker.run(new, fn -> Math.echo(:new) end)

      assert [{old, [:old]}] == Enum.map(Trace.events(trace), &{&1.pid, &1.args})
    end
  end

  describe "Erlang BIFs" do
    setup do
      # sessions of earlier tests end asynchronously; see the OTP bug below
      wait_until(fn -> kino_sessions() == [] end)
      :ok
    end

    test ":ets.insert/2 and :ets.insert" do
      table = :ets.new(:kino_trace_test, [:public])

      for pattern <- [":ets.insert/2", ":ets.insert"] do
        worker = Worker.start()
        trace = Trace.calls([pattern], pids: worker)
        true = Worker.run(worker, fn -> :ets.insert(table, {:b, 2}) end)
        Worker.run(worker, fn -> :ets.lookup(table, :b) end)

        assert [
                 %Event{
                   kind: :call,
                   module: :ets,
                   function: :insert,
                   arity: 2,
                   args: [^table, {:b, 2}]
                 },
                 %Event{kind: :return, return: true}
               ] = Trace.events(trace),
               "pattern #{pattern}"

        Trace.stop(trace)
      end
    end

    # A BIF staying traced when another trace ends: see bif_test.exs.
  end

  describe "kino_trace never traces itself" do
    test "neither the session, its subscribers nor a printer appear in a trace of Enum on every process" do
      {:ok, io} = StringIO.open("")
      trace = Trace.calls(["Enum"], pids: :all, return: false)

      subscriber =
        spawn_link(fn ->
          receive_loop = fn loop, n ->
            receive do
              {:kino_trace, _, {:events, events}} ->
                # a subscriber that itself calls Enum
                loop.(loop, n + Enum.count(events))

              {:count, from} ->
                send(from, {:count, n})
                loop.(loop, n)
            end
          end

          receive_loop.(receive_loop, 0)
        end)

      :ok = Trace.subscribe(trace, subscriber)
      printer = Kino.Trace.Printer.attach(trace, device: io, colors: false)
      wait_until(fn -> Trace.info(trace).subscribers == 2 end)

      worker = Worker.start()
      Worker.run(worker, fn -> Enum.sum([1, 2, 3]) end)
      Worker.run(worker, fn -> Enum.map([1, 2], &(&1 * 2)) end)

      # let the subscriber and the printer handle a few batches (they call Enum meanwhile)
      for _ <- 1..3 do
        Worker.run(worker, fn -> Enum.count([1]) end)
        Trace.events(trace)
        send(subscriber, {:count, self()})
        assert_receive {:count, _}, 5_000
      end

      events = Trace.events(trace, 10_000)
      pids = events |> Enum.map(& &1.pid) |> Enum.uniq()

      assert worker in pids
      assert Enum.any?(events, &(&1.pid == worker and &1.function == :sum))
      refute trace.session in pids
      refute subscriber in pids
      refute printer in pids

      # the printer ends after the trace stops, having printed everything
      Trace.stop(trace)
      await_down(printer)
      {_, output} = StringIO.contents(io)
      assert output =~ "Enum.sum([1, 2, 3])"
      assert output =~ "-- trace stopped --"
      unlink_and_kill(subscriber)
    end

    test "a printer is not traced while it starts" do
      {:ok, io} = StringIO.open("")
      # Kino.Trace.Printer monitors the session as it starts
      trace = Trace.calls([":erlang.monitor/2"], pids: :all, return: false)

      printers =
        for _ <- 1..20 do
          Kino.Trace.Printer.attach(trace, device: io, colors: false)
        end

      wait_until(fn -> Trace.info(trace).subscribers == 20 end)
      pids = Enum.map(Trace.events(trace, 10_000), & &1.pid)
      assert Enum.filter(printers, &(&1 in pids)) == []
      Trace.stop(trace)
      Enum.each(printers, &await_down/1)
    end
  end

  describe "the compiler's functions (__info__/1, module_info/0,1...)" do
    # IEx calls Mod.__info__/1 to autocomplete and to print a module's values: a trace of
    # the whole module must not record those calls nor spend its limit on them.
    test "a module-wide trace leaves them out, and they do not count against the limit" do
      worker = Worker.start()
      trace = Trace.calls(["KinoTraceTest.Sample.Math"], pids: worker, return: false, limit: 2)

      Worker.run(worker, fn ->
        for _ <- 1..5,
            do: {Math.__info__(:functions), Math.module_info(), Math.module_info(:exports)}

        Math.echo(1)
        Math.echo(2)
      end)

      assert [[1], [2]] == trace |> Trace.events() |> Enum.map(& &1.args)
    end

    test "a pattern that names one traces it, beside a module-wide pattern" do
      worker = Worker.start()

      trace =
        Trace.calls(["KinoTraceTest.Sample.Math", "KinoTraceTest.Sample.Math.__info__/1"],
          pids: worker,
          return: false
        )

      Worker.run(worker, fn ->
        Math.__info__(:module)
        Math.module_info(:module)
        Math.echo(1)
      end)

      assert [{:__info__, [:module]}, {:echo, [1]}] ==
               trace |> Trace.events() |> Enum.map(&{&1.function, &1.args})
    end
  end

  describe "several traces at once" do
    test "traces of the same function owned by different processes each see their own calls" do
      tasks =
        for n <- 1..4 do
          Task.async(fn ->
            worker = Worker.start()
            trace = Trace.calls([&Math.echo/1], pids: worker)
            for i <- 1..50, do: Worker.run(worker, fn -> Math.echo({n, i}) end)
            events = Trace.events(trace, 10_000)
            {n, worker, trace, events, Trace.info(trace)}
          end)
        end

      for {n, worker, trace, events, info} <- Task.await_many(tasks, 30_000) do
        assert length(events) == 100
        assert Enum.all?(events, &(&1.pid == worker))
        calls = for %Event{kind: :call, args: [arg]} <- events, do: arg
        assert calls == for(i <- 1..50, do: {n, i})
        assert info.accepted == 100
        assert info.dropped == %{rate: 0, queue_full: 0, max_events: 0, closed: 0, no_memory: 0}
        # the owner (the task) has exited, so its trace has ended
        await_down(trace.session)
      end
    end

    test "two traces on one process both see its calls, and stopping one leaves the other" do
      a = Trace.calls([&Math.echo/1], pids: self(), return: false)
      b = Trace.calls([&Math.echo/1, &Math.add/2], pids: self(), return: false)
      Math.echo(1)
      Math.add(1, 2)
      :ok = Trace.stop(a)
      Math.echo(2)

      assert calls(Trace.events(b)) == [{:echo, [1]}, {:add, [1, 2]}, {:echo, [2]}]
      assert length(kino_sessions()) == 1
      Trace.stop(b)
    end

    test "a :dbg session keeps working alongside" do
      parent = self()
      worker = Worker.start()

      {:ok, _} =
        :dbg.tracer(
          :process,
          {fn msg, acc ->
             send(parent, {:dbg, msg})
             acc
           end, nil}
        )

      try do
        {:ok, _} = :dbg.p(worker, [:c])
        {:ok, _} = :dbg.tp(Math, :echo, 1, [])

        trace = Trace.calls([&Math.echo/1, &Math.add/2], pids: worker, return: false)
        Worker.run(worker, fn -> Math.echo(:both) end)
        assert_receive {:dbg, {:trace, ^worker, :call, {Math, :echo, [:both]}}}, 5_000
        assert calls(Trace.events(trace)) == [{:echo, [:both]}]

        # kino_trace's pattern on add/2 is not dbg's, and dbg's flags are not ours
        Worker.run(worker, fn -> Math.add(1, 1) end)
        assert calls(Trace.events(trace)) == [{:echo, [:both]}, {:add, [1, 1]}]
        refute_receive {:dbg, {:trace, _, :call, {Math, :add, _}}}, 100

        # ending the kino trace leaves dbg tracing
        :ok = Trace.stop(trace)
        Worker.run(worker, fn -> Math.echo(:dbg_only) end)
        assert_receive {:dbg, {:trace, ^worker, :call, {Math, :echo, [:dbg_only]}}}, 5_000

        # and a kino trace started while dbg runs works, also after dbg stops
        trace = Trace.calls([&Math.echo/1], pids: :all, return: false)
        :dbg.stop()
        Worker.run(worker, fn -> Math.echo(:kino_only) end)

        assert [%Event{pid: ^worker, args: [:kino_only]}] =
                 Enum.filter(Trace.events(trace), &(&1.pid == worker))

        refute_receive {:dbg, {:trace, _, :call, {Math, :echo, [:kino_only]}}}, 100
        Trace.stop(trace)
      after
        :dbg.stop()
      end
    end
  end

  defp unlink_and_kill(pid) do
    Process.unlink(pid)
    Process.exit(pid, :kill)
    await_down(pid)
  end
end
