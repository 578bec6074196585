defmodule Kino.Trace.Widget.RecorderBrowserTest do
  # Issue 37 item 5 in headless Chromium: the trace widget of a recorder shows its panel
  # (ring, overwritten, triggers fired, snapshots), opens a snapshot and downloads its
  # trace file, which Kino.Trace.open/1 opens as the snapshot. Payloads are made by the
  # real controller from a real recorder; test/browser/recorder.test.mjs drives the
  # widget on them.
  #
  # Needs Node.js, assets/node_modules and /usr/bin/chromium: tagged :browser.
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias KinoTrace.Widget.Controller
  alias KinoTraceTest.Browser
  alias KinoTraceTest.Helpers
  alias KinoTraceTest.PanelOrders, as: Orders
  alias KinoTraceTest.Sample.Worker

  @moduletag :browser
  @moduletag timeout: 300_000

  test "a recorder's panel, a snapshot opened and downloaded, in Chromium" do
    worker = Worker.start()
    on_exit(fn -> Process.alive?(worker) && Worker.stop(worker) end)

    rec =
      Trace.record(["KinoTraceTest.PanelOrders"], pids: worker, events: 6, on: [exception: true])

    on_exit(fn -> Trace.stop(rec) end)
    {controller, _} = Controller.init(rec, lifeline: false)
    {connect, controller} = Controller.connect(controller)

    Worker.run(worker, fn -> for n <- 1..10, do: Orders.noise(n) end)

    Worker.run(worker, fn ->
      try do
        Orders.handle(fn -> Orders.fail("no stock") end)
      rescue
        e -> e
      end
    end)

    Helpers.trace_delivered(worker)
    :ok = Trace.flush(rec)

    {:ok, effects, controller} = Controller.handle_info(controller, :tick)
    [panel] = for {:broadcast, "recorder", panel} <- effects, do: panel
    [%{id: id}] = panel.snapshots

    {[{:reply, "snapshot", snapshot}], controller} =
      Controller.handle_event(controller, "open_snapshot", %{"id" => id})

    {[{:reply, "snapshot_file", file}], _} =
      Controller.handle_event(controller, "get_snapshot_file", %{"id" => id})

    out = Path.join(System.tmp_dir!(), "kino_trace_rec_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(out) end)
    download = Path.join(out, "snapshot.ktrace")

    Browser.run("recorder.test.mjs", %{
      connect: connect,
      panel: panel,
      snapshot: snapshot,
      file: file,
      download_out: download,
      screenshot: Path.join(Browser.screenshot_dir(), "screenshot-recorder.png")
    })

    # the file the browser saved opens as the snapshot
    [snap] = Trace.snapshots(rec)
    opened = Trace.open(download)
    shape = fn trace -> Enum.map(Trace.events(trace), &{&1.id, &1.kind, &1.function}) end
    assert shape.(opened) == shape.(snap)
    assert List.last(Trace.events(opened)).kind == :exception
    Trace.stop(opened)
  end
end
