defmodule KinoTraceTest.TelemetryOrders do
  @moduledoc false
  # What the telemetry trigger's tests trace: nested calls, and some noise before them.
  def handle(f), do: {:ok, process(f)}
  def process(f), do: f.()
  def noise(n), do: n
end

defmodule Kino.Trace.RecordTelemetryTest do
  # The recorder's :telemetry trigger (issue 37 item 2): `on: [telemetry: event]` takes a
  # snapshot when a :telemetry event is emitted, with the emitting process's calls that
  # led to it, when the optional :telemetry package is loaded; a clear error otherwise.
  #
  # :telemetry is no dependency of kino_trace and cannot be fetched where CI runs (no
  # Hex), so the tests with the real package run when KINO_TRACE_TELEMETRY_EBIN names
  # the `ebin` directory of a built telemetry (1.x); the errors are checked in any case.
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias KinoTraceTest.Helpers
  alias KinoTraceTest.TelemetryOrders, as: Orders
  alias KinoTraceTest.Sample.Worker

  @ebin System.get_env("KINO_TRACE_TELEMETRY_EBIN")
  @needs_telemetry if(@ebin == nil,
                     do: "needs the real :telemetry package: KINO_TRACE_TELEMETRY_EBIN=<its ebin>"
                   )
  @event [:kino_trace_test, :order, :failed]

  setup_all do
    if @ebin do
      true = Code.prepend_path(@ebin)
      {:ok, _} = Application.ensure_all_started(:telemetry)
    end

    :ok
  end

  defp record(worker),
    do: Trace.record(["KinoTraceTest.TelemetryOrders"], pids: worker, on: [telemetry: @event])

  defp handlers, do: apply(:telemetry, :list_handlers, [@event])

  # In the worker: the event emitted inside nested calls, still open while the recorder
  # takes its snapshot (as a request handler emitting "failed" before it returns). The
  # worker goes on when the returned task is told `:go`.
  defp emit_inside(worker) do
    test = self()

    task =
      Task.async(fn ->
        Worker.run(worker, fn ->
          Orders.handle(fn ->
            apply(:telemetry, :execute, [@event, %{count: 1}, %{id: 7}])
            send(test, :emitted)
            receive do: (:go -> :ok)
          end)
        end)
      end)

    assert_receive :emitted
    task
  end

  defp go(worker, task) do
    send(worker, :go)
    Task.await(task)
  end

  test "bad trigger values are clear errors naming the option" do
    for bad <- [[], [:a, "b"], [[:a], []], :a, [["a"]]] do
      error =
        assert_raise ArgumentError, fn -> Trace.record(["Enum.sum/1"], on: [telemetry: bad]) end

      assert error.message =~ "invalid value for :on: telemetry: expected an event name"
    end

    # the bound is the table of limits' (and the guide's)
    max = KinoTrace.Limits.default(:telemetry_events)
    assert File.read!("guides/options_and_limits.md") =~ "a list of at most #{max} event names"
    too_many = for n <- 1..(max + 1), do: [:kino_trace_test, :"e#{n}"]

    error =
      assert_raise ArgumentError, fn ->
        Trace.record(["Enum.sum/1"], on: [telemetry: too_many])
      end

    assert error.message =~ "at most #{max}"
  end

  test "without the :telemetry package loaded, a clear error names the dependency" do
    if Code.ensure_loaded?(:telemetry) do
      # (this VM has it, from KINO_TRACE_TELEMETRY_EBIN)
      :ok
    else
      error =
        assert_raise ArgumentError, fn ->
          Trace.record(["Enum.sum/1"], on: [telemetry: @event])
        end

      assert error.message =~ "telemetry: needs the :telemetry package loaded"
      assert error.message =~ "{:telemetry, \"~> 1.0\"}"
    end
  end

  for tracer <- [:native, :fallback] do
    @tag skip: @needs_telemetry
    test "an event emitted takes a snapshot with the emitting process's open calls, and stop/1 detaches (#{tracer})" do
      if unquote(tracer) == :fallback, do: Helpers.use_fallback_tracer()
      worker = Worker.start()
      on_exit(fn -> Process.alive?(worker) && Worker.stop(worker) end)
      rec = record(worker)
      assert [%{id: {KinoTrace.Session.TelemetryTrigger, session}}] = handlers()
      assert session == rec.session

      Worker.run(worker, fn -> for n <- 1..5, do: Orders.noise(n) end)
      task = emit_inside(worker)
      # (the handler's message is in the recorder's mailbox before this request)
      :ok = Trace.flush(rec)
      [snap] = Trace.snapshots(rec)
      go(worker, task)

      meta = Trace.info(snap).snapshot
      assert {meta.trigger, meta.pid} == {:telemetry, worker}
      assert Trace.info(rec).recorder.fired.telemetry == 1

      # what led to it: the noise, then handle and process, open when it was emitted
      events = Trace.events(snap)
      calls = for %{kind: :call, function: f} <- events, do: f
      assert calls == List.duplicate(:noise, 5) ++ [:handle, :process]
      assert Enum.count(events, &(&1.kind == :return)) == 5

      :ok = Trace.stop(rec)
      assert handlers() == []
    end
  end

  @tag skip: @needs_telemetry
  test "a recorder killed leaves a handler that detaches itself at its next event" do
    worker = Worker.start()
    on_exit(fn -> Process.alive?(worker) && Worker.stop(worker) end)
    rec = record(worker)
    assert [_] = handlers()
    ref = Process.monitor(rec.session)
    Process.exit(rec.session, :kill)
    assert_receive {:DOWN, ^ref, :process, _, _}
    go(worker, emit_inside(worker))
    assert handlers() == []
  end
end
