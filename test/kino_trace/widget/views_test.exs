defmodule KinoTrace.Widget.ViewsTest do
  # Issue 37 item 5, "clicking a snapshot opens it in the usual tabs", on the Elixir side:
  # the trace widget's controller (KinoTrace.Widget.Views) opens a snapshot of a real
  # recorder as a view, a controller of the snapshot as a trace from Kino.Trace.open/1
  # has, whose requests (a row's terms, the flame, Mermaid) are answered from the
  # snapshot's events, beside the recorder's own controller. Views are bounded, close when
  # their snapshot leaves the recorder's list, and stop following it when closed. Every
  # payload is checked against the wire's schema.
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias KinoTrace.Widget.{Controller, Views}
  alias KinoTraceTest.{Helpers, OrderRuns, WidgetDriver, WireSchema}
  alias KinoTraceTest.PanelOrders, as: Orders
  alias KinoTraceTest.Sample.Worker

  @moduletag timeout: 60_000

  defp event(views, event, payload), do: WidgetDriver.event(Views, views, event, payload)

  defp view_event(views, id, event, payload),
    do: event(views, "view", %{"id" => id, "event" => event, "payload" => payload})

  defp info(views, message), do: WidgetDriver.info(Views, views, message)

  defp open(views, id) do
    {[{:reply, "snapshot", %{id: ^id, view: connect}} | timers], views} =
      event(views, "open_snapshot", %{"id" => id})

    WireSchema.check_connect!(connect)
    {connect, timers, views}
  end

  # The messages a view's snapshot sends on subscribing (its events, then its status),
  # handled as the widget's process would.
  defp take_subscription(views, id, effects \\ []) do
    receive do
      {:kino_trace, ^id, {:status, _}} = message ->
        {more, views} = info(views, message)
        {effects ++ more, views}

      {:kino_trace, ^id, _} = message ->
        {more, views} = info(views, message)
        take_subscription(views, id, effects ++ more)
    after
      10_000 -> flunk("the snapshot sent no status")
    end
  end

  # The recorder's own messages delivered so far (Kino.Trace.flush/1 has them sent).
  defp take_live(views, id) do
    receive do
      {:kino_trace, ^id, _} = message ->
        {_, views} = info(views, message)
        take_live(views, id)
    after
      0 -> views
    end
  end

  for tracer <- [:native, :fallback] do
    @tag tracer: tracer
    test "a snapshot clicked in the panel opens in the usual tabs, as Kino.Trace.open/1's trace (#{tracer})",
         %{tracer: tracer} do
      Helpers.use_tracer(tracer)
      {worker, rec} = OrderRuns.recorder(exception: true)

      on_exit(fn -> Trace.stop(rec) end)
      {views, _effects} = Views.init(rec, lifeline: false)

      OrderRuns.noise_then_fail(rec, worker)

      {effects, views} = info(views, :tick)
      [%{snapshots: [%{id: id}]}] = for {:broadcast, "recorder", panel} <- effects, do: panel
      [snap] = Trace.snapshots(rec)
      assert snap.id == id
      snap_events = Trace.events(snap)

      # the recorder's own log cleared: what the view answers comes from the snapshot
      {[{:broadcast, "clear", _}], views} = event(views, "clear", %{})

      {connect, timers, views} = open(views, id)
      assert Views.open_ids(views) == [id]
      assert [{:send_after, {:kino_trace_view, ^id, :tick}, _}] = timers
      assert connect.status == "stopped"
      assert Enum.map(connect.events, & &1.id) == Enum.map(snap_events, & &1.id)

      assert %{kind: "exception", mfa: "KinoTraceTest.PanelOrders.fail/1"} =
               List.last(connect.events)

      # its snapshot's events and status go to the view, as "view" events
      {effects, views} = take_subscription(views, id)

      assert [{:broadcast, "view", %{id: ^id, event: "status", payload: %{status: "stopped"}}}] =
               effects

      # a row's terms: from the snapshot, where the recorder's log has them no longer
      exception = List.last(snap_events)

      {[{:reply, "view", %{id: ^id, event: "term", payload: term}}], views} =
        view_event(views, id, "get_term", %{"id" => exception.id})

      assert %{kind: "exception", exception: banner} = term
      assert banner =~ "no stock"

      {[{:reply, "term", %{error: error}}], views} =
        event(views, "get_term", %{"id" => exception.id})

      assert error =~ "no longer kept"

      # the Flame tab, the Sequence tab's Mermaid: from the snapshot's events
      {[{:reply, "view", %{event: "flame", payload: flame}}], views} =
        view_event(views, id, "get_flame", %{"process" => nil})

      assert Enum.any?(flame.frames, &(&1 =~ "KinoTraceTest.PanelOrders.fail/1"))
      ids = Enum.map(snap_events, & &1.id)

      {[{:reply, "view", %{event: "mermaid", payload: %{source: "sequenceDiagram" <> _}}}], views} =
        view_event(views, id, "get_mermaid", %{"ids" => ids})

      # its timer: its latency columns (the Stats tab) and the next tick, for the view
      {effects, views} = info(views, {:kino_trace_view, id, :tick})

      assert [%{rows: rows}] =
               for({:broadcast, "view", %{event: "latency", payload: p}} <- effects, do: p)

      assert Enum.any?(rows, &(&1.mfa == "KinoTraceTest.PanelOrders.fail/1"))
      assert {:send_after, {:kino_trace_view, ^id, :tick}, _} = List.last(effects)

      # the recorder's own events still go to its log, not to the view
      Worker.run(worker, fn -> Orders.noise(99) end)
      Helpers.trace_delivered(worker)
      :ok = Trace.flush(rec)
      views = take_live(views, rec.id)
      {effects, views} = info(views, :flush)
      rows = for {:broadcast, "events", %{events: rows}} <- effects, row <- rows, do: row
      assert Enum.any?(rows, &(&1[:call] == "KinoTraceTest.PanelOrders.noise(99)"))
      assert for({:broadcast, "view", _} <- effects, do: :view) == []

      # the view starts as the widget of the snapshot does, and as that of its file
      {expected, _} = Controller.connect(elem(Controller.init(snap, lifeline: false), 0))
      assert connect.events == expected.events

      path =
        Path.join(
          System.tmp_dir!(),
          "kino_trace_views_#{System.unique_integer([:positive])}.ktrace"
        )

      on_exit(fn -> File.rm(path) end)
      Trace.save(snap, path)
      opened = Trace.open(path)
      {from_file, _} = Controller.connect(elem(Controller.init(opened, lifeline: false), 0))
      shape = fn rows -> Enum.map(rows, &{&1.id, &1.kind, &1.mfa}) end
      assert shape.(from_file.events) == shape.(connect.events)
      Trace.stop(opened)

      # the snapshot leaves the recorder's list: its view closes, and says so
      Trace.stop(snap)
      {effects, views} = info(views, :tick)
      assert [%{snapshots: []}] = for({:broadcast, "recorder", panel} <- effects, do: panel)
      assert Views.open_ids(views) == []
      assert Views.handle_info(views, {:kino_trace_view, id, :tick}) == :unknown

      {[{:reply, "snapshot", %{id: ^id, error: error}}], _} =
        view_event(views, id, "get_term", %{"id" => exception.id})

      assert error =~ "closed"
    end
  end

  test "views are bounded, the least recently opened closed first, and no longer followed" do
    worker = Helpers.start_worker()
    rec = Trace.record(["KinoTraceTest.PanelOrders.noise/1"], pids: worker, return: false)
    on_exit(fn -> Trace.stop(rec) end)

    snaps =
      for n <- 1..6 do
        Worker.run(worker, fn -> Orders.noise(n) end)
        Helpers.trace_delivered(worker)
        :ok = Trace.flush(rec)
        Trace.snapshot(rec)
      end

    {views, _} = Views.init(rec, lifeline: false)
    ids = Enum.map(snaps, & &1.id)

    views =
      Enum.reduce(ids, views, fn id, views ->
        {connect, _timers, views} = open(views, id)
        assert length(connect.events) == length(Trace.events(Enum.find(snaps, &(&1.id == id))))
        views
      end)

    max = Views.max_views()
    assert Views.open_ids(views) == ids |> Enum.reverse() |> Enum.take(max)
    {closed, kept} = Enum.split(snaps, length(snaps) - max)
    # a closed view no longer follows its snapshot; an open one does, once
    for s <- closed, do: assert(Trace.info(s).subscribers == 0)
    for s <- kept, do: assert(Trace.info(s).subscribers == 1)

    # opened again: the view open is reused, and is the most recent
    [oldest_open | _] = kept
    {_connect, [], views} = open(views, oldest_open.id)
    assert hd(Views.open_ids(views)) == oldest_open.id
    assert Trace.info(oldest_open).subscribers == 1

    # a closed one opens again (and closes the least recently opened)
    [first | _] = closed
    {_connect, [_timer], views} = open(views, first.id)
    assert hd(Views.open_ids(views)) == first.id
    assert length(Views.open_ids(views)) == max
  end

  test "a browser's ids are checked: unknown, not an integer, or no snapshot of a recorder" do
    worker = Helpers.start_worker()
    rec = Trace.record(["KinoTraceTest.PanelOrders.noise/1"], pids: worker)
    on_exit(fn -> Trace.stop(rec) end)
    snap = Trace.snapshot(rec)
    {views, _} = Views.init(rec, lifeline: false)

    for request <- [%{"id" => snap.id + 1_000}, %{"id" => "#{snap.id}"}, %{}, nil] do
      {[{:reply, "snapshot", %{error: error}}], ^views} = event(views, "open_snapshot", request)
      assert error =~ "no longer kept"
    end

    # a view event without a view open, or without an id
    {[{:reply, "snapshot", %{error: error}}], _} = view_event(views, snap.id, "get_term", %{})
    assert error =~ "open it again"
    {[], _} = event(views, "view", %{"event" => "get_term"})

    # a view does not open views (nor does anything in it reach the recorder)
    {_connect, _timers, views} = open(views, snap.id)
    {[], _} = view_event(views, snap.id, "open_snapshot", %{"id" => snap.id})
    {[], _} = view_event(views, snap.id, "view", %{"id" => snap.id, "event" => "clear"})

    # a trace that is not a recorder has no snapshot to open
    trace = Trace.calls(["Enum.sum/1"], pids: self())
    {plain, _} = Views.init(trace, lifeline: false)
    {[{:reply, "snapshot", %{error: _}}], _} = event(plain, "open_snapshot", %{"id" => snap.id})
    Trace.stop(trace)
  end
end
