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

  alias KinoTrace.Render.Sequence

  @typedoc "What a diagram is drawn from."
  @type source :: Kino.Trace.t() | Kino.Trace.Capture.t() | [Kino.Trace.Event.t()]

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
    opts = KinoTrace.Options.validate!(opts, options())
    source |> KinoTrace.Render.Source.events!(opts[:last]) |> Sequence.draw(opts)
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
  defdelegate escape(text), to: Sequence

  ## Input

  # The options, with their defaults and checks (KinoTrace.Options).
  defp options do
    [
      max_messages: {200, KinoTrace.Options.pos_integer()},
      calls: {true, KinoTrace.Options.boolean()},
      args: {false, KinoTrace.Options.boolean()},
      max_label: {80, {"an integer of at least 8", &(is_integer(&1) and &1 >= 8)}},
      last: {10_000, KinoTrace.Options.pos_integer()}
    ]
  end
end
