defmodule KinoTrace.Render.Source do
  @moduledoc false
  # What the functions that read a trace's events take as their source
  # (`Kino.Trace.Mermaid`, `Kino.Trace.latency/2`, `Kino.Trace.flame/2`): a running
  # trace (its last `last` events, `Kino.Trace.events/2`), a capture, or a list of
  # events, checked once here.

  alias Kino.Trace.{Capture, Event}
  alias KinoTrace.Client

  @kinds Event.kinds()

  @typedoc "A trace, a capture or a list of events."
  @type t :: Kino.Trace.t() | Capture.t() | [Event.t()]

  @doc """
  The events of `source`, oldest first; raises `ArgumentError` for anything else.

      iex> KinoTrace.Render.Source.events!([], 10)
      []
      iex> KinoTrace.Render.Source.events!([:call], 10)
      ** (ArgumentError) expected a list of Kino.Trace.Event structs, got at position 0: :call
  """
  @spec events!(t() | term(), pos_integer()) :: [Event.t()]
  def events!(%Capture{events: events}, last), do: events!(events, last)
  # a trace (KinoTrace.Client takes it by its fields)
  def events!(%{session: pid} = trace, last) when is_pid(pid), do: Client.events(trace, last)

  def events!(events, _last) when is_list(events) do
    events
    |> Enum.with_index()
    |> Enum.each(fn
      {%Event{kind: kind}, _} when kind in @kinds ->
        :ok

      {other, index} ->
        raise ArgumentError,
              "expected a list of Kino.Trace.Event structs, got at position #{index}: " <>
                inspect(other, limit: 5, printable_limit: 80)
    end)

    events
  end

  def events!(other, _last) do
    raise ArgumentError,
          "expected a Kino.Trace, a Kino.Trace.Capture or a list of Kino.Trace.Event structs, got: " <>
            inspect(other, limit: 5, printable_limit: 80)
  end
end
