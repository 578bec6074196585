# The stats widget's Kino.JS.Live adapter, through Kino.Test. It needs Kino: the module
# is only defined when Kino is loaded, and tagged :kino (the behaviour itself is tested
# without Kino in widget_stats_controller_test.exs).
if Code.ensure_loaded?(Kino.Test) do
  defmodule Kino.Trace.StatsWidgetTest do
    use ExUnit.Case, async: false

    import Kino.Test

    alias KinoTraceTest.StatsWidgetSample, as: Sample

    @moduletag :kino
    @moduletag timeout: 30_000

    setup :configure_livebook_bridge

    setup do
      stats = Kino.Trace.stats(["KinoTraceTest.StatsWidgetSample"], pids: :new)
      on_exit(fn -> Kino.Trace.stop(stats) end)
      %{stats: stats}
    end

    test "a stats session renders as the stats widget, with its own assets", %{stats: stats} do
      output = Kino.Render.to_livebook(stats)
      assert %{type: :js, js_view: %{ref: ref, pid: pid, assets: assets}} = output
      assert is_binary(ref) and is_pid(pid)
      assert assets.js_path == "main.js"
      assert assets.hash != Kino.Trace.Widget.__assets_info__().hash
    end

    test "connect sends the figures; refreshes broadcast new ones", %{stats: stats} do
      Sample.in_process(fn -> Sample.light(1) end)
      widget = Kino.Trace.StatsWidget.new(stats, interval: 100)
      data = connect(widget)
      assert data.status == "running"
      assert [%{key: "KinoTraceTest.StatsWidgetSample.light/1", calls: 1}] = data.snapshot.rows

      Sample.in_process(fn -> Sample.light(2) end)

      assert_broadcast_event(
        widget,
        "snapshot",
        %{snapshot: %{rows: [%{calls: 2, processes: [_, _]}]}},
        2_000
      )
    end

    test "reset and stop", %{stats: stats} do
      Sample.in_process(fn -> Sample.light(1) end)
      widget = Kino.Trace.StatsWidget.new(stats, interval: 60_000)
      _ = connect(widget)
      push_event(widget, "reset", %{})
      assert_broadcast_event(widget, "snapshot", %{snapshot: %{rows: []}}, 2_000)
      push_event(widget, "stop", %{})
      assert_broadcast_event(widget, "status", %{status: "stopped"}, 2_000)
      refute Process.alive?(stats.server)
    end

    test "ending the widget's process ends the session", %{stats: stats} do
      widget = Kino.Trace.StatsWidget.new(stats)
      ref = Process.monitor(stats.server)
      Process.exit(widget.pid, :kill)
      assert_receive {:DOWN, ^ref, :process, _, _}, 5_000
    end
  end
end
