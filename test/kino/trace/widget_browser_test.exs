defmodule Kino.Trace.WidgetBrowserTest do
  # Runs a real trace on a sample workload, builds the widget's payloads with the real
  # Elixir code (Kino.Trace.Widget.Controller and Payload), writes them to a JSON file
  # and runs the widget in headless Chromium on them (test/browser/widget.test.mjs).
  #
  # Needs Node.js, assets/node_modules (`npm ci` in assets/) and /usr/bin/chromium:
  # tagged :browser.
  use ExUnit.Case, async: false

  alias Kino.Trace.Widget.{Controller, Payload, Store}

  @moduletag :browser
  @moduletag timeout: 300_000

  @root Path.expand("../../..", __DIR__)

  test "the widget works in Chromium on payloads from a real trace" do
    trace =
      Kino.Trace.calls([
        "SampleApp.Cache.fetch/2",
        "SampleApp.Cache.put/3",
        "SampleApp.Repo.get/2",
        "SampleApp.Repo.delete/1"
      ])

    on_exit(fn -> Kino.Trace.stop(trace) end)

    # small pushes, so the browser gets several
    {controller, _effects} = Controller.init(trace, max_batch: 64)
    {connect, controller} = Controller.connect(controller)

    run_workload()
    {controller, pushes} = collect(controller)
    assert returns(pushes) > 100

    # A pattern edit with one bad line (a typo), as the widget's textarea sends it.
    lines = [
      "SampleApp.Cache.fetch/2",
      "SampleApp.Repo.gte/2",
      "SampleApp.Repo.get(:users, id) when id > 2"
    ]

    {[{:broadcast, "patterns", pattern_reply}], controller} =
      Controller.handle_event(controller, "set_patterns", %{"patterns" => lines})

    assert [%{ok: true}, %{ok: false}, %{ok: true}] = pattern_reply.results

    # Full terms for every kept event, as the "get_term" replies would be.
    terms =
      for row <- Store.rows(controller.store), into: %{} do
        {:ok, event} = Store.fetch(controller.store, row.id)
        {to_string(row.id), Payload.full(event)}
      end

    fixture = %{
      connect: connect,
      batches: for({:broadcast, "events", payload} <- pushes, do: payload),
      pattern_lines: lines,
      pattern_reply: pattern_reply,
      terms: terms,
      screenshot: Path.join(@root, "docs/screenshot.png")
    }

    dir = Path.join(System.tmp_dir!(), "kino_trace_browser_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    path = Path.join(dir, "payloads.json")
    File.write!(path, JSON.encode!(fixture))

    {output, status} =
      System.cmd("node", [Path.join(@root, "test/browser/widget.test.mjs"), path],
        stderr_to_stdout: true
      )

    IO.puts(output)
    assert status == 0, "browser test failed (exit #{status}):\n#{output}"
  end

  # A small app at work: several processes reading through a cache, misses, a
  # not-found, exceptions raised out of nested calls, evictions.
  defp run_workload do
    tasks =
      for worker <- 1..4 do
        Task.async(fn ->
          for id <- 1..6 do
            SampleApp.Cache.fetch(:users, id)
            SampleApp.Cache.fetch(:users, id)
          end

          SampleApp.Cache.fetch(:orders, 0)
          SampleApp.Cache.fetch_all(:orders, [worker, worker + 10])

          try do
            SampleApp.Cache.fetch(:users, -worker)
          rescue
            ArgumentError -> :ok
          end

          SampleApp.Cache.evict(:users, worker)
        end)
      end

    Task.await_many(tasks)
  end

  defp returns(pushes) do
    for {:broadcast, "events", %{events: rows}} <- pushes,
        row <- rows,
        row.kind in ["return", "exception"],
        reduce: 0 do
      n -> n + 1
    end
  end

  # Handles the widget's messages until the trace has been quiet for a moment.
  defp collect(controller, pushes \\ [], waited \\ 0) do
    receive do
      message ->
        case Controller.handle_info(controller, message) do
          {:ok, effects, controller} ->
            sent =
              Enum.flat_map(effects, fn
                {:send_after, message, ms} ->
                  Process.send_after(self(), message, ms)
                  []

                effect ->
                  [effect]
              end)

            collect(controller, pushes ++ sent, waited)

          :unknown ->
            collect(controller, pushes, waited)
        end
    after
      300 ->
        cond do
          pushes != [] -> {controller, pushes}
          waited > 10_000 -> flunk("no events arrived from the workload")
          true -> collect(controller, pushes, waited + 300)
        end
    end
  end
end
