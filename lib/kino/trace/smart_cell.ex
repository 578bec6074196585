if Code.ensure_loaded?(Kino.SmartCell) do
  defmodule Kino.Trace.SmartCell do
    @moduledoc """
    The "Trace" smart cell: a form that writes the `Kino.Trace` call for you.

    Insert it from Livebook's "+ Smart" menu. Choose what to trace (calls, messages,
    process events or call statistics), type the patterns one per line (each line is
    checked as you type, with the same messages as the widget's pattern editor), choose
    whose events, the limits and the nodes. The cell's code is the shortest call that
    does it, with only the options that differ from the defaults:

        Kino.Trace.calls(["MyApp.Repo.get/2"], caller: true, limit: 1_000)

    Evaluating the cell starts the trace and shows its live widget; evaluating it
    again ends the previous trace. Convert the cell to code to go on by hand.

    The code is written from data: the processes and nodes typed in are literals or an
    error, never code. Checking a pattern as you type
    loads the module it names when it is on the code path but not loaded yet (its
    `-on_load` function runs), as the trace would when it starts: the pre-flight check
    reads the module's functions, and literal atoms of its code, from the loaded module.

    kino_trace registers the cell when it starts (in its `Application.start/2`, as Kino's
    packages do), if Kino is loaded. The cell's behaviour lives in a plain module that
    is tested without Kino; this module adapts it to `Kino.SmartCell`.
    """

    use Kino.JS, assets_path: "lib/assets/smart_cell/build"
    use Kino.JS.Live
    use Kino.SmartCell, name: "Trace"

    alias KinoTrace.SmartCell.Controller

    @impl true
    def init(attrs, ctx) do
      {:ok, assign(ctx, controller: Controller.init(attrs))}
    end

    @impl true
    def handle_connect(ctx) do
      {:ok, Controller.connect(ctx.assigns.controller), ctx}
    end

    @impl true
    def handle_event(event, payload, ctx) do
      {effects, controller} = Controller.handle_event(ctx.assigns.controller, event, payload)
      {:noreply, KinoTrace.Widget.Live.run(effects, assign(ctx, controller: controller))}
    end

    # The cells above were evaluated: the modules the patterns name may exist now.
    # Runs in the evaluator: only a message to the cell's process.
    @impl true
    def scan_binding(server, _binding, _env), do: send(server, :kino_trace_recheck)

    @impl true
    def handle_info(:kino_trace_recheck, ctx) do
      effects = Controller.recheck(ctx.assigns.controller)
      {:noreply, KinoTrace.Widget.Live.run(effects, ctx)}
    end

    def handle_info(_message, ctx), do: {:noreply, ctx}

    @impl true
    def to_attrs(ctx), do: Controller.to_attrs(ctx.assigns.controller)

    @impl true
    def to_source(attrs), do: Controller.to_source(attrs)
  end
end
