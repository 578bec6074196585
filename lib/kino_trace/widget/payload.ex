defmodule KinoTrace.Widget.Payload do
  @moduledoc false
  # Turns trace events into the JSON-able maps the Livebook widget shows.
  #
  # Terms are rendered here, on the Elixir side, as Elixir code with `inspect/2` limits,
  # so the browser only handles short strings. A rendered row says whether anything was
  # left out (`truncated: true`): either the native tracer cut the term (the cut parts are
  # `Kino.Trace.Cut` and show as `...`), a collection was longer than the `inspect` limits,
  # or the text was longer than the row allows. The full term is then available with
  # `full/1`, which the widget sends when the user expands a row.
  #
  # Nothing here needs Kino: the widget, its tests and the browser test all build their
  # payloads with these functions.

  alias Kino.Trace.{Cut, Event}
  alias KinoTrace.Render
  alias KinoTrace.Base.MFA
  alias KinoTrace.Render.Pairs

  @default_limits Render.term_limits()

  @typedoc """
  Rendering limits, as options:

    * `:limit` - items shown per collection (`inspect/2`'s `:limit`), default 20
    * `:printable_limit` - characters shown per string, default 120
    * `:max_chars` - characters kept of each rendered term, default 400
  """
  @type limits :: keyword()

  @typedoc "One event as the widget shows it (string keys once JSON-encoded)."
  @type row :: %{
          id: pos_integer() | nil,
          kind: String.t(),
          time: integer() | nil,
          node: String.t() | nil,
          pid: String.t() | nil,
          name: String.t() | nil,
          mfa: String.t() | nil,
          mfa_label: String.t() | nil,
          call: String.t() | nil,
          result: String.t() | nil,
          exception: String.t() | nil,
          data: String.t() | nil,
          peer: String.t() | nil,
          peer_name: String.t() | nil,
          remote: boolean(),
          caller: String.t() | nil,
          duration: non_neg_integer() | nil,
          depth: non_neg_integer(),
          call_id: pos_integer() | nil,
          truncated: boolean(),
          lost: boolean(),
          pair: pos_integer() | nil,
          spawn_mfa: String.t() | nil
        }

  @doc """
  Renders one event as a row. See the module docs for the limits.

  Every kind renders: calls fill `:call`, returns `:result`, exceptions `:exception`;
  message and process events fill `:data` (the message, the exit reason, the spawned
  function, the registered name...) and `:peer` (the receiver of a send, the spawned or
  linked process) with `:peer_name`, its registered name when it is a live local
  process; a spawn's function reads as `Mod.fun/arity` in `:spawn_mfa`. `:remote` says the event comes from another node than the widget's.

      iex> event = %Kino.Trace.Event{id: 9, kind: :send, node: node(), pid: :c.pid(0, 250, 0),
      ...>   data: {:ping, 1}, peer: :c.pid(0, 251, 0)}
      iex> row = KinoTrace.Widget.Payload.event(event)
      iex> {row.kind, row.data, row.peer, row.call, row.remote}
      {"send", "{:ping, 1}", "#PID<0.251.0>", nil, false}

  ## Examples

      iex> event = %Kino.Trace.Event{
      ...>   id: 7, kind: :call, node: :nonode@nohost, pid: :c.pid(0, 250, 0), name: :cache,
      ...>   module: Enum, function: :map, arity: 2, args: [[1, 2, 3], :f],
      ...>   time: 1_700_000_000_000_000, depth: 1
      ...> }
      iex> row = KinoTrace.Widget.Payload.event(event)
      iex> {row.kind, row.call, row.mfa, row.pid, row.name, row.truncated}
      {"call", "Enum.map([1, 2, 3], :f)", "Enum.map/2", "#PID<0.250.0>", ":cache", false}

      iex> event = %Kino.Trace.Event{id: 8, kind: :return, module: Enum, function: :map,
      ...>   arity: 2, return: Enum.to_list(1..100), call_id: 7, duration: 38_000}
      iex> row = KinoTrace.Widget.Payload.event(event, limit: 3)
      iex> {row.result, row.duration, row.call_id, row.truncated}
      {"[1, 2, 3, ...]", 38000, 7, true}
  """
  @spec event(Event.t(), limits()) :: row()
  def event(%Event{} = event, limits \\ []) do
    limits = Keyword.merge(@default_limits, limits)
    {call, call_cut?} = Render.row_call(event, limits)
    {result, result_cut?} = render_optional(event.kind == :return, event.return, limits)
    {exception, exception_cut?} = Render.row_exception(event, limits)
    {data, data_cut?} = render_data(event, limits)

    %{
      id: event.id,
      kind: Atom.to_string(event.kind),
      time: event.time,
      node: event.node && KinoTrace.Base.Name.text(event.node),
      pid: event.pid && inspect(event.pid),
      name: event.name && Render.process_name(event.name),
      mfa: mfa(event.module, event.function, event.arity),
      mfa_label: mfa_label(event.module, event.function, event.arity),
      call: call,
      result: result,
      exception: exception,
      data: data,
      peer: event.peer && inspect(event.peer),
      peer_name: peer_name(event.peer),
      remote: event.node != nil and event.node != node(),
      caller: caller(event.caller),
      duration: event.duration,
      depth: event.depth || 0,
      call_id: event.call_id,
      truncated: call_cut? or result_cut? or exception_cut? or data_cut?,
      lost: event.lost == true,
      pair: nil,
      spawn_mfa: Render.row_spawn(event)
    }
  end

  @doc """
  Renders a batch of events, in order.

      iex> events = [%Kino.Trace.Event{id: 1, kind: :call, module: :ets, function: :new,
      ...>   arity: 2, args: [:t, [:set]]}]
      iex> [row] = KinoTrace.Widget.Payload.events(events)
      iex> row.call
      ":ets.new(:t, [:set])"
  """
  @spec events([Event.t()], limits()) :: [row()]
  def events(events, limits \\ []), do: Enum.map(events, &event(&1, limits))

  @doc """
  Renders a batch of a trace's events, in order, as `events/2` does, each row's `:pair`
  the id of the earlier event it is the other side of: the send of a message received,
  the receive of one sent (it may come first), a spawn and the child's `:spawned`, a
  link and the other process's `:getting_linked`. The rule is the one
  `Kino.Trace.Mermaid` draws a pair by, once; the sequence tab draws the pairs it is
  given. `pairs` is the pairing state the last batch returned (none for the first).

      iex> [a, b] = [:c.pid(0, 250, 0), :c.pid(0, 251, 0)]
      iex> events = [%Kino.Trace.Event{id: 1, kind: :send, pid: a, peer: b, data: :ping},
      ...>   %Kino.Trace.Event{id: 2, kind: :receive, pid: b, data: :ping}]
      iex> {rows, _pairs} = KinoTrace.Widget.Payload.paired(events)
      iex> Enum.map(rows, & &1.pair)
      [nil, 1]
  """
  @spec paired([Event.t()], limits(), Pairs.t()) :: {[row()], Pairs.t()}
  def paired(events, limits \\ [], pairs \\ Pairs.new()) do
    {partners, pairs} = Pairs.pair(pairs, Enum.map(events, &{&1.id, &1}))
    rows = Enum.zip_with(events, partners, &%{event(&1, limits) | pair: &2})
    {rows, pairs}
  end

  @doc """
  The widget's "Copy as Mermaid" reply: the `sequenceDiagram` source of `events` (see
  `Kino.Trace.Mermaid`, with its default cap) and how many events it was made from.

      iex> events = [%Kino.Trace.Event{id: 1, kind: :exit, pid: :c.pid(0, 250, 0), data: :normal}]
      iex> reply = KinoTrace.Widget.Payload.mermaid(events)
      iex> {reply.events, String.split(reply.source, "\\n")}
      {1, ["sequenceDiagram", "  participant P1 as #35;PID#60;0.250.0>", "  Note over P1: exit :normal", ""]}
  """
  @spec mermaid([Event.t()]) :: %{source: String.t(), events: non_neg_integer()}
  def mermaid(events) when is_list(events) do
    %{source: Kino.Trace.Mermaid.diagram(events), events: length(events)}
  end

  @doc """
  Renders the whole of an event's terms, pretty-printed, for an expanded row.

  Returns a map with `:id`, `:kind` and, where the event has them, `:args` (one string
  per argument), `:result`, `:exception` (what the row says: the banner
  `KinoTrace.Render.banner/3` writes, `** (FunctionClauseError) ...`) with
  `:exception_raw` (the raw class and reason, `{:error, :function_clause}`), `:data`
  (the raw message, an exit reason...) and `:peer`. Each rendered term is kept up to
  `:max_chars` characters (default 200 000); `:cut` says whether the native tracer had
  cut anything (such parts show as `...`).

      iex> event = %Kino.Trace.Event{id: 3, kind: :call, module: Map, function: :put,
      ...>   arity: 3, args: [%{}, :a, Enum.to_list(1..30)]}
      iex> full = KinoTrace.Widget.Payload.full(event)
      iex> {full.id, length(full.args), full.cut, String.contains?(Enum.at(full.args, 2), "30]")}
      {3, 3, false, true}
  """
  @spec full(Event.t(), keyword()) :: map()
  def full(%Event{} = event, opts \\ []) do
    max_chars = Keyword.get(opts, :max_chars, 200_000)
    render = &Render.pretty(&1, max_chars)

    %{
      id: event.id,
      kind: Atom.to_string(event.kind),
      mfa: mfa(event.module, event.function, event.arity)
    }
    |> put_if(event.peer != nil, :peer, fn -> inspect(event.peer) end)
    |> put_if(event.kind == :call and is_list(event.args), :args, fn ->
      Enum.map(event.args, render)
    end)
    |> put_if(event.kind == :return, :result, fn -> render.(event.return) end)
    |> put_if(event.kind == :exception and event.exception != nil, :exception, fn ->
      {class, reason} = event.exception
      {banner, _} = Render.cap(Render.banner(class, reason), max_chars)
      banner
    end)
    |> put_if(event.kind == :exception and event.exception != nil, :exception_raw, fn ->
      render.(event.exception)
    end)
    |> put_if(event.data != nil, :data, fn -> render.(event.data) end)
    |> Map.put(:cut, contains_cut?([event.args, event.return, event.exception, event.data]))
  end

  @doc """
  The counters the widget's header shows, from `Kino.Trace.info/1` and the widget's own
  count of events it dropped (`:display`, when the browser could not keep up).

      iex> info = %{status: :running, accepted: 12, delivered: 10, queued: 2,
      ...>   dropped: %{rate: 1, queue_full: 0, max_events: 0, closed: 0}, rate: 4.5, limit: nil}
      iex> KinoTrace.Widget.Payload.counters(info, 3)
      %{status: "running", events: 10, accepted: 12, queued: 2, rate: 4.5, limit: nil,
        stack_guarded: 0, fallback: [],
        dropped: %{"rate" => 1, "queue_full" => 0, "max_events" => 0, "closed" => 0, "display" => 3}}

  `:stack_guarded` counts the processes whose returns are no longer traced because
  their stack kept growing (`KinoTrace.Session.StackGuard`). `:fallback` lists the nodes traced
  by the pure-Erlang tracer, and why (`tracer: {:fallback, why}` in `info/1`, of the
  trace or of each of its nodes):

      iex> info = %{tracer: {:fallback, "the native tracer was not built"}}
      iex> KinoTrace.Widget.Payload.counters(info).fallback
      [%{node: "nonode@nohost", why: "the native tracer was not built"}]
  """
  @spec counters(map(), non_neg_integer()) :: map()
  def counters(info, display_dropped \\ 0) do
    dropped =
      info
      |> Map.get(:dropped, %{})
      |> Map.new(fn {reason, n} -> {to_string(reason), n} end)
      |> Map.put("display", display_dropped)

    %{
      status: info |> Map.get(:status, :running) |> to_string(),
      events: Map.get(info, :delivered, 0),
      accepted: Map.get(info, :accepted, 0),
      queued: Map.get(info, :queued, 0),
      rate: Map.get(info, :rate, 0.0),
      limit: Map.get(info, :limit),
      stack_guarded: Map.get(info, :stack_guarded, 0),
      fallback: fallback(info),
      dropped: dropped
    }
  end

  # This node's trace, or each node's of a multi-node one.
  defp fallback(%{nodes: nodes}) when is_map(nodes) do
    for {node, %{tracer: {:fallback, why}}} <- Enum.sort(nodes),
        do: %{node: to_string(node), why: why}
  end

  defp fallback(%{tracer: {:fallback, why}}), do: [%{node: to_string(node()), why: why}]
  defp fallback(_info), do: []

  @doc """
  The reply to a pattern edit, from `Kino.Trace.set_patterns/2`'s per-entry results.

  Each line gets `ok: true` (with a `warning` when the server had one, such as an
  inlined function), or `ok: false` and the server's `error` message, so the widget can
  mark bad lines inline while the good ones apply.

      iex> KinoTrace.Widget.Payload.pattern_results(
      ...>   [{"Enum.map/2", :ok}, {"Enum.mpa/2", {:error, "did you mean Enum.map/2?"}}],
      ...>   ["Enum.map/2"]
      ...> )
      %{patterns: ["Enum.map/2"],
        results: [%{input: "Enum.map/2", ok: true, error: nil, warning: nil},
                  %{input: "Enum.mpa/2", ok: false, error: "did you mean Enum.map/2?", warning: nil}]}
  """
  @spec pattern_results([{term(), :ok | {:error, String.t()}}], [String.t()]) :: map()
  def pattern_results(results, patterns) when is_list(results) do
    %{
      patterns: patterns,
      results:
        Enum.map(results, fn
          {input, :ok} -> result(input, true, nil, nil)
          {input, {:ok, []}} -> result(input, true, nil, nil)
          {input, {:ok, warnings}} -> result(input, true, nil, Enum.join(warnings, "\n"))
          {input, {:error, message}} -> result(input, false, message, nil)
        end)
    }
  end

  @doc """
  The reply to a pattern edit refused as a whole (nothing was applied): the
  current patterns and the reason.

      iex> KinoTrace.Widget.Payload.pattern_error("not applied: too many patterns", ["Enum.map/2"])
      %{patterns: ["Enum.map/2"], results: [], error: "not applied: too many patterns"}
  """
  @spec pattern_error(String.t(), [String.t()]) :: map()
  def pattern_error(message, patterns) when is_binary(message) do
    %{patterns: patterns, results: [], error: message}
  end

  @doc """
  The answer to a browser's `"complete"` request, `%{"text" => text, "seq" => seq}`:
  the completions of `text` (the line being typed, up to the cursor; see
  `KinoTrace.Complete.complete/2`) with the request's `seq`, a number the browser
  uses to drop answers to requests it has sent again since. A request without text
  has no completions. With `nodes`, the modules of each of those nodes are offered (the
  smart cell's trace of other nodes), each item once.

      iex> reply = KinoTrace.Widget.Payload.completions(%{"text" => ":ets.insert_n", "seq" => 7})
      iex> {reply.seq, reply.prefix, Enum.map(reply.items, & &1.insert)}
      {7, "insert_n", ["insert_new/2"]}
      iex> KinoTrace.Widget.Payload.completions(%{"text" => 42})
      %{seq: nil, prefix: "", items: []}
  """
  @spec completions(term(), [node()]) :: map()
  def completions(request, nodes \\ [node()]) do
    seq =
      case request do
        %{"seq" => seq} when is_integer(seq) -> seq
        _ -> nil
      end

    completions =
      case request do
        %{"text" => text} when is_binary(text) -> complete(text, nodes)
        _ -> %{prefix: "", items: []}
      end

    Map.put(completions, :seq, seq)
  end

  defp complete(text, [node]), do: KinoTrace.Complete.complete(text, node: node)

  defp complete(text, nodes) do
    [first | _] = all = Enum.map(nodes, &KinoTrace.Complete.complete(text, node: &1))

    %{
      first
      | items: all |> Enum.flat_map(& &1.items) |> Enum.uniq_by(& &1.insert) |> Enum.take(100)
    }
  end

  defp result(input, ok?, error, warning) do
    %{input: pattern_text(input), ok: ok?, error: error, warning: warning}
  end

  @doc """
  Renders a term in one line within the limits; returns `{text, truncated?}`.

      iex> KinoTrace.Widget.Payload.render_term({:ok, "hello"})
      {~S({:ok, "hello"}), false}
      iex> KinoTrace.Widget.Payload.render_term(Enum.to_list(1..5), limit: 2)
      {"[1, 2, ...]", true}
      iex> KinoTrace.Widget.Payload.render_term([1, %Kino.Trace.Cut{kind: :items}])
      {"[1, ...]", true}
  """
  @spec render_term(term(), limits()) :: {String.t(), boolean()}
  defdelegate render_term(term, limits \\ []), to: Render, as: :term

  ## Rendering helpers

  defp render_optional(true, term, limits), do: render_term(term, limits)
  defp render_optional(false, _term, _limits), do: {nil, false}

  # A message reads by what it carries (Render.message/2: `call :bump`, `reply 0`); the
  # raw message is in full/1's `:data`.
  defp render_data(%Event{data: nil}, _limits), do: {nil, false}

  defp render_data(%Event{kind: kind, data: data}, limits)
       when kind in [:send, :send_to_non_existing, :receive],
       do: Render.message(data, limits)

  defp render_data(%Event{data: data}, limits), do: render_term(data, limits)

  # Whether the term holds a Kino.Trace.Cut anywhere (the native tracer left part out).
  defp contains_cut?(%Cut{}), do: true
  defp contains_cut?([head | tail]), do: contains_cut?(head) or contains_cut?(tail)
  defp contains_cut?(tuple) when is_tuple(tuple), do: contains_cut?(Tuple.to_list(tuple))
  defp contains_cut?(%_{} = struct), do: struct |> Map.from_struct() |> contains_cut?()
  defp contains_cut?(map) when is_map(map), do: Enum.any?(map, &contains_cut?/1)
  defp contains_cut?(_term), do: false

  defp mfa(nil, _f, _a), do: nil
  defp mfa(module, function, arity), do: MFA.to_string({module, function, arity})

  # How the function reads (MFA.label/1), sent only when it differs from `mfa`: a
  # function the compiler made reads as `anonymous fn/2 in Enum.sum/1`.
  defp mfa_label(nil, _f, _a), do: nil

  defp mfa_label(module, function, arity) do
    if MFA.compiler_made?(function), do: MFA.label({module, function, arity})
  end

  # The registered name of a live local process (the trace only names the traced one).
  defp peer_name(pid) when is_pid(pid) and node(pid) == node() do
    case Process.info(pid, :registered_name) do
      {:registered_name, name} when is_atom(name) and name != [] -> Render.process_name(name)
      _ -> nil
    end
  end

  defp peer_name(_peer), do: nil

  defp caller(nil), do: nil
  defp caller(caller), do: Render.format_caller(caller)

  defp pattern_text(input) when is_binary(input), do: input
  defp pattern_text(input), do: inspect(input)

  defp put_if(map, true, key, fun), do: Map.put(map, key, fun.())
  defp put_if(map, _false, _key, _fun), do: map
end
