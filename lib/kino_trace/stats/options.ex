defmodule KinoTrace.Stats.Options do
  @moduledoc false
  # Validates the options of `Kino.Trace.Stats.start/2`.
  #
  # Every option is checked before anything is traced; a bad one raises an
  # `ArgumentError` that names it and says what it takes. `:pids` takes the same values,
  # with the same messages, as in `Kino.Trace.calls/2`, and so does `:nodes` (names in
  # `:pids` are then looked up on each node, when its part is built).

  @defaults [pids: :all, children: false, time: true, memory: true, local: true, force: false, nodes: nil]
  @booleans [:children, :time, :memory, :local, :force]

  @doc """
  The default options.

  ## Examples

      iex> KinoTrace.Stats.Options.validate!(memory: false)[:time]
      true

      iex> KinoTrace.Stats.Options.validate!(time: :yes)
      ** (ArgumentError) invalid value for :time: expected a boolean, got: :yes

      iex> KinoTrace.Stats.Options.validate!(tiem: true)
      ** (ArgumentError) unknown option :tiem (did you mean :time?). Known options: :pids, :children, :time, :memory, :local, :force, :nodes
  """
  @spec defaults() :: keyword()
  def defaults, do: @defaults

  @doc "Validates `opts` and fills in the defaults. Raises `ArgumentError` naming the bad option."
  @spec validate!(term()) :: keyword()
  def validate!(opts) do
    unless Keyword.keyword?(opts) do
      raise ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}"
    end

    Enum.each(opts, fn {key, value} -> check!(key, value) end)
    # :pids and :nodes: the same rules and messages as the calls options (with other
    # nodes, only the shape of :pids here).
    with [_ | _] = calls_opts <- Keyword.take(opts, [:pids, :nodes]),
         do: KinoTrace.Plan.Options.validate!(calls_opts)

    Keyword.merge(@defaults, opts)
  end

  defp check!(key, _value) when key in [:pids, :nodes], do: :ok

  defp check!(key, value) when key in @booleans do
    unless is_boolean(value) do
      raise ArgumentError,
            "invalid value for #{inspect(key)}: expected a boolean, got: #{inspect(value)}"
    end
  end

  defp check!(key, _value),
    do: raise(ArgumentError, KinoTrace.Plan.DidYouMean.unknown_option(key, Keyword.keys(@defaults)))

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
      {false, false} -> [:call_time]
      {time, memory} -> if(time, do: [:call_time], else: []) ++ if(memory, do: [:call_memory], else: [])
    end
  end
end
