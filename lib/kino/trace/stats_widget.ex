if Code.ensure_loaded?(Kino.JS.Live) do
  defmodule Kino.Trace.StatsWidget do
    @moduledoc """
    The Livebook widget of a stats session (`Kino.Trace.stats/2`): a sortable table of
    calls, time and memory per function, refreshed about once a second, with bars for
    each function's share of the time and a per-process drill-down. A session started
    with `latency: true` adds p50, p99 and max wall-time columns, a small histogram per
    function and its whole distribution in the drill-down.

    A `%Kino.Trace.Stats{}` renders as this widget when it is a cell's result:

        Kino.Trace.stats(["MyApp.Repo", "Jason.encode!/1"])

    To place it yourself, or with options, use `new/2`:

        stats = Kino.Trace.stats([MyApp.Repo])
        Kino.Trace.StatsWidget.new(stats, interval: 500)

    Closing the widget or re-evaluating its cell ends the session.

    Its behaviour lives in a plain module that is tested without Kino; this module
    adapts it to `Kino.JS.Live`. Its table is the same JavaScript renderer as the stats
    tab of `Kino.Trace.Widget`.
    """

    use KinoTrace.Widget.Live,
      assets_path: "lib/assets/stats/build",
      controller: KinoTrace.Widget.StatsController

    @doc """
    Builds the widget for a stats session.

    Options:

      * `:interval` - ms between reads of the counters (default 1 000)
      * `:rows` - the most functions sent (default 500)
      * `:processes` - the most processes per function in the drill-down (default 20)
      * `:lifeline` - stop the session when the calling process exits (default `true`)
    """
    @spec new(Kino.Trace.Stats.t(), keyword()) :: Kino.JS.Live.t()
    def new(%Kino.Trace.Stats{} = stats, opts \\ []) do
      Kino.JS.Live.new(__MODULE__, {stats, opts})
    end
  end

  defimpl Kino.Render, for: Kino.Trace.Stats do
    def to_livebook(stats) do
      stats
      |> Kino.Trace.StatsWidget.new()
      |> Kino.Render.to_livebook()
    end
  end
end
