defmodule Kino.Trace.SmartCell.BrowserTest do
  # The smart cell's form in headless Chromium (test/browser/smart_cell.test.mjs), on
  # payloads of the real controller; then what the browser pushed is replayed through
  # the controller, and the code it makes is run: browser form -> code -> trace.
  #
  # Needs Node.js, assets/node_modules and /usr/bin/chromium: tagged :browser.
  use ExUnit.Case, async: false

  alias KinoTraceTest.Browser

  alias Kino.Trace.Plan
  alias KinoTrace.SmartCell.{Controller, Form}

  @moduletag :browser
  @moduletag timeout: 300_000

  test "the form works in Chromium, and what it sends makes the code of the trace it shows" do
    saved = %{
      "mode" => "calls",
      "patterns" => "Enum.map/2\nEnum.mpa/2\nEnum.map(list, _) when length(list) > 100",
      "limit" => 1_000
    }

    typed = "Enum.sum/1\n:ets.insrt/2"
    final = "Enum.sum/1\n:ets.insert/2"

    checks =
      for text <- [saved["patterns"], typed, final, ":ets.insert_n"], into: %{} do
        {text, Controller.check(Form.new(%{saved | "patterns" => text}))}
      end

    pushed_out = Path.join(Browser.tmp_dir(), "pushed.json")

    fixture = %{
      connect: Controller.connect(Controller.init(saved)),
      checks: checks,
      typed: typed,
      final_patterns: final,
      pushed_out: pushed_out,
      # the server's answer to "complete" for this line (the browser puts its own seq in)
      completion: KinoTrace.Widget.Payload.completions(%{"text" => ":ets.insert_n", "seq" => 0}),
      node_replies: node_replies(saved),
      screenshot: Path.join(Browser.screenshot_dir(), "screenshot-smart-cell.png")
    }

    # the server's check of the half-typed line the browser test pauses on (issue 25)
    assert [%{ok: false}] = checks[":ets.insert_n"].patterns.results

    Browser.run("smart_cell.test.mjs", fixture)

    # Replay the browser's updates through the real controller, as Kino would.
    controller = Browser.replay_cell(saved, pushed_out)

    source = Controller.to_source(Controller.to_attrs(controller))

    assert source == """
           Kino.Trace.calls(["Enum.sum/1", ":ets.insert/2"],
             pids: :kino_trace_sc_browser,
             exceptions: false,
             caller: true,
             rate: {500, 1_000},
             nodes: :all,
             timeout: 60_000
           )\
           """

    target = start_supervised!({Agent, fn -> :ok end})
    Process.register(target, :kino_trace_sc_browser)
    {trace, _} = Code.eval_string(source)

    try do
      expected =
        Plan.new!([calls: ["Enum.sum/1", ":ets.insert/2"]],
          pids: :kino_trace_sc_browser,
          exceptions: false,
          caller: true,
          rate: {500, 1_000},
          nodes: :all,
          timeout: 60_000
        )

      assert KinoTrace.Client.internals(trace).plan == expected
    after
      Kino.Trace.stop(trace)
    end
  end

  # The real controller's answers to "these nodes…" and `bad node` pushed by the browser
  # (issue 39 item 3): to the first push of each value, and to the same value pushed again
  # (as the browser does on Enter and then on the change event that follows).
  defp node_replies(saved) do
    {replies, _controller} =
      Enum.flat_map_reduce(
        [{"nodes", "some"}, {"node_names", "bad node"}],
        Controller.init(saved),
        fn {field, value}, controller ->
          update = %{"field" => field, "value" => value}
          {first, controller} = Controller.handle_event(controller, "update", update)
          {again, controller} = Controller.handle_event(controller, "update", update)
          {[{"#{field}=#{value}", %{first: wire(first), again: wire(again)}}], controller}
        end
      )

    replies = Map.new(replies)
    # the check that names the bad node comes with the first push only
    assert [["update", _], ["check", %{nodes: message}]] = replies["node_names=bad node"].first
    assert message =~ "bad"
    assert [["update", _]] = replies["node_names=bad node"].again
    replies
  end

  defp wire(effects), do: for({_to, event, payload} <- effects, do: [event, payload])
end
