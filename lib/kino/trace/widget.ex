if Code.ensure_loaded?(Kino.JS.Live) do
  defmodule Kino.Trace.Widget do
    @moduledoc """
    The Livebook widget of a trace: live log, sequence diagram, per-function stats (with
    p50, p99 and a histogram of the durations), call trees and a flame graph (the Flame
    tab), with a pattern editor and pause/resume, clear, stop and export controls.

    A `%Kino.Trace{}` renders as this widget when it is a cell's result, so usually
    there is nothing to call:

        Kino.Trace.calls(["MyApp.Repo.get/2", "Enum"])

    To place it yourself (in a layout, or with options), use `new/2`. Here a browser
    that connects gets the last 1 000 events (a call and its return are two events and
    one row of the log):

        trace = Kino.Trace.calls([MyApp.Cache])
        Kino.Layout.tabs(Trace: Kino.Trace.Widget.new(trace, history: 1_000))

    Closing the widget or re-evaluating its cell ends the trace.

    The widget's behaviour lives in a plain module that is tested without Kino; this
    module adapts it to `Kino.JS.Live`.
    """

    use KinoTrace.Widget.Live,
      assets_path: "lib/assets/trace/build",
      controller: KinoTrace.Widget.Views

    @doc """
    Builds the widget for a running trace.

    Options:

      * `:interval` - ms between pushes to the browser (default 100)
      * `:max_batch` - events per push (default 1 000)
      * `:max_pending` - events waiting for a push before the oldest are dropped
        (default 10 000)
      * `:keep` - events kept for expanding rows (default 10 000)
      * `:history` - how many of the most recent events a browser gets when it connects
        (default 5 000, at most `:keep`). Like every count here it counts events, not log
        rows: a call and its return are two events, shown as one row.
      * `:limit` - items shown per collection in a row (`inspect/2`'s `:limit`, default
        20), `:printable_limit` - characters shown per string (default 120),
        `:max_chars` - characters kept of each rendered term (default 400)
      * `:max_entries` - log rows the browser holds, the oldest dropped first (default
        200 000)
      * `:sequence_rows` - rows the browser's sequence tab holds (default 4 000)
      * `:lifeline` - stop the trace when the calling process exits (default `true`)
    """
    @spec new(Kino.Trace.t(), keyword()) :: Kino.JS.Live.t()
    def new(%Kino.Trace{} = trace, opts \\ []) do
      Kino.JS.Live.new(__MODULE__, {trace, opts})
    end
  end

  defimpl Kino.Render, for: Kino.Trace do
    def to_livebook(trace) do
      trace
      |> Kino.Trace.Widget.new()
      |> Kino.Render.to_livebook()
    end
  end
end
