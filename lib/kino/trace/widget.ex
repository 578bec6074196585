if Code.ensure_loaded?(Kino.JS.Live) do
  defmodule Kino.Trace.Widget do
    @moduledoc """
    The Livebook widget of a trace: live log, per-function stats and call trees, with a
    pattern editor and pause/resume, clear, stop and export controls.

    A `%Kino.Trace{}` renders as this widget when it is a cell's result, so usually
    there is nothing to call:

        Kino.Trace.calls(["MyApp.Repo.get/2", "Enum"])

    To place it yourself (in a layout, or with options), use `new/2`. Here a browser
    that connects gets the last 1 000 events (a call and its return are two events and
    one row of the log):

        trace = Kino.Trace.calls([MyApp.Cache])
        Kino.Layout.tabs(Trace: Kino.Trace.Widget.new(trace, history: 1_000))

    Closing the widget or re-evaluating its cell ends the trace.

    This module is a thin adapter over `KinoTrace.Widget.Controller`, which holds the
    widget's behaviour (and has the options) so it can be tested without Kino.
    """

    use KinoTrace.Widget.Live,
      assets_path: "lib/assets/trace/build",
      controller: KinoTrace.Widget.Controller

    @doc """
    Builds the widget for a running trace. See `KinoTrace.Widget.Controller.init/2`
    for the options.
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
