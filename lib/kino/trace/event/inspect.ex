# An event inspects as the line Kino.Trace.Printer would print for it. It has its own file,
# not event.ex, because it renders through KinoTrace.Render, which itself reads events:
# kept beside the struct, the two files would depend on each other.
defimpl Inspect, for: Kino.Trace.Event do
  alias KinoTrace.Render

  @labelled [:call, :return, :exception, :return_to]

  def inspect(%Kino.Trace.Event{kind: kind} = event, opts) do
    if kind in Kino.Trace.Event.kinds() do
      line(event, opts)
    else
      # Not an event (say, an empty %Kino.Trace.Event{}): its fields say more.
      Inspect.Any.inspect(event, opts)
    end
  end

  defp line(event, opts) do
    terms = [limit: opts.limit, printable_limit: opts.printable_limit, base: opts.base]
    label = if event.kind in @labelled, do: [Atom.to_string(event.kind), " "], else: []

    IO.iodata_to_binary([
      "#Kino.Trace.Event<",
      label,
      Render.format_body(event, inspect: terms),
      " ",
      Render.format_process(event),
      ">"
    ])
  rescue
    # Fields the tracer would not make (say, arguments that are not a list).
    _ -> Inspect.Any.inspect(event, opts)
  end
end
