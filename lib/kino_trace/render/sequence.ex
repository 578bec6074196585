defmodule KinoTrace.Render.Sequence do
  @moduledoc false
  # Writes the `sequenceDiagram` of a list of checked events with checked options
  # (Kino.Trace.Mermaid documents what is drawn): one participant per process, one
  # statement per event, the second side of a pair left out (KinoTrace.Render.Pairs), labels
  # rendered by KinoTrace.Render and escaped, within the caps and Mermaid's size limit.

  alias Kino.Trace.Event
  alias KinoTrace.Render
  alias KinoTrace.Base.MFA
  alias KinoTrace.Render.Pairs
  alias KinoTrace.Tracer.Aliases

  # Characters kept of a label when the options do not say.
  @max_label 80

  # Mermaid renders nothing longer than 50 000 characters (its default maxTextSize);
  # bytes are at least as many as its characters, so a diagram of at most this many
  # bytes (the final note included) always renders.
  @max_bytes 49_000
  @note_room 200

  # The characters Mermaid reads as syntax or markup in a label: `;` ends a statement,
  # `#...;` is an entity, `<` opens HTML such as `<br>` (a `>` alone is text, kept so
  # `->` reads as written), `&` an HTML entity; and `%%` starts a comment or a directive
  # (a single `%`, as in `%{}`, is kept).
  @special ~c"#;<&"

  @spec draw([Event.t()], keyword()) :: String.t()
  def draw(events, opts) do
    {events, _aliases} = Aliases.resolve(Aliases.new(), events)
    skip = Pairs.b_sides(events)
    names = names(events)

    state = %{
      opts: opts,
      names: names,
      participants: %{},
      labels: MapSet.new(),
      declarations: [],
      lines: [],
      bytes: byte_size("sequenceDiagram\n") + @note_room,
      drawn: 0,
      left_out: 0,
      full: nil,
      open: %{}
    }

    state =
      events
      |> Enum.with_index()
      |> Enum.reduce(state, fn {event, index}, state ->
        cond do
          event.kind == :return_to or MapSet.member?(skip, index) -> state
          state.full -> %{state | left_out: state.left_out + 1}
          true -> add(state, event)
        end
      end)

    IO.iodata_to_binary([
      "sequenceDiagram\n",
      Enum.reverse(state.declarations),
      Enum.reverse(state.lines),
      left_out_note(state)
    ])
  end

  # Adds one event's statements, unless the cap is reached or they would not fit.
  defp add(%{drawn: drawn, opts: opts} = state, event) do
    if drawn >= opts[:max_messages] do
      %{state | full: :max_messages, left_out: state.left_out + 1}
    else
      {pids, statements_fun} = statements(event, state)
      {ids, with_participants} = Enum.map_reduce(pids, state, &participant/2)
      {lines, open} = statements_fun.(ids)
      bytes = with_participants.bytes + IO.iodata_length(lines)

      if bytes > @max_bytes do
        %{state | full: :size, left_out: state.left_out + 1}
      else
        %{
          with_participants
          | lines: [lines | state.lines],
            bytes: bytes,
            drawn: drawn + 1,
            open: open
        }
      end
    end
  end

  # The participant id of `pid`, declaring it when it is new: P1, P2... in order.
  defp participant(pid, %{participants: participants} = state) do
    case participants do
      %{^pid => id} ->
        {id, state}

      _ ->
        id = "P#{map_size(participants) + 1}"
        label = participant_label(pid, state.names[pid], state.labels, state.opts)
        line = ["  participant ", id, " as ", label, ?\n]

        {id,
         %{
           state
           | participants: Map.put(participants, pid, id),
             labels: MapSet.put(state.labels, label),
             declarations: [line | state.declarations],
             bytes: state.bytes + IO.iodata_length(line)
         }}
    end
  end

  # A registered name (with its node when remote), or the pid; a name that two
  # processes had gets the pid too.
  defp participant_label(pid, name, labels, opts) do
    where = if is_pid(pid) and node(pid) != node(), do: " on #{node(pid)}", else: ""
    text = if name, do: Render.process_name(name) <> where, else: inspect(pid)
    label = label(text, opts)
    if MapSet.member?(labels, label), do: label(text <> " " <> inspect(pid), opts), else: label
  end

  # {the processes an event concerns, fn participant ids -> {statements, open calls}}
  defp statements(%Event{kind: :call} = e, %{opts: opts, open: open}) do
    text = if opts[:args] or e.module == nil, do: body(e), else: MFA.to_string(Event.mfa(e))

    {[e.pid],
     fn [p] ->
       if opts[:calls] do
         {[arrow(p, "->>", p, text, opts), "  activate ", p, ?\n], push_call(open, e)}
       else
         {note([p], text, opts), open}
       end
     end}
  end

  defp statements(%Event{kind: kind} = e, %{opts: opts, open: open})
       when kind in [:return, :exception] do
    text = body(e)

    {[e.pid],
     fn [p] ->
       if opts[:calls] do
         arrow = if kind == :exception, do: "--x", else: "-->>"

         case pop_call(open, e) do
           {:ok, open} -> {[arrow(p, arrow, p, text, opts), "  deactivate ", p, ?\n], open}
           :error -> {arrow(p, arrow, p, text, opts), open}
         end
       else
         {note([p], text, opts), open}
       end
     end}
  end

  defp statements(%Event{kind: :send} = e, %{opts: opts, open: open}) do
    {[e.pid, e.peer || e.pid], fn [p, q] -> {arrow(p, "->>", q, message(e.data), opts), open} end}
  end

  defp statements(%Event{kind: :send_to_non_existing} = e, %{opts: opts, open: open}) do
    text = message(e.data) <> " (no such process)"
    {[e.pid, e.peer || e.pid], fn [p, q] -> {arrow(p, "-x", q, text, opts), open} end}
  end

  # (its send not traced)
  defp statements(%Event{kind: :receive} = e, %{opts: opts, open: open}) do
    text = "receive " <> message(e.data)
    {[e.pid], fn ids -> {note(ids, text, opts), open} end}
  end

  defp statements(%Event{kind: kind} = e, %{opts: opts, open: open})
       when kind in [:spawn, :spawned, :link, :unlink, :getting_linked, :getting_unlinked] do
    pids = Enum.uniq([e.pid, e.peer || e.pid])
    text = body(e)
    {pids, fn ids -> {note(ids, text, opts), open} end}
  end

  # :exit, :register, :unregister
  defp statements(%Event{} = e, %{opts: opts, open: open}) do
    text = body(e)
    {[e.pid], fn ids -> {note(ids, text, opts), open} end}
  end

  defp arrow(from, arrow, to, text, opts),
    do: ["  ", from, arrow, to, ": ", label(text, opts), ?\n]

  defp note([p], text, opts), do: ["  Note over ", p, ": ", label(text, opts), ?\n]
  defp note([p, q], text, opts), do: ["  Note over ", p, ",", q, ": ", label(text, opts), ?\n]

  # What the event says, as the console prints it; an event the tracer would not make
  # (say, arguments that are not a list) shows its fields instead.
  defp body(event) do
    Render.format_body(event)
  rescue
    _ -> inspect(event, structs: false, limit: 10, printable_limit: 80)
  end

  # A message as it reads (OTP's requests and replies by what they carry: Render.message/2)
  defp message(term), do: term |> Render.message() |> elem(0)

  # Open calls per process: a stack of {call id, mfa}. A return closes the call its
  # :call_id names, or (events without ids) the innermost open call of its function; a
  # return whose call is not open (it came before the events drawn) closes nothing, so
  # no lifeline is deactivated more often than activated.
  defp push_call(open, e),
    do: Map.update(open, e.pid, [{e.id, Event.mfa(e)}], &[{e.id, Event.mfa(e)} | &1])

  defp pop_call(open, e) do
    stack = Map.get(open, e.pid, [])

    index =
      if e.call_id,
        do: Enum.find_index(stack, fn {id, _} -> id == e.call_id end),
        else: Enum.find_index(stack, fn {_, mfa} -> mfa == Event.mfa(e) end)

    case index do
      nil -> :error
      index -> {:ok, Map.put(open, e.pid, List.delete_at(stack, index))}
    end
  end

  defp left_out_note(%{left_out: 0}), do: []

  defp left_out_note(%{left_out: n, full: why, participants: participants, opts: opts}) do
    events = if n == 1, do: "1 more event", else: "#{n} more events"

    reason =
      case why do
        :max_messages -> "max_messages: #{opts[:max_messages]}"
        :size -> "Mermaid's size limit"
      end

    text = "#{events} left out (#{reason})"

    case map_size(participants) do
      0 -> ["  %% ", escape(text), ?\n]
      1 -> note(["P1"], text, [])
      n -> note(["P1", "P#{n}"], text, [])
    end
  end

  # One label: control characters out, cut to :max_label characters, escaped.
  defp label(text, opts) do
    max = Keyword.get(opts, :max_label, @max_label)
    text = IO.iodata_to_binary(text) |> String.replace_invalid()

    text =
      if String.length(text) > max, do: String.slice(text, 0, max - 1) <> "…", else: text

    escape(text)
  end

  # The names the events give their processes: the traced process's :name, or the name
  # it registered.
  defp names(events) do
    Enum.reduce(events, %{}, fn
      %Event{pid: pid, name: name}, acc when not is_nil(name) ->
        Map.put_new(acc, pid, name)

      %Event{kind: :register, pid: pid, data: name}, acc when is_atom(name) ->
        Map.put_new(acc, pid, name)

      _, acc ->
        acc
    end)
  end

  # Syntax and markup characters as `#code;` entities, line breaks and other control
  # characters as spaces (Kino.Trace.Mermaid.escape/1 documents it).
  @spec escape(String.t()) :: String.t()
  def escape(text) when is_binary(text) do
    escaped =
      for <<char::utf8 <- String.replace_invalid(text)>>, into: "" do
        cond do
          char in @special -> "#" <> Integer.to_string(char) <> ";"
          control?(char) -> " "
          true -> <<char::utf8>>
        end
      end

    String.replace(escaped, ~r/%%+/, &String.duplicate("#37;", byte_size(&1)))
  end

  # C0 and C1 controls, DEL, and the line and paragraph separators.
  defp control?(char), do: char < 0x20 or char in 0x7F..0x9F or char in [0x2028, 0x2029]
end
