defmodule Kino.Trace.Widget.RecorderBrowserTest do
  # Issue 37 item 5 in headless Chromium: the trace widget of a recorder shows its panel
  # (ring, overwritten, triggers fired, snapshots), opens a snapshot clicked in the usual
  # tabs (Log, Sequence, Stats, Calls, Flame) and goes back to the live recorder, and
  # downloads a snapshot's trace file, which Kino.Trace.open/1 opens as the snapshot.
  # Payloads are made by the real controller (KinoTrace.Widget.Views, as the widget runs
  # it) from a real recorder; test/browser/recorder.test.mjs drives the widget on them.
  #
  # Needs Node.js, assets/node_modules and /usr/bin/chromium: tagged :browser.
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias KinoTrace.Widget.Views
  alias KinoTraceTest.{Browser, OrderRuns}

  @moduletag :browser
  @moduletag timeout: 300_000

  test "a recorder's panel, a snapshot opened in the usual tabs and back, downloaded, in Chromium" do
    {worker, rec} = OrderRuns.recorder(exception: true)

    on_exit(fn -> Trace.stop(rec) end)
    {views, _} = Views.init(rec, lifeline: false)
    {connect, views} = Views.connect(views)

    OrderRuns.noise_then_fail(rec, worker)

    # the recorder's own log: its events as they came
    {live, views} = live_events(views, rec.id)

    {:ok, effects, views} = Views.handle_info(views, :tick)
    [panel] = for {:broadcast, "recorder", panel} <- effects, do: panel
    [%{id: id}] = panel.snapshots
    [snap] = Trace.snapshots(rec)

    {[{:reply, "snapshot", snapshot} | _timers], views} =
      Views.handle_event(views, "open_snapshot", %{"id" => id})

    # what the snapshot's view answers: a row's terms (its exception's), its flame
    exception = List.last(Trace.events(snap))
    view = fn event, payload -> %{"id" => id, "event" => event, "payload" => payload} end

    {[{:reply, "view", term}], views} =
      Views.handle_event(views, "view", view.("get_term", %{"id" => exception.id}))

    {[{:reply, "view", flame}], views} =
      Views.handle_event(views, "view", view.("get_flame", %{"process" => nil}))

    {[{:reply, "snapshot_file", file}], _} =
      Views.handle_event(views, "get_snapshot_file", %{"id" => id})

    out = Path.join(System.tmp_dir!(), "kino_trace_rec_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(out) end)
    download = Path.join(out, "snapshot.ktrace")

    Browser.run("recorder.test.mjs", %{
      connect: connect,
      live: live,
      panel: panel,
      snapshot: snapshot,
      exception_id: exception.id,
      view_replies: %{get_term: term, get_flame: flame},
      file: file,
      download_out: download,
      screenshot: Path.join(Browser.screenshot_dir(), "screenshot-recorder.png")
    })

    # the file the browser saved opens as the snapshot
    opened = Trace.open(download)
    shape = fn trace -> Enum.map(Trace.events(trace), &{&1.id, &1.kind, &1.function}) end
    assert shape.(opened) == shape.(snap)
    assert List.last(Trace.events(opened)).kind == :exception
    Trace.stop(opened)
  end

  # The "events" broadcasts of the recorder's own log, for what it has delivered so far
  # (Kino.Trace.flush/1 has them sent), and the controller after them.
  defp live_events(views, id, effects \\ []) do
    receive do
      {:kino_trace, ^id, _} = message ->
        {:ok, more, views} = Views.handle_info(views, message)
        live_events(views, id, effects ++ more)
    after
      0 ->
        {:ok, more, views} = Views.handle_info(views, :flush)
        {for({:broadcast, "events", payload} <- effects ++ more, do: payload), views}
    end
  end
end
