defmodule KinoTrace.Plan.Options do
  @moduledoc false
  # Validates the options of `Kino.Trace.calls/2` and `Kino.Trace.capture/3`.
  #
  # Every option is checked before anything is traced; a bad one raises an
  # `ArgumentError` that names it and says what it takes.

  alias KinoTrace.Limits
  alias KinoTrace.Base.Lookup

  @doc """
  The default options.

  ## Examples

      iex> KinoTrace.Plan.Options.validate!(limit: 10, rate: {100, 1000})[:limit]
      10

      iex> KinoTrace.Plan.Options.validate!(limit: -1)
      ** (ArgumentError) invalid value for :limit: expected a positive integer, got: -1

  The defaults and bounds of the limits (`:limit`, `:rate`, `:queue`, `:max_depth`,
  `:max_items`, `:max_binary`, `:max_bytes`, `:timeout`, `:history`) are those of
  `KinoTrace.Limits`, the one definition the tracers' copies are generated from; a value
  out of range is reported under the option's name, worded as the tracers word it.

      iex> KinoTrace.Plan.Options.validate!(rate: {1, 86_400_001})
      ** (ArgumentError) invalid value for :rate: expected a period of at most 86400000 ms, got: {1, 86400001}
  """
  @spec defaults() :: keyword()
  def defaults, do: KinoTrace.Options.defaults(schema([]))

  @doc """
  The options, with their defaults and checks (`KinoTrace.Options`), as `opts` are
  checked: with other nodes than this one (`:nodes`), only the shape of `:pids` is
  checked here (its names are looked up on each node as its part is built).
  """
  @spec schema(term()) :: KinoTrace.Options.schema()
  def schema(opts) do
    remote? = Keyword.keyword?(opts) and Keyword.get(opts, :nodes) not in [nil, node(), [node()]]
    boolean = KinoTrace.Options.boolean()

    [
      pids: {:all, &check_pids!(&1, not remote?)},
      children: {false, boolean},
      return: {true, boolean},
      exceptions: {true, boolean},
      caller: {false, {"true, false or :line", &(is_boolean(&1) or &1 == :line)}},
      return_to: {false, boolean},
      local: {true, boolean},
      # The defaults and bounds of the limits are KinoTrace.Limits' (see cap/1).
      limit:
        {Limits.default(:limit),
         KinoTrace.Options.bounded_pos_integer(Limits.max(:limit), nil: true)},
      rate: {Limits.default(:rate_count), &check_rate/1},
      queue:
        {[events: Limits.default(:queue_events), bytes: Limits.default(:queue_bytes)],
         &check_queue/1},
      max_depth: cap(:max_depth),
      max_items: cap(:max_items),
      max_binary: cap(:max_binary),
      max_bytes: cap(:max_bytes),
      timeout:
        {Limits.default(:timeout),
         KinoTrace.Options.bounded_pos_integer(Limits.max(:timeout), nil: true, unit: "ms")},
      print: {false, &check_print/1},
      to: {nil, &check_to/1},
      force: {false, boolean},
      history: cap(:history),
      latency: {false, boolean},
      slowest:
        {Limits.default(:slowest),
         KinoTrace.Options.bounded_pos_integer(Limits.max(:slowest), nil: true)},
      slower_than:
        {nil,
         {"a number of milliseconds (0 or more)",
          &(is_nil(&1) or (is_number(&1) and &1 >= 0))}},
      pattern:
        {nil,
         {"a message pattern as a string, such as \"{:ok, _}\"", &(is_nil(&1) or is_binary(&1))}},
      timeouts: {false, boolean},
      nodes: {nil, {"a node, a list of nodes, or :all", &nodes?/1}},
      agent: {:auto, {":auto or :fallback", &(&1 in [:auto, :fallback])}},
      name: {nil, {"a string", &(is_nil(&1) or is_binary(&1))}}
    ]
  end

  @doc """
  The options of the console printer (`Kino.Trace.Printer.attach/2`), which the `:print`
  option takes in place of `true`, with their defaults and checks (`KinoTrace.Options`).
  """
  @spec print_schema() :: KinoTrace.Options.schema()
  def print_schema do
    boolean = KinoTrace.Options.boolean()
    device? = &(is_pid(&1) or (is_atom(&1) and not is_nil(&1)))

    [
      colors: {nil, boolean},
      time: {true, boolean},
      device: {nil, {"an IO device (a pid or a registered name)", device?}},
      inspect: {[], {"a keyword list of inspect/2 options", &Keyword.keyword?/1}}
    ]
  end

  # The least a file of the :to option may hold (a header, some events, an end).
  @min_file_bytes 4_096

  @doc """
  What the `:to` option takes in its keyword form (a path alone is `path:` with the
  defaults), with the defaults and checks (`KinoTrace.Options`).
  """
  @spec to_schema() :: KinoTrace.Options.schema()
  def to_schema do
    [
      path: {nil, {"a path (a string)", &is_binary/1}},
      max_bytes: {100 * 1024 * 1024, KinoTrace.Options.pos_integer()},
      files: {5, KinoTrace.Options.bounded_pos_integer(1_000)}
    ]
  end

  @doc """
  The `:to` option as `KinoTrace.File.Writer` takes it, or `nil`.

      iex> KinoTrace.Plan.Options.to_spec("repo.ktrace")
      %{path: "repo.ktrace", max_bytes: 104_857_600, files: 5}
      iex> KinoTrace.Plan.Options.to_spec(path: "repo.ktrace", files: 2)
      %{path: "repo.ktrace", max_bytes: 104_857_600, files: 2}
  """
  @spec to_spec(nil | String.t() | keyword()) ::
          nil | %{path: String.t(), max_bytes: pos_integer(), files: pos_integer()}
  def to_spec(nil), do: nil
  def to_spec(path) when is_binary(path), do: to_spec(path: path)

  def to_spec(opts) do
    spec = opts |> KinoTrace.Options.validate!(to_schema()) |> Map.new()

    if div(spec.max_bytes, spec.files) < @min_file_bytes,
      do:
        raise(
          ArgumentError,
          "to: gives each of its #{spec.files} files #{div(spec.max_bytes, spec.files)} bytes: at least #{@min_file_bytes} are needed (a larger max_bytes:, or fewer files:)"
        )

    spec
  end

  defp check_to(nil), do: :ok
  defp check_to(path) when is_binary(path), do: :ok

  defp check_to(value) do
    if Keyword.keyword?(value) and is_binary(value[:path]) do
      try do
        to_spec(value)
        :ok
      rescue
        e in ArgumentError ->
          reraise ArgumentError, "invalid value for :to: " <> e.message, __STACKTRACE__
      end
    else
      {:error, "a path, or [path: path, max_bytes: bytes, files: count]"}
    end
  end

  # `true`, `false`, or the printer's options, each checked as an option is (a bad one
  # named under :print).
  defp check_print(value) when is_boolean(value), do: :ok

  defp check_print(value) do
    if Keyword.keyword?(value) do
      try do
        KinoTrace.Options.validate!(value, print_schema())
        :ok
      rescue
        e in ArgumentError ->
          reraise ArgumentError, "invalid value for :print: " <> e.message, __STACKTRACE__
      end
    else
      {:error, "a boolean or printer options (colors: boolean, time: boolean)"}
    end
  end

  @doc """
  Validates `opts` and fills in the defaults (`defaults`: these options' defaults, or a
  capture's). Raises `ArgumentError` naming the bad option.
  """
  @spec validate!(keyword(), keyword()) :: keyword()
  def validate!(opts, defaults \\ defaults()) do
    merged =
      KinoTrace.Options.validate!(opts, KinoTrace.Options.put_defaults(schema(opts), defaults))

    merged = Keyword.update!(merged, :queue, &Keyword.merge(defaults()[:queue], &1))
    check_return_to!(merged)
    merged
  end

  # The VM reports returns into a function only where calls are traced as local calls.
  defp check_return_to!(merged) do
    if merged[:return_to] && !merged[:local] do
      raise ArgumentError,
            "invalid value for :return_to: returns are traced only with local: true " <>
              "(the VM reports them only for functions traced on local calls)"
    end
  end

  @doc """
  Checks the options that apply to one kind of events only against `what` (the keys of
  `Kino.Trace.Plan.new!/3`'s `what`): a message pattern (`:pattern`) or `timeouts: true`
  on a trace without messages raises `ArgumentError` naming the option.

      iex> KinoTrace.Plan.Options.check_what!(KinoTrace.Plan.Options.validate!(pattern: "{:ok, _}"), [:calls])
      ** (ArgumentError) invalid value for :pattern: a message pattern filters traced messages, and this trace traces none (trace them with Kino.Trace.messages/2, Kino.Trace.trace/2's :messages, or messages: true in a capture)
  """
  @spec check_what!(keyword(), [atom()]) :: :ok
  def check_what!(options, what) do
    if :messages not in what do
      if options[:pattern] != nil,
        do:
          raise(
            ArgumentError,
            messages_only(:pattern, "a message pattern filters traced messages")
          )

      if options[:timeouts],
        do:
          raise(
            ArgumentError,
            messages_only(
              :timeouts,
              "timeouts: true adds the receive ... after that timed out to traced messages"
            )
          )
    end

    :ok
  end

  defp messages_only(key, what) do
    "invalid value for #{inspect(key)}: #{what}, and this trace traces none (trace them with " <>
      "Kino.Trace.messages/2, Kino.Trace.trace/2's :messages, or messages: true in a capture)"
  end

  # The options the native session takes as they are (see native_limits/1).
  @native_keys [:limit, :rate, :queue, :max_depth, :max_items, :max_binary, :max_bytes]

  # An option that is one limit of KinoTrace.Limits: its default, and a positive integer
  # of at most its bound.
  defp cap(name),
    do: {Limits.default(name), KinoTrace.Options.bounded_pos_integer(Limits.max(name))}

  # The bounds' errors are worded as the tracers word theirs (c_src/nif/session_nifs.cpp,
  # src/kino_trace_fallback_limits.erl), which check them again.
  defp check_rate(nil), do: :ok

  defp check_rate({count, ms})
       when is_integer(count) and count > 0 and is_integer(ms) and ms > 0 do
    cond do
      count > Limits.max(:rate_count) ->
        {:error, "a count of at most #{Limits.max(:rate_count)}"}

      ms > Limits.max(:rate_period_ms) ->
        {:error, "a period of at most #{Limits.max(:rate_period_ms)} ms"}

      true ->
        :ok
    end
  end

  defp check_rate(_value), do: {:error, "{count, milliseconds} with positive integers"}

  @queue_limits %{events: :queue_events, bytes: :queue_bytes}

  defp check_queue(value) do
    if Keyword.keyword?(value) and
         Enum.all?(value, fn {k, v} -> k in [:events, :bytes] and pos_integer?(v) end) do
      Enum.find_value(value, :ok, fn {key, v} ->
        max = Limits.max(@queue_limits[key])
        if v > max, do: {:error, "#{inspect(key)} of at most #{max}"}
      end)
    else
      {:error, "a keyword list with :events and/or :bytes as positive integers"}
    end
  end

  defp nodes?(value),
    do:
      is_nil(value) or value == :all or is_atom(value) or
        (is_list(value) and value != [] and Enum.all?(value, &is_atom/1))

  # The shape of :pids; with `lookup?`, names are looked up here too. (With other
  # nodes, names are looked up for each node when its part of the plan is built.)
  defp check_pids!(value, _lookup?) when value in [:all, :new, :existing], do: :ok
  defp check_pids!(value, _lookup?) when is_pid(value), do: :ok

  defp check_pids!([_ | _] = list, lookup?) do
    Enum.each(list, fn
      item when item in [:all, :new, :existing] ->
        raise ArgumentError, "invalid value for :pids: #{inspect(item)} cannot be part of a list"

      item ->
        check_pids!(item, lookup?)
    end)
  end

  defp check_pids!(value, lookup?) do
    cond do
      not name?(value) ->
        invalid!(
          :pids,
          ":all, :new, :existing, a pid, a name (registered, {:global, name} or {:via, module, name}), or a list of pids and names",
          value
        )

      lookup? ->
        whereis!(value)

      true ->
        :ok
    end

    :ok
  end

  defp name?(value) when is_atom(value), do: true
  defp name?({:global, _name}), do: true
  defp name?({:via, module, _name}) when is_atom(module), do: true
  defp name?(_value), do: false

  # The pid of a process name, looked up as GenServer does; raises naming it when none.
  defp whereis!(name), do: pid!(name, Lookup.whereis(Lookup.local(), [name])[name])

  # What `KinoTrace.Base.Lookup.whereis/2` found for `name`: its pid, or an error naming it.
  defp pid!(_name, {:ok, pid}) when is_pid(pid), do: pid

  defp pid!(name, {:ok, nil}),
    do:
      raise(
        ArgumentError,
        "invalid value for :pids: no process is registered as #{inspect(name)}"
      )

  defp pid!(name, {:error, %UndefinedFunctionError{} = e}) do
    raise ArgumentError,
          "invalid value for :pids: cannot look up #{inspect(name)}: #{inspect(e.module)}.#{e.function}/#{e.arity} is not defined"
  end

  defp pid!(name, {:error, e}),
    do:
      raise(
        ArgumentError,
        "invalid value for :pids: cannot look up #{inspect(name)}: #{Exception.message(e)}"
      )

  defp pos_integer?(v), do: KinoTrace.Options.pos_integer?(v)

  defp invalid!(key, expected, value), do: KinoTrace.Options.invalid!(key, expected, value)

  @doc """
  Resolves the `:pids` option into what `:trace.process/4` takes: a list of `:all`,
  `:new`, `:existing` or pids of the lookup's node (`KinoTrace.Base.Lookup`: this node
  by default, or another node, which needs no kino_trace). Names (registered atoms,
  `{:global, name}`, `{:via, module, name}`) are looked up there, all at once; one
  that names no process raises `ArgumentError` naming it.

      iex> KinoTrace.Plan.Options.resolve_pids([:kino_trace_nobody])
      ** (ArgumentError) invalid value for :pids: no process is registered as :kino_trace_nobody
  """
  @spec resolve_pids(term(), Lookup.t()) :: [pid() | :all | :new | :existing]
  def resolve_pids(value, lookup \\ Lookup.local()) do
    names =
      value |> List.wrap() |> Enum.filter(&(name?(&1) and &1 not in [:all, :new, :existing]))

    found = if names == [], do: %{}, else: Lookup.whereis(lookup, names)
    do_resolve(value, lookup.node, found)
  end

  defp do_resolve(value, _node, _found) when value in [:all, :new, :existing], do: [value]
  defp do_resolve(value, node, _found) when is_pid(value) and node(value) == node, do: [value]
  defp do_resolve(value, _node, _found) when is_pid(value), do: []

  defp do_resolve(list, node, found) when is_list(list),
    do: Enum.flat_map(list, &do_resolve(&1, node, found))

  defp do_resolve(value, node, found) do
    # What is neither a target nor a name raises as an invalid :pids value.
    unless name?(value), do: check_pids!(value, false)
    do_resolve(pid!(value, Map.fetch!(found, value)), node, found)
  end

  @doc """
  Validates and resolves the targets of message or process tracing (`what` names the
  option in error messages): `:all`, `:new`, `:existing`, a pid, a name (registered,
  `{:global, name}` or `{:via, module, name}`), or a list of pids and names. Names are
  looked up with `lookup`, as `resolve_pids/2` does.
  """
  @spec resolve_targets!(term(), atom(), Lookup.t()) :: [pid() | :all | :new | :existing]
  def resolve_targets!(targets, what, lookup \\ Lookup.local()) do
    check_pids!(targets, false)
    resolve_pids(targets, lookup)
  rescue
    e in ArgumentError ->
      reraise ArgumentError,
              String.replace(e.message, "invalid value for :pids", "invalid #{what} target"),
              __STACKTRACE__
  end

  @doc """
  The native session's limits, from validated options: the options the tracer takes, under
  their own names and in their own shapes (`KinoTrace.Tracer.new_session/2`), and
  `:skip_returns`.

      iex> KinoTrace.Plan.Options.native_limits(KinoTrace.Plan.Options.validate!(limit: 5, return: false))
      %{limit: 5, rate: nil, queue: [events: 100000, bytes: 67108864], max_depth: 10,
        max_items: 50, max_binary: 512, max_bytes: 16384, skip_returns: true}
  """
  @spec native_limits(keyword()) :: map()
  def native_limits(opts) do
    opts
    |> Keyword.take(@native_keys)
    |> Map.new()
    |> Map.put(:skip_returns, not opts[:return] and opts[:exceptions])
  end
end
