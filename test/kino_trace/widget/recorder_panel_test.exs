defmodule KinoTrace.Widget.RecorderPanelTest do
  # The trace widget's recorder panel (issue 37 item 5), on the Elixir side: a real
  # recorder through the real controller, every payload checked against the wire's
  # schema. The panel has the ring's fullness, the overwritten events, the triggers and
  # how often they fired, and the frozen snapshots; a snapshot downloads as the trace
  # file Kino.Trace.save/2 writes (it opens in the usual tabs: views_test.exs).
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias KinoTrace.Widget.{Controller, RecorderPayload}
  alias KinoTraceTest.{Helpers, OrderRuns, WidgetDriver, WireSchema}

  @moduletag timeout: 60_000

  doctest KinoTrace.Widget.RecorderPayload

  defp tick(controller) do
    {effects, controller} = WidgetDriver.info(Controller, controller, :tick)
    {for({:broadcast, "recorder", panel} <- effects, do: panel), controller}
  end

  defp reply(controller, event, payload),
    do: WidgetDriver.event(Controller, controller, event, payload)

  # a trace file's frames after its header (whose term has the time it was written)
  defp after_header(<<1, size::32, _crc::32, _header::binary-size(size), rest::binary>>),
    do: rest

  for tracer <- [:native, :fallback] do
    @tag tracer: tracer
    test "a recorder's panel: ring, triggers fired, snapshots opened and downloaded (#{tracer})",
         %{tracer: tracer} do
      Helpers.use_tracer(tracer)
      {worker, rec} = OrderRuns.recorder(exception: true, slower_than: 60_000)

      {controller, _effects} = Controller.init(rec, lifeline: false)

      # an empty ring first
      {[empty], controller} = tick(controller)
      assert %{kept: 0, capacity: 6, overwritten: 0, snapshots: []} = empty

      assert [
               %{trigger: "exception", text: "exception", fired: 0},
               %{trigger: "slower_than", text: "slower than 60000 ms", fired: 0}
             ] = empty.triggers

      # unchanged: no broadcast
      {[], controller} = tick(controller)

      OrderRuns.noise_then_fail(rec, worker)

      {[panel], controller} = tick(controller)
      assert %{kept: 6, capacity: 6} = panel
      assert panel.overwritten > 0
      assert [%{trigger: "exception", fired: 1}, %{fired: 0}] = panel.triggers
      assert [%{trigger: "exception", id: id, events: n, pid: pid}] = panel.snapshots
      # the process the exception was raised in, not the snapshot's server (its id says that)
      assert pid == inspect(worker)
      assert panel.snapshots_taken == 1
      [snap] = Trace.snapshots(rec)
      assert snap.id == id
      assert n == length(Trace.events(snap))

      # a browser connecting later has it with the next tick
      {payload, controller} = Controller.connect(controller)
      WireSchema.check_connect!(payload)
      {[^panel], controller} = tick(controller)

      # (opened in the usual tabs: test/kino_trace/widget/views_test.exs)

      # downloaded: a trace file that opens as the snapshot
      {[{:reply, "snapshot_file", file}], controller} =
        reply(controller, "get_snapshot_file", %{"id" => id})

      assert file.name == "snapshot-#{id}.ktrace"

      path =
        Path.join(
          System.tmp_dir!(),
          "kino_trace_panel_#{System.unique_integer([:positive])}.ktrace"
        )

      File.write!(path, Base.decode64!(file.data))
      on_exit(fn -> File.rm(path) end)
      opened_file = Trace.open(path)
      # (a fun comes back from a file as Kino.Trace.Foreign, which inspects as it did)
      shape = fn trace ->
        Enum.map(Trace.events(trace), &{&1.id, &1.kind, &1.function, inspect(&1.args)})
      end

      assert shape.(opened_file) == shape.(snap)
      assert Trace.info(opened_file).file.complete
      Trace.stop(opened_file)

      # the same bytes save/2 writes, its header's time aside
      saved = path <> ".saved"
      on_exit(fn -> File.rm(saved) end)
      Trace.save(snap, saved)
      assert after_header(File.read!(saved)) == after_header(Base.decode64!(file.data))

      # an id the recorder does not list, or none, is refused by name
      for request <- [%{"id" => id + 1_000}, %{"id" => "1"}, %{}] do
        {[{:reply, "snapshot_file", %{error: error}}], _} =
          reply(controller, "get_snapshot_file", request)

        assert error =~ "no longer kept"
      end

      # a snapshot stopped by hand leaves the panel
      Trace.stop(snap)
      {[after_stop], controller} = tick(controller)
      assert after_stop.snapshots == []

      {[{:reply, "snapshot_file", %{error: _}}], _} =
        reply(controller, "get_snapshot_file", %{"id" => id})

      # the recorder ended: its snapshots with it, and the panel says so
      manual = Trace.snapshot(rec)
      {[%{snapshots: [%{id: manual_id, trigger: "manual"}]}], controller} = tick(controller)
      assert manual_id == manual.id
      Trace.stop(rec)
      {[%{snapshots: []}], controller} = tick(controller)
      {[], _controller} = tick(controller)
      # nothing left behind in the temporary directory
      assert Path.wildcard(Path.join(System.tmp_dir!(), "kino_trace_widget_*.ktrace")) == []
    end
  end

  test "a trace that is not a recorder has no panel, and asks nothing" do
    trace = Trace.calls(["Enum.sum/1"], pids: self())
    {controller, _} = Controller.init(trace, lifeline: false)
    {[], controller} = tick(controller)
    {_payload, controller} = Controller.connect(controller)
    {[], _} = tick(controller)
    assert RecorderPayload.of_trace(trace) == nil
    Trace.stop(trace)
  end
end
