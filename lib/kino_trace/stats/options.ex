defmodule KinoTrace.Stats.Options do
  @moduledoc false
  # Validates the options of `Kino.Trace.Stats.start/2`.
  #
  # Every option is checked before anything is traced (`KinoTrace.Options`); a bad one
  # raises an `ArgumentError` that names it and says what it takes. `:pids`, `:children`,
  # `:local`, `:force` and `:nodes` are the calls options' (`KinoTrace.Plan.Options`),
  # with the same messages (with other nodes, names in `:pids` are looked up on each
  # node, when its part is built).

  @doc """
  The default options.

  ## Examples

      iex> KinoTrace.Stats.Options.validate!(memory: false)[:time]
      true

      iex> KinoTrace.Stats.Options.validate!(time: :yes)
      ** (ArgumentError) invalid value for :time: expected a boolean, got: :yes

      iex> KinoTrace.Stats.Options.validate!(tiem: true)
      ** (ArgumentError) unknown option :tiem (did you mean :time?). Known options: :pids, :children, :time, :memory, :local, :force, :nodes, :latency
  """
  @spec defaults() :: keyword()
  def defaults, do: KinoTrace.Options.defaults(schema([]))

  # The options (KinoTrace.Options): those a trace has too are the calls options', with
  # their defaults and checks.
  defp schema(opts) do
    calls = KinoTrace.Plan.Options.schema(opts)
    boolean = {true, KinoTrace.Options.boolean()}

    Keyword.take(calls, [:pids, :children]) ++
      [time: boolean, memory: boolean] ++
      Keyword.take(calls, [:local, :force, :nodes]) ++
      [latency: {false, KinoTrace.Options.boolean()}]
  end

  @doc "Validates `opts` and fills in the defaults. Raises `ArgumentError` naming the bad option."
  @spec validate!(term()) :: keyword()
  def validate!(opts) do
    KinoTrace.Options.validate!(opts, schema(opts))
  end

  @doc """
  The plan of the trace that measures durations (`latency: true`, else `nil`): calls and
  returns of the same functions in the same processes, with their distributions kept as
  its events are decoded (`latency: true` of a trace), also per process (for the
  widget's drill-down: `latency_by_process: true`, put in the plan's options here, no
  option of a trace), and nothing else (one event kept, terms cut to the least).
  """
  @spec latency_plan(term(), keyword()) :: Kino.Trace.Plan.t() | nil
  def latency_plan(patterns, opts) do
    if opts[:latency] do
      same = Keyword.take(opts, [:pids, :children, :local, :force, :nodes])
      cut = [latency: true, history: 1, max_depth: 1, max_items: 1, max_binary: 1]
      plan = Kino.Trace.Plan.new!([calls: patterns], same ++ cut)
      %{plan | options: Keyword.put(plan.options, :latency_by_process, true)}
    end
  end

  @doc """
  The VM counters to enable for validated options.

  Calls are counted per process by `call_time` or `call_memory`, which count only in the
  processes the session traces: those of the `:pids` option, never kino_trace's own
  (`KinoTrace.Internal`). When neither time nor memory is wanted, `call_time` counts
  (its times are then not reported). `call_count` is never used: it counts in every
  process, kino_trace's own included.

      iex> KinoTrace.Stats.Options.counters(time: true, memory: false, pids: :all)
      [:call_time]
      iex> KinoTrace.Stats.Options.counters(time: false, memory: false, pids: :all)
      [:call_time]
      iex> KinoTrace.Stats.Options.counters(time: false, memory: true, pids: self())
      [:call_memory]
  """
  @spec counters(keyword()) :: [:call_time | :call_memory]
  def counters(opts) do
    case {opts[:time], opts[:memory]} do
      {false, false} ->
        [:call_time]

      {time, memory} ->
        if(time, do: [:call_time], else: []) ++ if(memory, do: [:call_memory], else: [])
    end
  end
end
