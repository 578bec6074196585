defmodule KinoTrace.Stats.Targets do
  @moduledoc false
  # Turns stats patterns into the exact functions whose counters are read.
  #
  # The VM's call counters are set with wildcards but read one function at a time
  # (`:trace.info/3` takes no wildcards), so every pattern is expanded here to the
  # `{module, function, arity}` list of the loaded code. With `local: false` only exported
  # functions are counted.
  #
  # Counters take no match spec: every call is counted, so argument patterns and guards
  # are refused.

  alias KinoTrace.Pattern
  alias KinoTrace.Pattern.Generated
  alias KinoTrace.Base.Lookup

  @doc """
  Raises `ArgumentError` naming every pattern with argument patterns or guards.

  ## Examples

      iex> {:ok, pattern} = KinoTrace.Pattern.parse("Enum.map/2")
      iex> KinoTrace.Stats.Targets.expand([pattern], local: true)
      [{Enum, :map, 2}]

      iex> {:ok, pattern} = KinoTrace.Pattern.parse("Enum.map(list, _) when length(list) > 10")
      iex> KinoTrace.Stats.Targets.check_plain!([pattern])
      ** (ArgumentError) invalid stats pattern "Enum.map(list, _) when length(list) > 10": statistics count every call, so argument patterns and guards are not supported; use "Enum.map/2"
  """
  @spec check_plain!([Pattern.t()]) :: :ok
  def check_plain!(patterns) do
    errors =
      for %Pattern{} = p <- patterns, p.head != :_ or p.guards != [] do
        plain = %{p | head: :_, guards: [], call_text: nil}

        "invalid stats pattern #{inspect(Pattern.to_string(p))}: statistics count every call, " <>
          "so argument patterns and guards are not supported; use #{inspect(Pattern.to_string(plain))}"
      end

    if errors != [], do: raise(ArgumentError, Enum.join(errors, "\n"))
    :ok
  end

  @doc """
  The functions the patterns name, in the loaded code, without duplicates. A
  module-wide pattern leaves out the functions the compiler adds
  (`KinoTrace.Pattern.Generated`); a pattern that names one counts it.
  Options: `:local` (default `true`) - include private functions; `:lookup` - the
  node whose code is read (`KinoTrace.Base.Lookup`, this node's by default): its
  modules' functions are asked for all at once, one round trip on another node.

      iex> {:ok, all} = KinoTrace.Pattern.parse(":erl_eval")
      iex> {:ok, info} = KinoTrace.Pattern.parse(":erl_eval.module_info")
      iex> expanded = KinoTrace.Stats.Targets.expand([all], local: false)
      iex> {{:erl_eval, :exprs, 2} in expanded, {:erl_eval, :module_info, 0} in expanded}
      {true, false}
      iex> KinoTrace.Stats.Targets.expand([info])
      [{:erl_eval, :module_info, 0}, {:erl_eval, :module_info, 1}]
  """
  @spec expand([Pattern.t()], keyword()) :: [mfa()]
  def expand(patterns, opts \\ []) do
    local? = Keyword.get(opts, :local, true)
    lookup = Keyword.get(opts, :lookup) || Lookup.local()
    mfas = Enum.map(patterns, &Pattern.mfa/1)

    named = for {m, _f, a} <- mfas, m != :_ and not is_integer(a), do: m
    every = if Enum.any?(mfas, &match?({:_, _, _}, &1)), do: loaded_modules(lookup), else: []
    modules = Enum.uniq(named ++ every)

    key = if local?, do: :functions, else: :exports
    info = if modules == [], do: %{}, else: Lookup.module_info(lookup, modules, [key])
    functions = fn module -> get_in(info, [module, key]) || [] end

    mfas
    |> Enum.flat_map(&expand_one(&1, functions, every))
    |> Enum.uniq()
  end

  defp loaded_modules(lookup) do
    case Lookup.run(lookup, [{:code, :all_loaded, []}]) do
      [{:ok, loaded}] -> Enum.map(loaded, &elem(&1, 0))
      [{:error, _}] -> []
    end
  end

  defp expand_one({:_, :_, :_}, functions, loaded) do
    for module <- loaded, mfa <- expand_one({module, :_, :_}, functions, loaded), do: mfa
  end

  # An exact function passed the pre-flight check: take it as it is (BIFs included).
  defp expand_one({module, function, arity}, _functions, _loaded) when is_integer(arity),
    do: [{module, function, arity}]

  # A module-wide pattern leaves out the compiler's functions (Pattern.Generated).
  defp expand_one({module, function, arity}, functions, _loaded) do
    for {f, a} <- functions.(module),
        if(function == :_, do: not Generated.generated?(f, a), else: f == function),
        arity == :_ or a == arity,
        do: {module, f, a}
  end
end
