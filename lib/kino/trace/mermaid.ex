defmodule Kino.Trace.Mermaid do
  @moduledoc """
  A trace as the source of a [Mermaid](https://mermaid.js.org) `sequenceDiagram`: to
  paste into Markdown, docs or an issue, or to render in Livebook with
  `Kino.Trace.mermaid/2`.

      Kino.Trace.to_mermaid(trace)                  # the last events of a running trace
      Kino.Trace.to_mermaid(capture, calls: false)  # a capture's events, calls as notes

  What it draws:

    * one participant per process, its registered name as its alias when the events
      name it (the traced process's `:name`, or a `:register` event), else its pid;
    * messages as arrows from the sender to the receiver: a `:send` and the `:receive`
      of the same message are one arrow; a message to a process alias (a
      `GenServer.call/3` reply) goes to the process the alias belongs to (known from the
      call's request, or from the process that received it); a receive whose
      send was not traced is a note; a send to a process that did not exist is an arrow
      ending in a cross;
    * calls as a self-arrow labelled `Mod.fun/arity` that activates the process's
      lifeline until the matching return or exception (a dashed self-arrow with the
      value, or ending in a cross), or, with `calls: false`, as notes;
    * spawns, exits, links, unlinks and names as notes over the processes concerned.

  ## Options

    * `:max_messages` - at most this many arrows and notes, one per drawn event
      (default 200); a final note says how many more were left out
    * `:calls` - calls and returns as activations (`true`, the default) or as notes
    * `:args` - label calls with their arguments, `Mod.fun(1, :a)`, instead of
      `Mod.fun/arity` (default `false`)
    * `:max_label` - characters kept of each label (default 80); longer ones end in `…`
    * `:last` - for a running trace, how many of its most recent events to read
      (default 10 000, see `Kino.Trace.events/2`)

  Labels are terms as Elixir code (with `inspect/2` limits, see `Kino.Trace.Printer`),
  escaped so that any term is safe in the diagram: the characters Mermaid reads as
  syntax or markup (`#`, `;`, `<`, `&`, and `%%`) are written as Mermaid's `#code;`
  entities, which it shows as the characters themselves; line breaks and other control
  characters become spaces. A diagram also stays under Mermaid's size limit (50 000
  characters): events that would go past it are left out and counted in the final note.

  ## Examples

      iex> ping = :c.pid(0, 210, 0)
      iex> cache = :c.pid(0, 211, 0)
      iex> events = [
      ...>   %Kino.Trace.Event{id: 1, kind: :send, pid: ping, data: {:fetch, 42}, peer: cache},
      ...>   %Kino.Trace.Event{id: 2, kind: :receive, pid: cache, name: MyApp.Cache, data: {:fetch, 42}},
      ...>   %Kino.Trace.Event{id: 3, kind: :call, pid: cache, name: MyApp.Cache, module: MyApp.Repo,
      ...>     function: :get, arity: 1, args: [42]},
      ...>   %Kino.Trace.Event{id: 4, kind: :return, pid: cache, name: MyApp.Cache, module: MyApp.Repo,
      ...>     function: :get, arity: 1, return: {:ok, "#1"}, call_id: 3},
      ...>   %Kino.Trace.Event{id: 5, kind: :send, pid: cache, name: MyApp.Cache, data: {:ok, "#1"}, peer: ping},
      ...>   %Kino.Trace.Event{id: 6, kind: :exit, pid: cache, name: MyApp.Cache, data: :normal}
      ...> ]
      iex> events |> Kino.Trace.Mermaid.diagram() |> String.split("\\n")
      [
        "sequenceDiagram",
        "  participant P1 as #35;PID#60;0.210.0>",
        "  participant P2 as MyApp.Cache",
        "  P1->>P2: {:fetch, 42}",
        "  P2->>P2: MyApp.Repo.get/1",
        "  activate P2",
        ~S(  P2-->>P2: -> {:ok, "#35;1"}  MyApp.Repo.get/1),
        "  deactivate P2",
        ~S(  P2->>P1: {:ok, "#35;1"}),
        "  Note over P2: exit :normal",
        ""
      ]

  With `calls: false`, calls are notes; with `:max_messages`, the diagram stops there:

      iex> pid = :c.pid(0, 210, 0)
      iex> events =
      ...>   for id <- 1..3 do
      ...>     %Kino.Trace.Event{id: id, kind: :call, pid: pid, name: :worker, module: Enum,
      ...>       function: :sum, arity: 1, args: [[id]]}
      ...>   end
      iex> events |> Kino.Trace.Mermaid.diagram(calls: false, args: true, max_messages: 2) |> String.split("\\n")
      [
        "sequenceDiagram",
        "  participant P1 as :worker",
        "  Note over P1: Enum.sum([1])",
        "  Note over P1: Enum.sum([2])",
        "  Note over P1: 1 more event left out (max_messages: 2)",
        ""
      ]
  """

  alias Kino.Trace.{Aliases, Capture, Client, DidYouMean, Event, MFA, Render}

  @defaults [max_messages: 200, calls: true, args: false, max_label: 80, last: 10_000]

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

  @kinds Event.kinds()

  @typedoc "What a diagram is drawn from."
  @type source :: Kino.Trace.t() | Capture.t() | [Event.t()]

  @doc """
  The `sequenceDiagram` source of a trace (its last events), a capture, or a list of
  events, oldest first. See the module documentation for what is drawn and the options.
  Raises `ArgumentError` for anything else or a bad option.

      iex> Kino.Trace.Mermaid.diagram([])
      "sequenceDiagram\\n"
      iex> Kino.Trace.Mermaid.diagram([], max_mesages: 10)
      ** (ArgumentError) unknown option :max_mesages (did you mean :max_messages?). Known options: :max_messages, :calls, :args, :max_label, :last
  """
  @spec diagram(source(), keyword()) :: String.t()
  def diagram(source, opts \\ []) do
    opts = options!(opts)
    source |> events!(opts) |> draw(opts)
  end

  @doc """
  Renders the diagram of `source` (see `diagram/2`, whose options it takes) with
  `Kino.Mermaid` in Livebook. Also takes Kino.Mermaid's `:caption` and `:download`
  (Kino 0.14.2 and later).
  Raises when Kino is not loaded (then use `diagram/2` for the source).
  """
  @spec render(source(), keyword()) :: struct()
  def render(source, opts \\ []) do
    {kino_opts, opts} = Keyword.split(opts, [:caption, :download])
    source = diagram(source, opts)
    render_source(source, kino_opts)
  end

  # Kino is optional: Kino.Mermaid is called only when it is there.
  @compile {:no_warn_undefined, Kino.Mermaid}

  defp render_source(source, kino_opts) do
    cond do
      not Code.ensure_loaded?(Kino.Mermaid) ->
        raise RuntimeError,
              "Kino.Trace.mermaid/2 renders with Kino.Mermaid, but Kino is not loaded: add " <>
                "{:kino, \"~> 0.14\"} to your dependencies, or use Kino.Trace.to_mermaid/2 " <>
                "for the diagram's source"

      # Kino.Mermaid.new/2 (:caption, :download) is Kino 0.14.2's; before, new/1 only.
      kino_opts == [] ->
        Kino.Mermaid.new(source)

      true ->
        Kino.Mermaid.new(source, kino_opts)
    end
  end

  @doc """
  Escapes `text` for a Mermaid label: syntax and markup characters as `#code;`
  entities, line breaks and other control characters as spaces.

      iex> Kino.Trace.Mermaid.escape(~S({:"a;b", "<br>", "#1"}))
      ~S({:"a#59;b", "#60;br>", "#35;1"})
      iex> Kino.Trace.Mermaid.escape("%{a: 1} & %%{init: {}}%%\\nnext")
      "%{a: 1} #38; #37;#37;{init: {}}#37;#37; next"
  """
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

  ## Input

  defp options!(opts) do
    unless Keyword.keyword?(opts) do
      raise ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}"
    end

    Enum.each(opts, fn {key, value} ->
      unless Keyword.has_key?(@defaults, key) do
        raise ArgumentError, DidYouMean.unknown_option(key, Keyword.keys(@defaults))
      end

      check!(key, value)
    end)

    Keyword.merge(@defaults, opts)
  end

  defp check!(key, value) when key in [:calls, :args] and is_boolean(value), do: :ok

  defp check!(key, value) when key in [:max_messages, :last] and is_integer(value) and value > 0,
    do: :ok

  defp check!(:max_label, value) when is_integer(value) and value >= 8, do: :ok

  defp check!(key, value) do
    expected =
      case key do
        k when k in [:calls, :args] -> "a boolean"
        :max_label -> "an integer of at least 8"
        _ -> "a positive integer"
      end

    raise ArgumentError,
          "invalid value for #{inspect(key)}: expected #{expected}, got: #{inspect(value)}"
  end

  defp events!(%Capture{events: events}, _opts), do: events!(events, [])
  # a trace (Kino.Trace.Client takes it by its fields)
  defp events!(%{session: pid} = trace, opts) when is_pid(pid), do: Client.events(trace, opts[:last])

  defp events!(events, _opts) when is_list(events) do
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

  defp events!(other, _opts) do
    raise ArgumentError,
          "expected a Kino.Trace, a Kino.Trace.Capture or a list of Kino.Trace.Event structs, got: " <>
            inspect(other, limit: 5, printable_limit: 80)
  end

  ## Drawing

  defp draw(events, opts) do
    {events, _aliases} = Aliases.resolve(Aliases.new(), events)
    skip = pairs(events)
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
    text = if name, do: inspect(name) <> where, else: inspect(pid)
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
    {[e.pid, e.peer || e.pid], fn [p, q] -> {arrow(p, "->>", q, term(e.data), opts), open} end}
  end

  defp statements(%Event{kind: :send_to_non_existing} = e, %{opts: opts, open: open}) do
    text = term(e.data) <> " (no such process)"
    {[e.pid, e.peer || e.pid], fn [p, q] -> {arrow(p, "-x", q, text, opts), open} end}
  end

  defp statements(%Event{kind: kind} = e, %{opts: opts, open: open})
       when kind in [:spawn, :spawned, :link, :unlink, :getting_linked, :getting_unlinked] do
    pids = Enum.uniq([e.pid, e.peer || e.pid])
    text = body(e)
    {pids, fn ids -> {note(ids, text, opts), open} end}
  end

  # :receive (its send not traced), :exit, :register, :unregister
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

  defp term(term), do: term |> Render.term() |> elem(0)

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
    max = Keyword.get(opts, :max_label, @defaults[:max_label])
    text = IO.iodata_to_binary(text) |> String.replace_invalid()

    text =
      if String.length(text) > max, do: String.slice(text, 0, max - 1) <> "…", else: text

    escape(text)
  end

  ## Pairing

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

  # The events that repeat another one's information and are not drawn: the receive of
  # a traced send (the send's arrow shows it), the child's side of a traced spawn, the
  # other side of a link or unlink. Either side may come first (processes, and nodes,
  # are traced by their own clocks): the first side (:a) is drawn, the second (:b) not.
  #
  # A send to a process alias (a reference, as GenServer.call's reply is since OTP 24)
  # has already been sent to the alias's owner when it is known (Kino.Trace.Aliases).
  # Returns the indexes not drawn.
  defp pairs(events) do
    {skip, _waiting} =
      events
      |> Enum.with_index()
      |> Enum.reduce({MapSet.new(), %{}}, fn {event, index}, acc ->
        pair(pair_key(event), index, acc)
      end)

    skip
  end

  defp pair(nil, _index, acc), do: acc

  defp pair({side, key} = pair_key, index, {skip, waiting}) do
    other = if side == :a, do: :b, else: :a

    case take(waiting, {other, key}) do
      {first, waiting} ->
        skipped = if side == :b, do: index, else: first
        {MapSet.put(skip, skipped), waiting}

      nil ->
        {skip, wait(waiting, pair_key, index)}
    end
  end

  defp wait(waiting, key, index),
    do: Map.update(waiting, key, :queue.from_list([index]), &:queue.in(index, &1))

  defp take(waiting, key) do
    case Map.fetch(waiting, key) do
      {:ok, queue} ->
        {{:value, first}, rest} = :queue.out(queue)

        waiting =
          if :queue.is_empty(rest),
            do: Map.delete(waiting, key),
            else: Map.put(waiting, key, rest)

        {first, waiting}

      :error ->
        nil
    end
  end

  defp pair_key(%Event{kind: :send, peer: peer, data: data}) when not is_nil(peer),
    do: {:a, {:message, peer, data}}

  defp pair_key(%Event{kind: :receive, pid: pid, data: data}), do: {:b, {:message, pid, data}}

  defp pair_key(%Event{kind: :spawn, pid: pid, peer: peer}) when not is_nil(peer),
    do: {:a, {:spawn, pid, peer}}

  defp pair_key(%Event{kind: :spawned, pid: pid, peer: peer}) when not is_nil(peer),
    do: {:b, {:spawn, peer, pid}}

  defp pair_key(%Event{kind: kind, pid: pid, peer: peer})
       when kind in [:link, :unlink] and not is_nil(peer),
       do: {:a, {kind, pid, peer}}

  defp pair_key(%Event{kind: :getting_linked, pid: pid, peer: peer}) when not is_nil(peer),
    do: {:b, {:link, peer, pid}}

  defp pair_key(%Event{kind: :getting_unlinked, pid: pid, peer: peer}) when not is_nil(peer),
    do: {:b, {:unlink, peer, pid}}

  defp pair_key(_event), do: nil
end
