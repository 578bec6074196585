# The Kino.JS.Live adapter, through Kino.Test. It needs Kino: the module is only defined
# when Kino is loaded, and tagged :kino (the behaviour itself is tested without Kino in
# widget_controller_test.exs).
if Code.ensure_loaded?(Kino.Test) do
  defmodule Kino.Trace.WidgetTest do
    use ExUnit.Case, async: false

    import Kino.Test

    @moduletag :kino
    @moduletag timeout: 30_000

    setup :configure_livebook_bridge

    setup do
      trace = Kino.Trace.calls(["SampleApp.Cache.fetch/2", "SampleApp.Repo.get/2"])
      on_exit(fn -> Kino.Trace.stop(trace) end)
      %{trace: trace}
    end

    defp workload(fun), do: Task.async(fun) |> Task.await()

    test "a trace renders as the widget", %{trace: trace} do
      output = Kino.Render.to_livebook(trace)
      assert %{type: :js, js_view: %{ref: ref, pid: pid, assets: assets}} = output
      assert is_binary(ref) and is_pid(pid)
      assert assets.js_path == "main.js"
    end

    test "connect sends patterns, status, counters and recent rows", %{trace: trace} do
      workload(fn -> SampleApp.Cache.fetch(:users, 1) end)
      KinoTraceTest.Helpers.trace_delivered(:all)
      :ok = Kino.Trace.flush(trace)
      widget = Kino.Trace.Widget.new(trace)
      data = connect(widget)

      assert data.status == "running"
      assert "SampleApp.Cache.fetch/2" in data.patterns
      assert Enum.any?(data.events, &(&1.call == "SampleApp.Cache.fetch(:users, 1)"))
      assert %{events: _, dropped: %{"display" => 0}} = data.counters
    end

    test "calls are broadcast as rows", %{trace: trace} do
      widget = Kino.Trace.Widget.new(trace)
      _ = connect(widget)
      workload(fn -> SampleApp.Repo.get(:users, 2) end)

      assert_broadcast_event(
        widget,
        "events",
        %{events: [row | _], counters: %{status: "running"}},
        2_000
      )

      assert row.call == "SampleApp.Repo.get(:users, 2)"
    end

    test "pattern edits report bad lines", %{trace: trace} do
      widget = Kino.Trace.Widget.new(trace)
      _ = connect(widget)

      push_event(widget, "set_patterns", %{
        "patterns" => ["SampleApp.Repo.delete/1", "Nope.nope/0"]
      })

      assert_broadcast_event(
        widget,
        "patterns",
        %{results: [%{ok: true}, %{ok: false, error: error}]},
        2_000
      )

      assert error =~ "Nope"
    end

    test "pause and stop broadcast the status", %{trace: trace} do
      widget = Kino.Trace.Widget.new(trace)
      _ = connect(widget)
      push_event(widget, "pause", %{})
      assert_broadcast_event(widget, "status", %{status: "paused"}, 2_000)
      push_event(widget, "stop", %{})
      assert_broadcast_event(widget, "status", %{status: "stopped"}, 2_000)
    end

    test "get_term replies to the asking client only", %{trace: trace} do
      widget = Kino.Trace.Widget.new(trace)
      _ = connect(widget)
      workload(fn -> SampleApp.Repo.get(:users, 3) end)
      assert_broadcast_event(widget, "events", %{events: [row | _]}, 2_000)

      push_event(widget, "get_term", %{"id" => row.id})
      assert_send_event(widget, "term", %{id: id, args: [":users", "3"]}, 2_000)
      assert id == row.id
    end

    test "ending the widget's process ends the trace", %{trace: trace} do
      widget = Kino.Trace.Widget.new(trace)
      ref = Process.monitor(trace.session)
      Process.exit(widget.pid, :kill)
      assert_receive {:DOWN, ^ref, :process, _, _}, 5_000
    end
  end
end
