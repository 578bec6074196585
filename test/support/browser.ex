defmodule KinoTraceTest.Browser do
  @moduledoc false
  # What the browser suites share: running a test/browser script on a fixture of real
  # payloads, where screenshots go, and driving a widget controller as its process would.

  import ExUnit.Assertions

  alias KinoTrace.SmartCell.Controller, as: CellController
  alias KinoTrace.Widget.Controller

  @root Path.expand("../..", __DIR__)

  @doc """
  Runs `test/browser/<script>` in Node on `fixture` (written as JSON to a temporary
  file, removed when the test exits) and asserts it exited 0, printing its output.
  """
  def run(script, fixture) do
    path = Path.join(tmp_dir(), "payloads.json")
    File.write!(path, JSON.encode!(fixture))

    {output, status} =
      System.cmd("node", [Path.join(@root, "test/browser/" <> script), path],
        stderr_to_stdout: true
      )

    IO.puts(output)
    assert status == 0, "browser test failed (exit #{status}):\n#{output}"
  end

  @doc """
  A fresh temporary directory (for a fixture, or the file a harness records the
  browser's pushes in), removed when the test exits.
  """
  def tmp_dir do
    dir = Path.join(System.tmp_dir!(), "kino_trace_browser_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    ExUnit.Callbacks.on_exit(fn -> File.rm_rf(dir) end)
    dir
  end

  @doc """
  Replays the updates a smart cell's form pushed in the browser (`pushed_out`, the
  harness's record) through a smart cell controller started from `saved`, as Kino
  would, refuting an error reply to any; returns the controller.
  """
  def replay_cell(saved, pushed_out) do
    pushed_out
    |> File.read!()
    |> JSON.decode!()
    |> Enum.reduce(CellController.init(saved), fn update, controller ->
      {effects, controller} = CellController.handle_event(controller, "update", update)
      refute Enum.any?(effects, &match?({:reply, "error", _}, &1)), inspect({update, effects})
      controller
    end)
  end

  @doc """
  Where the suites' screenshots go: test/browser/output (ignored by git), or docs/ (the
  README's pictures) with KINO_TRACE_SCREENSHOTS=docs, so a test run never dirties the
  tree.
  """
  def screenshot_dir do
    dir =
      case System.get_env("KINO_TRACE_SCREENSHOTS") do
        "docs" -> Path.join(@root, "docs")
        _ -> Path.join(@root, "test/browser/output")
      end

    File.mkdir_p!(dir)
    dir
  end

  @doc """
  Handles the widget's messages (as its process would) until the trace has been quiet
  for a moment; returns the controller and the effects it produced, timers set.
  """
  def collect(controller, pushes \\ [], waited \\ 0) do
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

  @doc """
  Goes on collecting (a flush at a time, at most `tries` times) until `done?` accepts the
  rows pushed so far.
  """
  def collect_more(controller, pushes, done?, tries \\ 20) do
    rows = for {:broadcast, "events", %{events: events}} <- pushes, row <- events, do: row

    if done?.(rows) or tries == 0 do
      {controller, pushes}
    else
      Process.send_after(self(), :flush, 0)
      {controller, more} = collect(controller)
      collect_more(controller, pushes ++ more, done?, tries - 1)
    end
  end
end
