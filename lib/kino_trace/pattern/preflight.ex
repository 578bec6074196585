defmodule KinoTrace.Pattern.Preflight do
  @moduledoc false
  # The checks `KinoTrace.Pattern.check/2` runs before anything is traced:
  # the module loads, the function exists with that arity, it is not a macro,
  # it is not inlined away by the compiler, and the pattern does not trace
  # everything or kino_trace itself (unless forced).
  #
  # Names that were not atoms when the pattern was parsed (`Base.Name`) are
  # resolved here, after the module is loaded; no other atom is created.

  alias KinoTrace.Pattern
  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.Text
  alias KinoTrace.Base.Lookup
  alias KinoTrace.Base.MFA
  alias KinoTrace.Base.Suggest

  # A suggestion compares a name with every module of the code path (thousands): only
  # the first unknown modules of a batch get one, only for names a typo of a module's
  # name could be, within a few edits. A batch of thousands of random lines (the smart
  # cell's text, a fuzzer) stays cheap.
  @max_module_hints 8
  @max_hint_length 64

  # Modules that run the tracer: tracing them makes the tracer trace itself.
  @tracer_modules [:trace, :erl_tracer]

  @type result :: {:ok, Pattern.t(), [String.t()]} | {:error, String.t()}

  # Checks every parsed pattern (`{:ok, pattern}`; errors pass through), in order.
  # An `{:ok, pattern, warnings}` result has the pattern's names resolved to atoms.
  #
  # What is known of modules comes from `opts[:lookup]` (`KinoTrace.Base.Lookup`,
  # this node's by default), for all patterns at once: the modules named as text that
  # were no atoms here, the modules (loaded there) and their functions, and, for "did
  # you mean" on unknown modules, the modules of the code path (listed once for all of
  # them: listing them reads every code path directory).
  @spec run_all([{:ok, Pattern.t()} | {:error, String.t()}], keyword) :: [result]
  def run_all(parsed, opts) do
    lookup = Keyword.get(opts, :lookup) || Lookup.local()
    force? = Keyword.get(opts, :force, false)
    local? = Keyword.get(opts, :local, true)

    staged =
      Enum.map(parsed, fn
        {:ok, %{} = pattern} ->
          with :ok <- refuse_everything(pattern, force?),
               :ok <- refuse_tracer(pattern, force?),
               do: {:ok, pattern}

        {:error, message} ->
          {:error, message}
      end)

    staged = resolve_modules(staged, lookup)

    facts =
      module_facts(lookup, for({:ok, %{module: m}} <- staged, is_atom(m) and m != :_, do: m))

    results =
      Enum.map(staged, fn
        {:ok, pattern} -> run(pattern, facts, local?, force?)
        {:error, message} -> {:error, message}
      end)

    if Enum.any?(results, &match?({:unknown_module, _}, &1)) do
      candidates = lookup |> Lookup.available_modules() |> Enum.map(&display_name/1)

      results
      |> Enum.map_reduce(@max_module_hints, fn
        {:unknown_module, wanted}, hints_left when hints_left > 0 ->
          {{:error, "unknown module #{wanted}" <> module_hint(wanted, candidates)},
           hints_left - 1}

        {:unknown_module, wanted}, 0 ->
          {{:error, "unknown module #{wanted}"}, 0}

        result, hints_left ->
          {result, hints_left}
      end)
      |> elem(0)
    else
      results
    end
  end

  defp run(%{} = pattern, facts, local?, force?) do
    with :ok <- ensure_module(pattern, facts),
         pattern = %{pattern | function: Name.retry(pattern.function)},
         {:ok, arities} <- ensure_function(pattern, facts, local?, force?) do
      {:ok, pattern, warnings(pattern, arities)}
    end
  end

  # A module named in text that was not an atom when the pattern was parsed may exist
  # where the lookup looks (or here, by now).
  defp resolve_modules(staged, lookup) do
    texts = for {:ok, %{module: %Name{text: text}}} <- staged, do: text

    if texts == [] do
      staged
    else
      atoms = Lookup.module_atoms(lookup, texts)

      Enum.map(staged, fn
        {:ok, %{module: %Name{text: text}} = pattern} when is_map_key(atoms, text) ->
          {:ok, %{pattern | module: Map.fetch!(atoms, text)}}

        other ->
          other
      end)
    end
  end

  # Per module: `{:error, reason}` when it cannot be loaded, else its
  # `{defined, exported}` functions.
  defp module_facts(_lookup, []), do: %{}

  defp module_facts(lookup, modules) do
    loaded = Lookup.ensure_loaded(lookup, modules)
    loaded_modules = for {m, {:module, m}} <- loaded, do: m
    info = Lookup.module_info(lookup, loaded_modules, [:exports, :functions])

    Map.new(loaded, fn
      {m, {:module, m}} ->
        exported = Map.get(info[m], :exports, [])
        defined = Map.get(info[m], :functions, exported)
        {m, {:ok, {Enum.uniq(defined ++ exported), exported}}}

      {m, {:error, reason}} ->
        {m, {:error, reason}}

      {m, other} ->
        {m, {:error, other}}
    end)
  end

  ## Refusals (overridable with force: true)

  defp refuse_everything(%{module: :_}, false) do
    {:error,
     "refusing to trace every function in the system; " <>
       "name a module or function, or pass force: true if you really mean it"}
  end

  defp refuse_everything(_pattern, _force?), do: :ok

  defp refuse_tracer(%{module: module}, false) do
    if tracer_module?(module) do
      {:error,
       "refusing to trace #{inspect(module)}: tracing kino_trace's own modules or the " <>
         ":trace machinery makes the tracer trace itself; pass force: true to do it anyway"}
    else
      :ok
    end
  end

  defp refuse_tracer(_pattern, true), do: :ok

  defp tracer_module?(module) when module in @tracer_modules, do: true

  defp tracer_module?(module) do
    name = Name.inspect_module(module)

    name in ["Kino.Trace", "KinoTrace"] or String.starts_with?(name, "Kino.Trace.") or
      String.starts_with?(name, "KinoTrace.")
  end

  ## Module

  defp ensure_module(%{module: :_}, _facts), do: :ok

  # Neither loaded nor on the code path, here or where the lookup looks.
  defp ensure_module(%{module: %Name{} = module}, _facts), do: unknown_module(module, :nofile)

  defp ensure_module(%{module: module}, facts) do
    case Map.fetch!(facts, module) do
      {:ok, _functions} -> :ok
      {:error, reason} -> unknown_module(module, reason)
    end
  end

  # No such module: the hint is added by run_all/2.
  defp unknown_module(module, :nofile), do: {:unknown_module, Name.inspect_module(module)}

  defp unknown_module(module, reason) do
    {:error,
     "unknown module #{Name.inspect_module(module)} (it could not be loaded: #{inspect(reason)})"}
  end

  defp module_hint(wanted, _candidates) when byte_size(wanted) > @max_hint_length, do: ""

  defp module_hint(wanted, candidates) do
    case suggest_module(wanted, candidates) do
      nil -> ""
      suggestion -> "; did you mean #{suggestion}?"
    end
  end

  defp suggest_module(wanted, candidates) do
    # An alias whose lowercase form is an Erlang module: `Ets` -> `:ets`.
    erlang_form = ":" <> String.downcase(wanted)

    if String.match?(wanted, ~r/^[A-Z]\w*$/) and erlang_form in candidates do
      erlang_form
    else
      Suggest.closest(wanted, candidates)
    end
  end

  # How a module's atom text is written: "Enum", ":ets" (no atom is made).
  defp display_name(text) do
    case text do
      "Elixir." <> alias -> alias
      erlang -> ":" <> erlang
    end
  end

  ## Function and arity

  defp ensure_function(%{function: :_}, _facts, _local?, _force?), do: {:ok, []}

  defp ensure_function(%{} = pattern, facts, local?, force?) do
    %{module: module, function: function, arity: arity} = pattern
    {:ok, {defined, exported}} = Map.fetch!(facts, module)
    visible = if local?, do: defined, else: exported
    arities = for {^function, a} <- visible, do: a
    all_arities = for {^function, a} <- defined, do: a
    macro_arities = macro_arities(defined, function)

    cond do
      macro_expansion?(function) and not force? ->
        {:error,
         "#{Text.of(pattern)} is the compile-time expansion of a macro; " <>
           "it only runs while code compiles (pass force: true to trace it anyway)"}

      arity != :_ and arity in arities ->
        {:ok, [arity]}

      arity == :_ and arities != [] ->
        {:ok, Enum.sort(arities)}

      arity == :_ and macro_arities != [] ->
        {:error,
         "#{mfa_text(module, function, :_)} is a macro, expanded at compile time; " <>
           "it cannot be traced"}

      arity in macro_arities ->
        {:error,
         "#{mfa_text(module, function, arity)} is a macro, expanded at compile time; " <>
           "it cannot be traced"}

      not local? and (arity == :_ or arity in all_arities) and all_arities != [] ->
        {:error, "#{Text.of(pattern)} is private; it can only be traced with local: true"}

      arities != [] ->
        {:error,
         "#{mfa_text(module, function, arity)} does not exist; " <>
           "#{mfa_text(module, function, :_)} has arities " <>
           (arities |> Enum.sort() |> Enum.uniq() |> Enum.join(", "))}

      true ->
        {:error,
         "#{mfa_text(module, function, arity)} is not a function" <>
           function_hint(pattern, visible)}
    end
  end

  # Compared as text: no atom is made for a macro that does not exist.
  defp macro_arities(functions, function) do
    macro_name = "MACRO-" <> Name.text(function)
    for {name, a} <- functions, Atom.to_string(name) == macro_name, do: a - 1
  end

  defp macro_expansion?(function), do: String.starts_with?(Name.text(function), "MACRO-")

  defp function_hint(%{module: module, function: function, arity: arity}, visible) do
    candidates =
      visible
      |> Enum.map(fn {name, _} -> name end)
      |> Enum.uniq()
      |> Enum.reject(&generated_name?/1)
      |> Enum.map(&Atom.to_string/1)

    case Suggest.closest(Name.text(function), candidates) do
      nil ->
        ""

      suggestion ->
        suggestion = String.to_existing_atom(suggestion)
        arities = for {^suggestion, a} <- visible, do: a

        suggested_arity =
          cond do
            arity == :_ -> :_
            arity in arities -> arity
            true -> Enum.min(arities)
          end

        "; did you mean #{mfa_text(module, suggestion, suggested_arity)}?"
    end
  end

  defp generated_name?(name) do
    text = Atom.to_string(name)
    String.starts_with?(text, ["-", "MACRO-"]) or name in [:__info__, :module_info]
  end

  ## Warnings

  defp warnings(%{module: module, function: function}, arities) do
    for arity <- arities,
        warning =
          inline_warning(module, function, arity) || instruction_warning(module, function, arity),
        do: warning
  end

  defp inline_warning(module, function, arity) do
    case inline_target(module, function, arity) do
      {target_module, target_function, target_arity} ->
        target = mfa_text(target_module, target_function, target_arity)

        "#{mfa_text(module, function, arity)} is inlined by the compiler (calls never reach it); " <>
          "trace #{target} instead" <>
          if(vm_instruction?(target_module, target_function, target_arity),
            do:
              " (compiled code usually runs #{target} as a VM instruction, so only dynamic calls reach it)",
            else: ""
          )

      :no_call ->
        "#{mfa_text(module, function, arity)} is inlined by the compiler into code that calls " <>
          "no function (calls never reach it)"

      nil ->
        nil
    end
  end

  defp instruction_warning(module, function, arity) do
    if vm_instruction?(module, function, arity) do
      "#{mfa_text(module, function, arity)} is usually compiled to a VM instruction; " <>
        "only dynamic calls (apply/3, captures, evaluated code such as Livebook cells) are traced"
    end
  end

  # Where the running Elixir compiler sends calls to `module.function/arity` when it
  # rewrites them to another function (`Kernel.+/2` -> `:erlang.+/2`, `Kernel.elem/2` ->
  # `:erlang.element/2`), `:no_call` when it compiles them to no call at all (`Map.put/3`
  # into a map update), or nil. Asked of the compiler itself, so it follows the running
  # Elixir (1.20 moved `elem/2` and others out of the rewrite tables 1.18 had): a call
  # with plain variables as arguments is expanded and translated to Erlang, as
  # `Code.eval_quoted/2` would, and the call it became is read. Nothing is compiled or
  # run; macros are left alone.
  defp inline_target(module, function, arity) do
    if is_integer(arity) and Code.ensure_loaded?(module) and
         not macro_exported?(module, function, arity) and
         function_exported?(module, function, arity) do
      case translated_call(module, function, arity) do
        {^module, ^function, ^arity} -> nil
        other -> other
      end
    end
  end

  defp translated_call(module, function, arity) do
    args = Macro.generate_arguments(arity, __MODULE__)
    call = {{:., [], [module, function]}, [], args}
    quoted = {:fn, [], [{:->, [], [args, call]}]}

    case :elixir.quoted_to_erl(quoted, :elixir.env_for_eval([])) do
      {{:fun, _, {:clauses, [{:clause, _, _, [], [body]}]}}, _, _, _} -> erlang_call(body)
      _ -> nil
    end
  rescue
    _ -> nil
  end

  defp erlang_call({:call, _, {:remote, _, {:atom, _, m}, {:atom, _, f}}, args}),
    do: {m, f, length(args)}

  defp erlang_call({:op, _, op, _left, _right}), do: {:erlang, op, 2}
  defp erlang_call({:op, _, op, _operand}), do: {:erlang, op, 1}
  defp erlang_call({kind, _, _, _}) when kind in [:map, :record], do: :no_call
  defp erlang_call(_other), do: nil

  defp vm_instruction?(:erlang, function, arity) when is_atom(function) and is_integer(arity) do
    :erl_internal.guard_bif(function, arity) or :erl_internal.arith_op(function, arity) or
      :erl_internal.comp_op(function, arity) or :erl_internal.bool_op(function, arity) or
      :erl_internal.new_type_test(function, arity) or :erl_internal.send_op(function, arity)
  end

  defp vm_instruction?(_module, _function, _arity), do: false

  # Preflight names "any arity" by leaving the arity out (`Enum.map`), not as `/*`.
  defp mfa_text(module, function, :_), do: MFA.to_string({module, function, nil})
  defp mfa_text(module, function, arity), do: MFA.to_string({module, function, arity})
end
