defmodule KinoTraceTest.RecordOrders do
  @moduledoc false
  # What the trigger tests trace: nested calls that may raise, a slow one, and calls
  # with arguments to match.
  def handle(f), do: {:ok, process(f)}
  def process(f), do: f.()
  def fail(reason), do: raise(ArgumentError, reason)
  def place(order), do: {:placed, order}
  def noise(n), do: n

  def slow(ms) do
    receive do
    after
      ms -> :done
    end
  end
end

defmodule Kino.Trace.RecordTest do
  # The flight recorder (issue 37 items 1 and 2): Kino.Trace.record/2 keeps the newest
  # events in bounded memory on both tracers, counts what it overwrote with exact
  # accounting, leaves nothing behind; snapshots freeze its ring into trace values that
  # every front end takes, bounded in number and bytes.
  use ExUnit.Case, async: false
  use Kino.Trace.Assertions

  alias Kino.Trace
  alias KinoTraceTest.{Helpers, OrderRuns}
  alias KinoTraceTest.Sample.{Math, Worker}

  @tracers [:native, :fallback]

  # accepted == kept + overwritten + own + queued + discarded, each counted
  defp assert_accounted(info) do
    r = info.recorder

    assert info.accepted == r.kept + r.overwritten + r.own + info.queued + info.discarded,
           inspect(info, pretty: true)
  end

  # Waits until `pid`'s trace messages are delivered and the recorder `rec` took them in.
  defp taken_in(rec, pid) do
    Helpers.trace_delivered(pid)
    :ok = Trace.flush(rec)
  end

  # A recorder of `worker`'s calls of Math.double/1 (no returns), with `opts`.
  defp record_doubles(worker, opts) do
    Trace.record(["KinoTraceTest.Sample.Math.double/1"], [pids: worker, return: false] ++ opts)
  end

  defp calls(worker, range), do: Worker.run(worker, fn -> for n <- range, do: Math.double(n) end)

  for tracer <- @tracers do
    describe "#{tracer} tracer" do
      setup do
        Helpers.use_tracer(unquote(tracer))
        %{worker: Helpers.start_worker()}
      end

      test "keeps the newest events, counts the overwritten ones, accounting exact", %{
        worker: worker
      } do
        rec = record_doubles(worker, events: 10)

        assert Trace.info(rec).tracer ==
                 if(unquote(tracer) == :native, do: :native, else: Trace.info(rec).tracer)

        calls(worker, 1..25)
        taken_in(rec, worker)

        assert rec |> Trace.events(100) |> Enum.map(& &1.args) == Enum.map(16..25, &[&1])
        info = Trace.info(rec)
        assert %{kept: 10, overwritten: 15} = info.recorder
        assert info.accepted == 25
        assert_accounted(info)
        Trace.stop(rec)
      end

      test "bytes: bounds the ring by its events' size", %{worker: worker} do
        one = KinoTrace.History.bytes_of(%Trace.Event{kind: :call, args: [1]})

        rec =
          Trace.record(["KinoTraceTest.Sample.Math.echo/1"],
            pids: worker,
            return: false,
            bytes: 20 * one
          )

        Worker.run(worker, fn -> for n <- 1..200, do: Math.echo(String.duplicate("x", n)) end)
        taken_in(rec, worker)

        info = Trace.info(rec)
        assert info.recorder.kept_bytes <= 20 * one
        assert info.recorder.kept > 0 and info.recorder.overwritten > 0
        assert_accounted(info)
        # the newest are kept
        assert List.last(Trace.events(rec, 1)).args == [String.duplicate("x", 200)]
        Trace.stop(rec)
      end

      test "snapshots freeze the ring into trace values every front end takes", %{worker: worker} do
        rec = Trace.record(["KinoTraceTest.Sample.Math"], pids: worker, events: 100)
        calls(worker, 1..2)
        snap = Trace.snapshot(rec)
        calls(worker, 3..4)
        :ok = Trace.flush(rec)

        # frozen: what came later is not in it
        events = Trace.events(snap)

        assert Enum.filter(events, &(&1.kind == :call and &1.function == :double))
               |> Enum.map(& &1.args) == [[1], [2]]

        assert Trace.info(snap).status == :stopped
        assert Trace.info(snap).snapshot.trigger == :manual
        assert_called(snap, KinoTraceTest.Sample.Math.double(2))
        assert Trace.stream(snap) |> Enum.to_list() == events
        assert Trace.to_mermaid(snap) =~ "sequenceDiagram"
        {:ok, device} = StringIO.open("")
        Trace.print(snap, device: device, colors: false)
        Helpers.wait_until(fn -> elem(StringIO.contents(device), 1) =~ "trace stopped" end)
        assert elem(StringIO.contents(device), 1) =~ "KinoTraceTest.Sample.Math.double(2)"
        assert Trace.snapshots(rec) == [snap]
        Trace.stop(rec)
      end

      test "nothing is left after stop/1, nor when the owner dies", %{worker: worker} do
        rec = Trace.record(["KinoTraceTest.Sample.Math.double/1"], pids: worker)
        calls(worker, 1..3)
        snap = Trace.snapshot(rec)
        session = rec.session
        refs = for pid <- [session, snap.session], do: Process.monitor(pid)
        :ok = Trace.stop(rec)
        for ref <- refs, do: assert_receive({:DOWN, ^ref, :process, _, _}, 5_000)
        assert Trace.info(rec).status == :stopped

        # an owner that dies takes its recorder and its snapshots
        test = self()

        {owner, owner_ref} =
          spawn_monitor(fn ->
            rec = Trace.record(["KinoTraceTest.Sample.Math.double/1"], pids: worker)
            calls(worker, 1..3)
            snap = Trace.snapshot(rec)
            send(test, {:started, rec, snap})
            receive do: (:die -> :ok)
          end)

        assert_receive {:started, rec2, snap2}, 10_000
        refs = for pid <- [rec2.session, snap2.session], do: Process.monitor(pid)
        send(owner, :die)
        assert_receive {:DOWN, ^owner_ref, :process, _, _}
        for ref <- refs, do: assert_receive({:DOWN, ^ref, :process, _, _}, 5_000)
        assert Trace.info(rec2).status == :stopped
        assert Trace.info(rec2).traced == false
      end

      test "snapshots are bounded in number and bytes: the oldest go first, counted", %{
        worker: worker
      } do
        rec = record_doubles(worker, snapshots: 2)

        snaps =
          for n <- 1..4 do
            calls(worker, n..n)
            Trace.snapshot(rec)
          end

        [s1, s2, s3, s4] = snaps
        assert Trace.snapshots(rec) == [s4, s3]
        for s <- [s1, s2], do: refute(Process.alive?(s.session))

        assert %{snapshots: 2, snapshots_taken: 4, snapshots_dropped: 2} =
                 Trace.info(rec).recorder

        # one stopped by hand leaves the list
        :ok = Trace.stop(s3)
        assert Trace.snapshots(rec) == [s4]
        assert Trace.info(rec).recorder.snapshots == 1

        # bytes: one snapshot's worth of bytes keeps the newest only
        bytes = Trace.info(s4).snapshot.bytes

        rec2 = record_doubles(worker, snapshot_bytes: bytes + 1)

        calls(worker, 1..4)
        [_, t2] = for _ <- 1..2, do: Trace.snapshot(rec2)
        assert Trace.snapshots(rec2) == [t2]
        assert Trace.info(rec2).recorder.snapshots_dropped == 1
        Trace.stop(rec)
        Trace.stop(rec2)
      end
    end
  end

  test "memory stays flat under a flood of calls (native tracer: 1_000_000 calls)" do
    flood(1_000_000, 2 * 1024 * 1024)
  end

  test "memory stays flat under a flood of calls (fallback tracer: 200_000 calls)" do
    Helpers.use_fallback_tracer()
    flood(200_000, 256 * 1024)
  end

  # Floods the recorder from two processes, sampling the session's memory (its heap and
  # its ring) as the flood goes: it never goes beyond the ring's bytes and a bounded
  # session heap, and it does not grow from the first quarter to the end.
  defp flood(calls, ring) do
    rec =
      Trace.record(["KinoTraceTest.Sample.Math.add/2"], pids: :new, events: 50_000, bytes: ring)

    memory = fn ->
      Trace.info(rec).recorder.memory + elem(Process.info(rec.session, :memory), 1)
    end

    test = self()
    per = div(calls, 2)

    workers =
      for _ <- 1..2 do
        spawn_link(fn ->
          for q <- 1..4 do
            for n <- 1..div(per, 4), do: Math.add(n, q)
            send(test, {:quarter, self(), q})
          end
        end)
      end

    samples =
      for q <- 1..4 do
        for w <- workers, do: assert_receive({:quarter, ^w, ^q}, 120_000)
        memory.()
      end

    :ok = Trace.flush(rec)
    info = Trace.info(rec)
    assert_accounted(info)
    assert info.recorder.kept_bytes <= ring
    assert info.recorder.overwritten > 0
    # the ring's bytes and a bounded session heap (decoding a batch, the state)
    assert Enum.max(samples) < ring * 2 + 32 * 1024 * 1024, inspect(samples)
    [first | _] = samples
    assert List.last(samples) <= first * 2 + 8 * 1024 * 1024, inspect(samples)
    Trace.stop(rec)
  end

  test "bad options are clear errors, before anything is traced" do
    assert_raise ArgumentError, ~r/invalid value for :events: expected a positive integer/, fn ->
      Trace.record(["Enum.sum/1"], events: 0)
    end

    assert_raise ArgumentError, ~r/invalid value for :on: unknown trigger :crash/, fn ->
      Trace.record(["Enum.sum/1"], on: [crash: true])
    end

    assert_raise ArgumentError, ~r/slower_than: needs the calls' returns traced/, fn ->
      Trace.record(["Enum.sum/1"], on: [slower_than: 5], return: false)
    end

    assert_raise ArgumentError, ~r/invalid value for :on: match: .*Enum.smu/, fn ->
      Trace.record(["Enum.sum/1"], on: [match: "Enum.smu(x)"])
    end

    assert_raise ArgumentError, ~r/message: needs messages traced/, fn ->
      Trace.record(["Enum.sum/1"], on: [message: "{:error, _}"])
    end

    assert_raise ArgumentError, ~r/invalid value for :after/, fn ->
      Trace.record(["Enum.sum/1"], after: {1, :hours})
    end

    assert_raise ArgumentError, ~r/:history/, fn -> Trace.record(["Enum.sum/1"], history: 5) end

    assert_raise ArgumentError, ~r/is not a recorder/, fn ->
      trace = Trace.calls(["Enum.sum/1"], pids: self())
      Trace.snapshot(trace)
    end
  end

  alias KinoTraceTest.RecordOrders, as: Orders

  describe "triggers" do
    setup %{tracer: tracer} do
      Helpers.use_tracer(tracer)
      :ok
    end

    for tracer <- @tracers do
      @tag tracer: tracer
      test "exception: a snapshot with the calls that led to it, even those the ring overwrote (#{tracer})" do
        {a, b} = {Worker.start(), Worker.start()}
        test = self()

        rec =
          Trace.record(["KinoTraceTest.RecordOrders"],
            pids: [a, b],
            events: 20,
            on: [exception: true],
            after: 2
          )

        task =
          Task.async(fn ->
            Worker.run(a, fn ->
              try do
                Orders.handle(fn ->
                  send(test, :inside)
                  receive do: (:go -> Orders.fail("no stock"))
                end)
              rescue
                e -> e
              end
            end)
          end)

        assert_receive :inside
        # the ring overwrites the handle/process calls with b's noise
        Worker.run(b, fn -> for n <- 1..100, do: Orders.noise(n) end)
        taken_in(rec, b)
        assert Trace.info(rec).recorder.overwritten > 0
        send(a_pid_of(task, a), :go)
        assert %ArgumentError{} = Task.await(task)
        taken_in(rec, a)

        assert [snap] = Trace.snapshots(rec)
        info = Trace.info(snap)
        assert %{trigger: :exception, pid: ^a} = info.snapshot
        events = Trace.events(snap, 1000)
        mine = for e <- events, e.pid == a, do: {e.kind, e.function}

        assert mine == [
                 {:call, :handle},
                 {:call, :process},
                 {:call, :fail},
                 {:exception, :fail},
                 {:exception, :process},
                 {:exception, :handle}
               ]

        # the after-window: 2 events after the trigger
        [trigger] = for e <- events, e.id == info.snapshot.event, do: e
        assert length(Enum.drop_while(events, &(&1 != trigger))) == 3
        # it went up through 3 traced calls, and fired once
        assert Trace.info(rec).recorder.fired.exception == 1
        # the assertions take it, and say it is incomplete: the ring overwrote events
        error =
          assert_raise ExUnit.AssertionError, fn ->
            assert_raised_in(snap, KinoTraceTest.RecordOrders.fail("no stock"), ArgumentError)
          end

        assert error.message =~ "The trace is incomplete"
        # measured: from the traced exception to the snapshot
        assert info.snapshot.taken_at - info.snapshot.trigger_time < 5_000_000
        Trace.stop(rec)
      end

      @tag tracer: tracer
      test "an exception fires once, not again as it goes up through traced calls (#{tracer})" do
        {worker, rec} = record_orders(on: [exception: true])

        for _ <- 1..2, do: OrderRuns.fail_once(worker, Orders)

        taken_in(rec, worker)
        assert [second, first] = Trace.snapshots(rec)
        assert Trace.info(rec).recorder.fired.exception == 2

        for snap <- [first, second] do
          assert %{kind: :exception, function: :fail} = List.last(Trace.events(snap))
        end

        Trace.stop(rec)
      end

      @tag tracer: tracer
      test "slower_than: and match: fire on the calls they name only (#{tracer})" do
        {worker, rec} =
          record_orders(
            on: [
              slower_than: 20,
              match: "KinoTraceTest.RecordOrders.place(%{total: t}) when t > 1000"
            ]
          )

        Worker.run(worker, fn ->
          Orders.slow(0)
          Orders.place(%{total: 10})
        end)

        taken_in(rec, worker)
        assert Trace.snapshots(rec) == []

        Worker.run(worker, fn -> Orders.place(%{total: 5000}) end)
        taken_in(rec, worker)
        assert [match] = Trace.snapshots(rec)
        assert Trace.info(match).snapshot.trigger == :match
        assert List.last(Trace.events(match)).args == [%{total: 5000}]

        Worker.run(worker, fn -> Orders.slow(40) end)
        taken_in(rec, worker)
        assert [slow, ^match] = Trace.snapshots(rec)
        assert Trace.info(slow).snapshot.trigger == :slower_than
        assert %{kind: :return, function: :slow} = List.last(Trace.events(slow))
        assert %{match: 1, slower_than: 1, exception: 0} = Trace.info(rec).recorder.fired
        Trace.stop(rec)
      end

      @tag tracer: tracer
      test "message: fires on a message that matches, sent or received (#{tracer})" do
        worker = Worker.start()

        rec =
          Trace.record([calls: ["KinoTraceTest.RecordOrders"], messages: [worker]],
            pids: worker,
            on: [message: "{:error, reason} when is_atom(reason)"]
          )

        Worker.run(worker, fn ->
          send(self(), {:error, "text"})
          receive do: ({:error, _} -> :ok)
          Orders.noise(1)
          send(self(), {:error, :timeout})
          receive do: ({:error, _} -> :ok)
        end)

        taken_in(rec, worker)
        # its send, then its receive (the worker sent it to itself)
        assert [received, sent] = Trace.snapshots(rec)
        assert %{kind: :send, data: {:error, :timeout}} = List.last(Trace.events(sent))
        assert %{kind: :receive, data: {:error, :timeout}} = List.last(Trace.events(received))
        assert %{message: 2} = Trace.info(rec).recorder.fired
        Trace.stop(rec)
      end

      @tag tracer: tracer
      test "an after-window of events still open when the trace reaches its limit ends there (#{tracer})" do
        {worker, rec} =
          record_orders(
            return: false,
            limit: 3,
            on: [match: "KinoTraceTest.RecordOrders.place(:now)"],
            after: 100
          )

        id = rec.id
        :ok = Trace.subscribe(rec)

        Worker.run(worker, fn ->
          Orders.noise(1) && Orders.place(:now) && Orders.noise(2) && Orders.noise(3)
        end)

        assert_receive {:kino_trace, ^id, {:status, :limit_reached}}, 5_000
        assert [snap] = Trace.snapshots(rec)
        assert Enum.map(Trace.events(snap), & &1.args) == [[1], [:now], [2]]
        Trace.stop(rec)
      end

      @tag tracer: tracer, capture_log: true
      test "an after-window of events closes when they never come: the process died (#{tracer})" do
        pid =
          spawn(fn ->
            receive do: (:go -> Orders.handle(fn -> Orders.fail("crashed") end))
          end)

        ref = Process.monitor(pid)

        rec =
          Trace.record(["KinoTraceTest.RecordOrders"],
            pids: pid,
            on: [exception: true],
            after: 50
          )

        send(pid, :go)
        assert_receive {:DOWN, ^ref, :process, ^pid, {%ArgumentError{}, _}}, 5_000
        :ok = Trace.flush(rec)

        # nothing more is traced: the window freezes anyway, 5 s after its trigger
        [snap] =
          Helpers.wait_until(
            fn -> match?([_], Trace.snapshots(rec)) && Trace.snapshots(rec) end,
            3_000,
            fn -> "no snapshot: #{inspect(Trace.info(rec).recorder)}" end
          )

        info = Trace.info(snap).snapshot
        assert %{trigger: :exception, pid: ^pid} = info
        assert %{kind: :exception, function: :handle} = List.last(Trace.events(snap))
        refute Trace.info(rec).recorder.recording_after
        # (generous: the bound plus a loaded machine's delays)
        assert info.taken_at - info.trigger_time < 30_000_000
        Trace.stop(rec)
      end

      @tag tracer: tracer
      test "the open calls kept for triggers stay within a quarter of the ring's bytes (#{tracer})" do
        test = self()

        rec =
          Trace.record(["KinoTraceTest.RecordOrders"],
            pids: :new,
            bytes: 100_000,
            on: [exception: true]
          )

        # 300 processes, each inside two calls that have not returned
        pids =
          for _ <- 1..300 do
            spawn_link(fn ->
              Orders.handle(fn ->
                send(test, {:inside, self()})
                receive do: (:go -> :ok)
              end)
            end)
          end

        for pid <- pids, do: assert_receive({:inside, ^pid}, 5_000)
        for pid <- pids, do: Helpers.trace_delivered(pid)
        :ok = Trace.flush(rec)
        info = Trace.info(rec)
        assert info.accepted >= 600
        assert info.recorder.open_calls_bytes > 0
        assert info.recorder.open_calls_bytes <= div(100_000, 4)
        for pid <- pids, do: send(pid, :go)
        Trace.stop(rec)
      end

      @tag tracer: tracer
      test "after: {ms, :ms} records the window, then the snapshot is there (#{tracer})" do
        {worker, rec} =
          record_orders(
            return: false,
            on: [match: "KinoTraceTest.RecordOrders.place(:now)"],
            after: {200, :ms}
          )

        Worker.run(worker, fn -> Orders.noise(1) && Orders.place(:now) && Orders.noise(2) end)
        taken_in(rec, worker)
        assert Trace.info(rec).recorder.recording_after
        # a trigger while the window is open counts, and takes no other snapshot
        Worker.run(worker, fn -> Orders.place(:now) && Orders.noise(3) end)
        taken_in(rec, worker)

        [snap] =
          Helpers.wait_until(fn -> match?([_], Trace.snapshots(rec)) && Trace.snapshots(rec) end)

        assert Enum.map(Trace.events(snap), & &1.args) == [[1], [:now], [2], [:now], [3]]
        assert %{match: 2} = Trace.info(rec).recorder.fired
        refute Trace.info(rec).recorder.recording_after
        Trace.stop(rec)
      end
    end
  end

  # A fresh worker, and a recorder of KinoTraceTest.RecordOrders's calls in it with `opts`.
  defp record_orders(opts) do
    worker = Worker.start()
    {worker, Trace.record(["KinoTraceTest.RecordOrders"], [pids: worker] ++ opts)}
  end

  # (the worker runs the task's function: the message goes to the worker)
  defp a_pid_of(_task, worker), do: worker
end
