defmodule Kino.Trace.Widget.LookBrowserTest do
  # Issue 25, part A: the trace widget as a Livebook user sees it, at 1 000 px and at
  # 600 px, on payloads from real traces through the real controller (Kino.Trace.Widget
  # .Controller): a flood with drops, a compiler-made function, a trace without returns,
  # a trace of two nodes. The checks run in headless Chromium (test/browser/look.test.mjs).
  #
  # Needs Node.js, assets/node_modules (`npm ci` in assets/) and /usr/bin/chromium:
  # tagged :browser.
  use ExUnit.Case, async: false

  alias KinoTraceTest.Browser

  import KinoTraceTest.Peers, only: [ensure_distribution: 0, start_peer: 1]

  alias KinoTrace.Widget.{Controller, Payload, Store}
  alias KinoTraceTest.Remote.Echo

  @moduletag :browser
  @moduletag timeout: 300_000

  @anonymous ~S(Enum."-sum/1-lists^foldl/2-0-"/2)

  test "header, counts, narrow log, compiler-made names and unknown totals in Chromium" do
    Browser.run("look.test.mjs", %{
      flood: flood_fixture(),
      nodes: nodes_fixture(),
      screenshots: %{
        wide: Path.join(Browser.screenshot_dir(), "screenshot-flood.png"),
        narrow: Path.join(Browser.screenshot_dir(), "screenshot-narrow.png")
      }
    })
  end

  # Enum.sum/1 in a loop, traced without returns, into a widget that may hold only 200
  # events between pushes: its counters count real drops ("not shown: browser behind");
  # the rows are of Enum.sum/1 and of the function the compiler made in it.
  defp flood_fixture do
    trace = Kino.Trace.calls([@anonymous, "Enum.sum/1"], return: false, pids: :new)
    on_exit(fn -> Kino.Trace.stop(trace) end)

    {controller, _effects} =
      Controller.init(trace, max_pending: 200, max_batch: 200, lifeline: false)

    {connect, controller} = Controller.connect(controller)
    list = Enum.to_list(1..20)
    flooder = spawn(fn -> for _ <- 1..20_000, do: Enum.sum(list) end)
    # the widget pushes while the flood runs, as it would in Livebook
    {controller, pushes} = collect_while(controller, [], fn -> Process.alive?(flooder) end)
    batches = for {:broadcast, "events", payload} <- pushes, do: payload
    last = List.last(batches).counters
    assert last.dropped["display"] > 0, "no drops counted: #{inspect(last)}"
    assert length(batches) > 3
    rows = Enum.flat_map(batches, & &1.events)

    assert Enum.any?(
             rows,
             &(&1.mfa == @anonymous and &1.mfa_label == "anonymous fn/2 in Enum.sum/1")
           )

    refute Enum.any?(rows, &(&1.kind == "return"))
    %{connect: connect, batches: batches, terms: terms(controller)}
  end

  # Echo.double/1 six times here and six times on a peer node named livebook_N: 24
  # events (calls and returns), 12 log rows, half of them from a remote process.
  defp nodes_fixture do
    ensure_distribution()
    {_peer, peer} = start_peer(:livebook)
    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [node(), peer])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _effects} = Controller.init(trace, lifeline: false)
    {connect, controller} = Controller.connect(controller)

    # (not from this process: it runs the widget, kino_trace's own work, never traced)
    Task.async(fn ->
      for i <- 1..6 do
        Echo.double(i)
        :erpc.call(peer, Echo, :double, [i])
      end
    end)
    |> Task.await()

    :ok = Kino.Trace.flush(trace)
    {controller, pushes} = Browser.collect(controller)
    returned = &(Enum.count(&1, fn row -> row.kind == "return" end) >= 12)
    {controller, pushes} = Browser.collect_more(controller, pushes, returned)
    batches = for {:broadcast, "events", payload} <- pushes, do: payload
    rows = Enum.flat_map(batches, & &1.events)
    assert Enum.count(rows, &(&1.kind == "call")) == 12
    assert Enum.count(rows, &(&1.remote and &1.node == Atom.to_string(peer))) == 12
    assert Enum.count(rows, &(not &1.remote)) == 12
    %{connect: connect, batches: batches, terms: terms(controller), peer: Atom.to_string(peer)}
  end

  defp terms(controller) do
    for row <- Store.rows(controller.store), into: %{} do
      {:ok, event} = Store.fetch(controller.store, row.id)
      {to_string(row.id), Payload.full(event)}
    end
  end

  defp collect_while(controller, pushes, running?) do
    {controller, pushes} = Browser.collect(controller, pushes)
    if running?.(), do: collect_while(controller, pushes, running?), else: {controller, pushes}
  end
end
