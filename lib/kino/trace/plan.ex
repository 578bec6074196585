defmodule Kino.Trace.Plan do
  @moduledoc """
  Everything one trace is, checked and resolved before anything is traced.

  `new!/3` is the one way to build it: `Kino.Trace.calls/2` and the other entry points,
  `Kino.Trace.capture/3` and each node of a multi-node trace call it, and a
  session runs a plan and nothing else. A bad pattern, target or
  option raises `ArgumentError` here, naming it; `check/2` tells the same without
  raising, and `summary/1` what a plan traces.

      iex> plan = Kino.Trace.Plan.new!([calls: ["Enum.sum/1"]], return: false, limit: 10)
      iex> Kino.Trace.Plan.summary(plan)
      %{calls: true, messages: nil, message_pattern: nil, processes: nil}
      iex> Kino.Trace.Plan.check([calls: ["Enum.sum/1"]], limit: 0)
      {:error, "invalid value for :limit: expected a positive integer, got: 0"}

  A plan is opaque: it holds the parsed patterns with the match specs to set, the
  processes traced and their flags, the message specs, the tracer's limits, the nodes it
  traces (each other node's part built and checked on this node, before anything is
  traced anywhere), a recorder's ring and triggers (`Kino.Trace.record/2`), and what was
  asked for with the options validated.
  """

  # What a plan holds (the engine reads these fields; nothing outside kino_trace does):
  #
  #   * `:calls` - the parsed patterns, whose processes (`pids`, resolved) with which
  #     flags, and the match specs to set (covering patterns merged, loops without
  #     returns), or `nil`;
  #   * `:messages` - targets, flags and the send and receive match specs, or `nil`;
  #   * `:processes` - targets and flags, or `nil`;
  #   * `:limits` - what the native tracer enforces, under the options' own names;
  #   * `:nodes` - the nodes it traces (this one alone for a local trace); the parts
  #     above are this node's, and are `nil` when this node is not among them (another
  #     node's part is `node_part!/3`, built here);
  #   * `:parts` - each other node's part, built here by `new!/3` (`part/2`);
  #   * `:record` - a recorder's ring, snapshots and triggers (`Kino.Trace.record/2`),
  #     or `nil`;
  #   * `:what` and `:options` - what was asked for, validated: the user's options with
  #     the defaults, and no internal key.
  #
  # Only `new!/3`, `check/2` and `summary/1` are public; the rest is the engine's
  # (`@doc false`, their examples in test/kino/trace/plan_test.exs).

  alias KinoTrace.Pattern
  alias KinoTrace.Base.Lookup
  alias KinoTrace.Plan.{Functions, MessagePattern, Options}
  alias KinoTrace.Stats.Targets

  @enforce_keys [:what, :options, :nodes, :limits]
  defstruct [
    :what,
    :options,
    :nodes,
    :limits,
    calls: nil,
    messages: nil,
    processes: nil,
    parts: %{},
    record: nil,
    watch_bifs: false
  ]

  # Whose events: `:all`, `:new`, `:existing` or pids (names are resolved).
  @typedoc false
  @type targets :: [pid() | :all | :new | :existing]

  # Calls: `patterns` as parsed; `pids` traced with `flags`; `returns` and `actions`, the
  # action parts of every match spec clause; `functions`, the match specs to set, with
  # `match_flags` (`[:local]` or `[:global]`).
  @typep calls :: %{
           patterns: [Pattern.t()],
           pids: targets(),
           flags: [atom()],
           match_flags: [:local | :global],
           returns: list(),
           actions: list(),
           functions: Functions.t()
         }

  @typep messages :: %{
           targets: targets(),
           flags: [atom()],
           specs: MessagePattern.specs(),
           distributed: boolean()
         }

  @typep processes :: %{targets: targets(), flags: [atom()]}

  # The native tracer's limits (see the "Options and limits" guide).
  @typep limits :: %{atom() => term()}

  @typedoc "A checked plan of one trace (`new!/3`)."
  @opaque t :: %__MODULE__{
            what: keyword(),
            options: keyword(),
            nodes: [node()],
            limits: limits(),
            calls: calls() | nil,
            messages: messages() | nil,
            processes: processes() | nil,
            parts: %{node() => t()},
            record: KinoTrace.Plan.Record.t() | nil,
            watch_bifs: boolean()
          }

  @what [:calls, :messages, :processes]

  @doc """
  Builds the plan of a trace of `what` (`[calls: patterns, messages: targets,
  processes: targets]`, any of them) with `opts`, the options of `Kino.Trace.calls/2`.

  `defaults` are the defaults of the options (those of `Kino.Trace.calls/2`, or a
  capture's). Parses and checks everything; raises `ArgumentError` naming the bad entry.
  Warnings (a pattern that matches nothing yet) are printed with `IO.warn/2`.

      iex> plan = Kino.Trace.Plan.new!([calls: ["Enum.sum/1"]], limit: 10)
      iex> {plan.what, plan.options[:limit]}
      {[calls: ["Enum.sum/1"]], 10}
      iex> Kino.Trace.Plan.new!([calls: ["Enum.sum/1"]], limit: 0)
      ** (ArgumentError) invalid value for :limit: expected a positive integer, got: 0
  """
  @spec new!(keyword(), keyword(), keyword()) :: t()
  def new!(what, opts, defaults \\ Options.defaults()) do
    what = validate_what!(what)
    options = Options.validate!(opts, defaults)
    Options.check_what!(options, Keyword.keys(what))
    nodes = nodes!(options[:nodes])

    plan = %__MODULE__{
      what: what,
      options: options,
      nodes: nodes,
      limits: Options.native_limits(options)
    }

    # Every other node's part is built (checked) before anything is traced anywhere, and
    # kept for its session (part/2).
    parts = for node <- nodes, node != node(), into: %{}, do: {node, node_part!(plan, node)}
    plan = if node() in nodes, do: part!(plan, Lookup.local()), else: plan
    %{plan | parts: parts}
  end

  # A capture must know whether BIF calls went untraced (OTP 27.3's BIF bug, see
  # KinoTrace.Backend.BifWorkaround): its session watches for BIF tracing being switched
  # off and tells it in its info, as `untraced_bifs`.
  @doc false
  @spec watch_bifs(t()) :: t()
  def watch_bifs(%__MODULE__{} = plan), do: %{plan | watch_bifs: true}

  @typedoc "What a trace traces, as `summary/1` tells it."
  @type summary :: %{
          calls: boolean(),
          messages: String.t() | nil,
          message_pattern: String.t() | nil,
          processes: String.t() | nil
        }

  @doc """
  What the plan traces, for the widget to show the editor of what the trace has: whether
  it traces calls, and the targets of its messages and processes (as given, as text),
  and its message pattern.

      iex> plan = Kino.Trace.Plan.new!([messages: :all], pattern: "{:ok, _}")
      iex> Kino.Trace.Plan.summary(plan)
      %{calls: false, messages: ":all", message_pattern: "{:ok, _}", processes: nil}
      iex> Kino.Trace.Plan.summary(Kino.Trace.Plan.new!([calls: ["Enum.sum/1"]], []))
      %{calls: true, messages: nil, message_pattern: nil, processes: nil}
  """
  @spec summary(t()) :: summary()
  def summary(%__MODULE__{what: what, options: options}) do
    targets = fn key -> if Keyword.has_key?(what, key), do: targets_text(what[key]) end

    %{
      calls: Keyword.has_key?(what, :calls),
      messages: targets.(:messages),
      message_pattern: if(Keyword.has_key?(what, :messages), do: options[:pattern]),
      processes: targets.(:processes)
    }
  end

  defp targets_text(targets) when is_list(targets), do: Enum.map_join(targets, ", ", &inspect/1)
  defp targets_text(target), do: inspect(target)

  # The plan as `node`, one of the plan's nodes, runs it: this node's part is the plan
  # itself, another node's the part `new!/3` built (`node_part!/3`), not built again.
  @doc false
  @spec part(t(), node()) :: t()
  def part(%__MODULE__{} = plan, node) when node == node(),
    do: %{plan | nodes: [node], parts: %{}}

  def part(%__MODULE__{parts: parts} = plan, node),
    do: Map.get_lazy(parts, node, fn -> node_part!(%{plan | parts: %{}}, node, warn: false) end)

  # The plan as `node` runs it, built on this node: the same `what`, `options` and
  # `limits`, `nodes: [node]`, and its calls, messages and processes parts resolved
  # against `node`. Patterns are checked against the modules of `node` (loaded there as
  # a trace of them would), names (`pids:`, message and process targets) are looked up
  # there and tail-call cycles read there, with plain OTP calls:
  # `node` needs neither kino_trace nor Elixir, only to be connected.
  #
  # Raises `ArgumentError` as `new!/3` does, naming the node (`on node :"a@host": ...`),
  # with "did you mean" suggestions from that node's modules and functions; also when
  # the node goes away or does not answer meanwhile. For `node()` it is this node's
  # part of `new!/3` (no node named).
  #
  # Options: `:warn` (default `true`) prints the warnings of the patterns with
  # `IO.warn/2`, naming the node.
  @doc false
  @spec node_part!(t(), node(), keyword()) :: t()
  def node_part!(%__MODULE__{} = plan, node, opts \\ []) when is_atom(node) do
    warn? = Keyword.get(opts, :warn, true)
    plan = %{plan | nodes: [node], calls: nil, messages: nil, processes: nil}

    on_node!(node, &part!(plan, &1, warn?))
  end

  # One node's part of a stats session (`Kino.Trace.Stats`): the node, its patterns as
  # parsed, the exact functions they name there (the VM's counters are read one function
  # at a time) and whose calls are counted there.
  @typedoc false
  @type counters_part :: {node(), [Pattern.t()], [mfa()], targets()}

  # The parts of a stats session counting calls of `patterns` with `opts`, its validated
  # options (those of `Kino.Trace.Stats.start/2`): one per node of `opts[:nodes]` (this one when
  # `nil`), every node checked before anything is counted anywhere.
  #
  # A node's part is checked as a trace's (`node_part!/3`, the same code): its patterns
  # against its modules, with warnings and errors naming it; plain patterns only (the
  # counters count every call), expanded to the functions of
  # its loaded code; the names of `:pids` looked up there.
  @doc false
  @spec counters_parts!(term(), keyword()) :: [counters_part()]
  def counters_parts!(patterns, opts) do
    for node <- nodes!(opts[:nodes]), do: on_node!(node, &counters_part!(&1, patterns, opts))
  end

  defp counters_part!(lookup, patterns, opts) do
    {patterns, warnings} =
      Pattern.parse_all!(List.wrap(patterns),
        force: opts[:force],
        local: opts[:local],
        lookup: lookup
      )

    Targets.check_plain!(patterns)
    warn(warnings, lookup, true)
    mfas = Targets.expand(patterns, local: opts[:local], lookup: lookup)
    {lookup.node, patterns, mfas, Options.resolve_pids(opts[:pids], lookup)}
  end

  # Builds a node's part with `build`, given the lookup of `node`: another node's errors
  # name it. (Every part, a trace's or a stats session's, is built through here.)
  defp on_node!(node, build) when node == node(), do: build.(Lookup.local())

  defp on_node!(node, build) do
    build.(Lookup.new(node))
  rescue
    e in ArgumentError ->
      reraise ArgumentError, "on node #{inspect(node)}: #{Exception.message(e)}", __STACKTRACE__
  end

  @doc """
  Checks that `what` can be traced with `opts` (`new!/3`, every node's part included),
  without tracing: `:ok` or `{:error, message}`.

      iex> Kino.Trace.Plan.check([calls: ["Enum.sum/1"]], limit: 5)
      :ok
      iex> {:error, message} = Kino.Trace.Plan.check([calls: ["Enum.nope/1"]], [])
      iex> message =~ "Enum.nope/1"
      true
  """
  @spec check(keyword(), keyword()) :: :ok | {:error, String.t()}
  def check(what, opts) do
    new!(what, opts)
    :ok
  rescue
    e in ArgumentError -> {:error, Exception.message(e)}
  end

  # What one node of a multi-node plan builds its own plan from (`new!/3` there): the same
  # `what` and options, with `nodes` and `print` unset and `overrides` applied (a node's
  # session keeps a small history when its events are collected elsewhere).
  @doc false
  @spec for_node(t(), keyword()) :: {keyword(), keyword()}
  def for_node(%__MODULE__{what: what, options: options}, overrides \\ []) do
    {what, Keyword.merge(options, [nodes: nil, print: false] ++ overrides)}
  end

  # Whether the plan traces other nodes than this one.
  @doc false
  @spec remote?(t()) :: boolean()
  def remote?(%__MODULE__{nodes: nodes}), do: nodes != [node()]

  # The plan with `patterns` (parsed) as its calls: the match specs are built again.
  # A plan without calls gets patterns that no process is traced for, as before.
  @doc false
  @spec put_patterns(t(), [Pattern.t()]) :: t()
  def put_patterns(%__MODULE__{calls: nil} = plan, patterns) do
    put_patterns(%{plan | calls: calls(plan.options, [], [])}, patterns)
  end

  def put_patterns(%__MODULE__{calls: calls, options: options} = plan, patterns) do
    functions =
      Functions.build(patterns, calls.returns, calls.actions,
        force: options[:force],
        local: options[:local],
        lookup: lookup(plan)
      )

    %{plan | calls: %{calls | patterns: patterns, functions: functions}}
  end

  # Whose events the plan traces, with which process flags: `{targets, flags}` for its
  # calls, messages and processes, those it has.
  @doc false
  @spec process_flags(t()) :: [{targets(), [atom()]}]
  def process_flags(%__MODULE__{} = plan) do
    calls = plan.calls && {plan.calls.pids, plan.calls.flags}

    parts =
      for part <- [plan.messages, plan.processes], part != nil, do: {part.targets, part.flags}

    if calls, do: [calls | parts], else: parts
  end

  # The options the pattern parser takes for this plan (for
  # another node's part, `node_part!/3`, they look modules up on that node).
  @doc false
  @spec pattern_opts(t() | keyword()) :: keyword()
  def pattern_opts(%__MODULE__{options: options} = plan),
    do: [lookup: lookup(plan)] ++ pattern_opts(options)

  def pattern_opts(options),
    do: [force: options[:force], local: options[:local], max_bytes: options[:max_bytes]]

  # Where a plan's modules and names are looked up: another node's part on that node.
  defp lookup(%__MODULE__{nodes: [node]}), do: Lookup.new(node)
  defp lookup(%__MODULE__{}), do: Lookup.local()

  # --- building ------------------------------------------------------------------------

  defp validate_what!(what) do
    unless Keyword.keyword?(what) and what != [] and Enum.all?(Keyword.keys(what), &(&1 in @what)) do
      raise ArgumentError,
            "expected what to trace as a keyword list with :calls, :messages and/or :processes, got: " <>
              inspect(what)
    end

    what
  end

  defp nodes!(nil), do: [node()]
  defp nodes!(nodes), do: KinoTrace.Plan.Nodes.resolve!(nodes)

  # The part of the node `lookup` reads: this node's for `new!/3`.
  defp part!(%__MODULE__{what: what, options: options} = plan, lookup, warn? \\ true) do
    calls =
      case Keyword.fetch(what, :calls) do
        {:ok, given} ->
          {patterns, warnings} =
            Pattern.parse_all!(given, [lookup: lookup] ++ pattern_opts(options))

          warn(warnings, lookup, warn?)
          calls(options, patterns, Options.resolve_pids(options[:pids], lookup))

        :error ->
          nil
      end

    plan = %{
      plan
      | messages: messages!(what[:messages], options, lookup),
        processes: processes!(what[:processes], options, lookup)
    }

    if calls, do: put_patterns(%{plan | calls: calls}, calls.patterns), else: plan
  end

  # A pattern's warnings, naming another node.
  defp warn(warnings, lookup, warn?) do
    prefix = if Lookup.local?(lookup), do: "", else: "on node #{inspect(lookup.node)}: "
    if warn?, do: Enum.each(warnings, &IO.warn(prefix <> &1, []))
  end

  defp calls(options, patterns, pids) do
    {returns, actions} = match_spec_body(options)

    %{
      patterns: patterns,
      pids: pids,
      flags:
        [:call, :scheduler_id] ++
          if(options[:return_to], do: [:return_to], else: []) ++ children(options),
      match_flags: if(options[:local], do: [:local], else: [:global]),
      returns: returns,
      actions: actions,
      functions: %Functions{}
    }
  end

  # {return actions, other actions} of every match spec clause.
  defp match_spec_body(options) do
    returns =
      cond do
        options[:exceptions] -> [{:exception_trace}]
        options[:return] -> [{:return_trace}]
        true -> []
      end

    caller =
      case options[:caller] do
        # The caller's frame with the line of the call. (`{:caller_line}` gives the line
        # of the return address, often the line after the call.)
        :line -> [{:message, {:current_stacktrace, 1}}]
        true -> [{:message, {:caller}}]
        _ -> []
      end

    {returns, caller}
  end

  defp messages!(nil, _options, _lookup), do: nil

  defp messages!(targets, options, lookup) do
    {targets, distributed?} =
      case targets do
        :distributed -> {[:all], true}
        other -> {Options.resolve_targets!(other, :messages, lookup), false}
      end

    import_names(options[:pattern], lookup)

    case MessagePattern.compile(options[:pattern], distributed?,
           max_bytes: options[:max_bytes],
           timeouts: options[:timeouts]
         ) do
      {:ok, specs} ->
        %{
          targets: targets,
          flags: [:send, :receive, :scheduler_id] ++ children(options),
          specs: specs,
          distributed: distributed?
        }

      {:error, message} ->
        raise ArgumentError, message
    end
  end

  # A message pattern for another node: its names that are atoms there are atoms here,
  # so it compiles as it would there (messages there may hold atoms this node never
  # made; that node's atom table bounds what this adds).
  defp import_names(text, lookup) when is_binary(text) do
    with false <- Lookup.local?(lookup),
         {:ok, ast} <- KinoTrace.Pattern.Quoted.parse(text),
         [_ | _] = names <- KinoTrace.Pattern.Quoted.names(ast) do
      Lookup.existing_atoms(lookup, Enum.map(names, & &1.text))
    end

    :ok
  end

  defp import_names(_text, _lookup), do: :ok

  defp processes!(nil, _options, _lookup), do: nil

  defp processes!(targets, options, lookup),
    do: %{
      targets: Options.resolve_targets!(targets, :processes, lookup),
      flags: [:procs, :scheduler_id] ++ children(options)
    }

  defp children(options), do: if(options[:children], do: [:set_on_spawn], else: [])
end
