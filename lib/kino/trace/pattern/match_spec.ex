defmodule Kino.Trace.Pattern.MatchSpec do
  @moduledoc false
  # Compiles quoted Elixir argument patterns and guards (as written after
  # `Mod.fun(...) when ...`) into the head and guard parts of a match spec.
  #
  # Variables bind `:"$1"`, `:"$2"`, ... in order of first appearance in the
  # arguments; a variable seen again in the arguments reuses its `$N`, so the
  # match spec only matches when both places hold equal terms. Guards may only
  # use variables bound in the arguments.
  #
  # Every function returns `{:ok, ...}` or `{:error, message}`; errors name the
  # construct that is not supported. `a when b` in a guard is one match spec clause
  # per alternative, so a guard that fails (raises) only fails its own clause.
  #
  # Atoms a match spec reads as variables are escaped: `:_` and `:"$1"`, ... in a
  # head become a fresh variable compared with the atom in the clause's guards;
  # `:"$1"`, `:"$_"`, `:"$$"` in a guard are `{:const, atom}`. Others, such as
  # `:"$gen_call"`, are plain atoms.
  #
  # The quoted forms come from `Kino.Trace.Pattern.Quoted`: names that are not
  # atoms are `Kino.Trace.Pattern.Name`s. A variable may have such a name; a
  # literal atom may not (no term can contain an atom that does not exist).

  import Kino.Trace.Pattern.Name, only: [is_name: 1]
  alias Kino.Trace.MFA
  alias Kino.Trace.Pattern.{Bits, Name, Quoted}

  @comparisons %{
    ==: :==,
    !=: :"/=",
    ===: :"=:=",
    !==: :"=/=",
    <: :<,
    >: :>,
    <=: :"=<",
    >=: :>=
  }

  @type_checks [
    is_atom: 1,
    is_binary: 1,
    is_bitstring: 1,
    is_boolean: 1,
    is_float: 1,
    is_function: 1,
    is_function: 2,
    is_integer: 1,
    is_list: 1,
    is_map: 1,
    is_number: 1,
    is_pid: 1,
    is_port: 1,
    is_reference: 1,
    is_tuple: 1
  ]

  # Bitwise's guard operators (as if `import Bitwise`) and functions.
  @bitwise_operators %{&&&: :band, |||: :bor, <<<: :bsl, >>>: :bsr, "~~~": :bnot}
  @bitwise_functions [band: 2, bor: 2, bxor: 2, bnot: 1, bsl: 2, bsr: 2]

  # Kernel's guards that are macros, expanded as the running Elixir expands them
  # (guard_expr/2), by name: their arities.
  @kernel_guard_macros %{is_struct: [1, 2], is_non_struct_map: [1], is_exception: [1, 2]}

  # Elixir guard functions that are the match spec function of the same name
  # with the same argument order.
  @same_name_guards @type_checks ++
                      [
                        abs: 1,
                        binary_part: 3,
                        bit_size: 1,
                        byte_size: 1,
                        ceil: 1,
                        div: 2,
                        floor: 1,
                        hd: 1,
                        length: 1,
                        map_size: 1,
                        max: 2,
                        min: 2,
                        node: 0,
                        node: 1,
                        rem: 2,
                        round: 1,
                        self: 0,
                        tl: 1,
                        trunc: 1,
                        tuple_size: 1
                      ] ++ @bitwise_functions

  @arithmetic [:+, :-, :*, :/]

  # Quoted forms that are not calls: refused for what they are, not as functions.
  @special_forms [:%, :%{}, :{}, :<<>>, :"::", :=, :<>, :@, :__aliases__, :.., :..//, :|, :&, :fn] ++
                   [:sigil_c, :sigil_C, :sigil_s, :sigil_S, :sigil_w, :sigil_W]
  @boolean_results Map.keys(@comparisons) ++ [:and, :or, :not, :&&, :||, :!, :in, :is_nil]

  # Match variables of one pattern, at most (each is an atom `:"$N"`, shared by
  # every pattern; the bound keeps their number bounded).
  @max_variables 1_000

  # `vars`: each variable's match variable; `count`: match variables so far;
  # `checks`: conditions the head needs (reversed), for what a head cannot say
  # itself (an atom a match spec would read as a variable, a struct name that
  # must be an atom). With `:literal` instead, only literal terms are accepted.
  @no_bindings %{vars: %{}, count: 0, checks: []}

  @doc false
  # Compiles argument patterns and a guard (`nil` for none; `a when b` is two
  # clauses) into a match spec head and one guard list per clause. `extra` is a
  # guard every clause must also pass (`nil` for none), over the same variables.
  # Any input this cannot compile is `{:error, message}` naming it.
  #
  # Options: `:max_bytes`, the trace's option of that name (its default when not
  # given): the most the literals of the pattern may build, in all (see
  # `check_sizes/2`).
  @spec compile([Macro.t()], Macro.t() | nil, Macro.t() | nil, keyword) ::
          {:ok, list, [[term]]} | {:error, String.t()}
  def compile(args, guard, extra \\ nil, opts \\ []) when is_list(args) do
    with :ok <- check_sizes([args, guard], max_bytes(opts)),
         {:ok, head, bindings} <- patterns(args, @no_bindings),
         {:ok, clauses} <- guard_clauses(guard, bindings),
         {:ok, extra} <- extra_guard(extra, bindings) do
      checks = Enum.reverse(bindings.checks)
      clauses = Enum.map(clauses, &(checks ++ &1 ++ extra))
      with :ok <- validate(head, clauses), do: {:ok, head, clauses}
    end
  end

  @doc false
  # The bound on what a pattern's literals build: `opts[:max_bytes]`, else the
  # default of the trace option.
  @spec max_bytes(keyword) :: pos_integer
  def max_bytes(opts) do
    case Keyword.get(opts, :max_bytes) do
      bytes when is_integer(bytes) and bytes > 0 -> bytes
      _ -> Keyword.fetch!(Kino.Trace.Options.defaults(), :max_bytes)
    end
  end

  @doc false
  # Runs `fun`, turning an exception into `{:error, message}` naming `what`: a
  # pattern the compiler cannot handle must never crash its caller (a running
  # trace's session). Every entry point from text runs in it; the fuzz test
  # checks that no input ends up here.
  @spec safely(String.t(), (-> result)) :: result | {:error, String.t()} when result: term
  def safely(what, fun) do
    fun.()
  rescue
    error ->
      {:error,
       "the pattern compiler failed on #{what} (#{Exception.format_banner(:error, error)}); " <>
         "this is a bug in kino_trace"}
  end

  # The code above only builds valid specs, but never let a bad one reach
  # `:trace.function/4`: the VM compiles it here first.
  defp validate(head, clauses) do
    spec = for guards <- clauses, do: {head, guards, []}

    case :erlang.match_spec_test(Enum.map(head, fn _ -> nil end), spec, :trace) do
      {:ok, _result, _flags, _messages} ->
        :ok

      {:error, errors} ->
        {:error,
         "invalid match spec: " <>
           Enum.map_join(errors, "; ", fn {_kind, text} -> List.to_string(text) end)}
    end
  end

  defp guard_clauses(nil, _bindings), do: {:ok, [[]]}

  defp guard_clauses(guard, bindings) do
    with {:ok, conditions} <- guard_exprs(split_whens(guard), bindings),
         do: {:ok, Enum.map(conditions, &[&1])}
  end

  # `a when b when c` is quoted as `a when (b when c)`: one clause each.
  @doc false
  @spec split_whens(Macro.t()) :: [Macro.t()]
  def split_whens({:when, _, [left, right]}), do: [left | split_whens(right)]
  def split_whens(guard), do: [guard]

  defp extra_guard(nil, _bindings), do: {:ok, []}

  defp extra_guard(guard, bindings) do
    with {:ok, condition} <- guard_expr(guard, bindings), do: {:ok, [condition]}
  end

  ## Argument patterns (match spec head)

  defp fresh_variable(%{count: count}) when count >= @max_variables do
    {:error,
     "too many variables (a pattern has at most #{@max_variables} variables and escaped atoms)"}
  end

  defp fresh_variable(bindings) do
    count = bindings.count + 1
    {:ok, :"$#{count}", %{bindings | count: count}}
  end

  defp add_check(bindings, check), do: %{bindings | checks: [check | bindings.checks]}

  # A literal atom a match spec head reads as a variable or `_`: a fresh variable
  # that a check compares with the atom.
  defp escaped_atom(atom, bindings) do
    with {:ok, var, bindings} <- fresh_variable(bindings),
         do: {:ok, var, add_check(bindings, {:"=:=", var, {:const, atom}})}
  end

  defp pattern({name, _, context} = ast, :literal) when is_name(name) and is_atom(context),
    do: {:error, {:not_literal, ast}}

  # A struct is never a literal value: in a guard, Elixir builds the whole struct
  # with its defaults, which a match spec cannot.
  defp pattern({:%, _, _} = ast, :literal) do
    unsupported(
      "a struct in a guard",
      ast,
      "Elixir would build the whole struct, with its default values; compare fields with x.field, or use is_struct/2"
    )
  end

  defp pattern({:_, _, context}, bindings) when is_atom(context), do: {:ok, :_, bindings}

  defp pattern({name, _, context}, bindings) when is_name(name) and is_atom(context) do
    case bindings.vars do
      %{^name => ms_var} ->
        {:ok, ms_var, bindings}

      %{} ->
        with {:ok, ms_var, bindings} <- fresh_variable(bindings),
             do: {:ok, ms_var, %{bindings | vars: Map.put(bindings.vars, name, ms_var)}}
    end
  end

  defp pattern(atom, :literal) when is_atom(atom), do: {:ok, atom, :literal}

  defp pattern(atom, bindings) when is_atom(atom) do
    if head_variable_atom?(atom),
      do: escaped_atom(atom, bindings),
      else: {:ok, atom, bindings}
  end

  # An atom that did not exist when the text was parsed may exist now (the
  # traced module was loaded since).
  defp pattern(%Name{text: text}, bindings) do
    case Name.existing(text) do
      nil -> {:error, unknown_atom(Name.inspect_atom(:literal, text))}
      atom -> pattern(atom, bindings)
    end
  end

  defp pattern(literal, bindings) when is_number(literal) or is_binary(literal),
    do: {:ok, literal, bindings}

  defp pattern({sign, _, [number]}, bindings) when sign in [:-, :+] and is_number(number) do
    {:ok, if(sign == :-, do: -number, else: number), bindings}
  end

  defp pattern(list, bindings) when is_list(list), do: list_pattern(list, bindings)

  defp pattern({left, right}, bindings) do
    with {:ok, [left, right], bindings} <- patterns([left, right], bindings),
         do: {:ok, {left, right}, bindings}
  end

  defp pattern({:{}, _, elements}, bindings) when is_list(elements) do
    with {:ok, elements, bindings} <- patterns(elements, bindings),
         do: {:ok, List.to_tuple(elements), bindings}
  end

  defp pattern({:%{}, _, [{:|, _, _}]} = ast, _bindings), do: map_update(ast)
  defp pattern({:%, _, [_name, {:%{}, _, [{:|, _, _}]}]} = ast, _bindings), do: map_update(ast)

  defp pattern({:%{}, _, pairs}, bindings) when is_list(pairs), do: map_pattern(pairs, bindings)

  defp pattern({:%, _, [struct_name, {:%{}, _, pairs}]} = ast, bindings) when is_list(pairs) do
    with {:ok, struct_pattern, bindings} <- struct_name_pattern(struct_name, ast, bindings),
         {:ok, map, bindings} <- map_pattern(pairs, bindings) do
      {:ok, Map.put(map, :__struct__, struct_pattern), bindings}
    end
  end

  defp pattern({:__aliases__, _, parts} = ast, bindings) do
    case alias_to_atom(parts) do
      {:ok, atom} when is_atom(atom) -> {:ok, atom, bindings}
      {:ok, %Name{} = name} -> {:error, unknown_alias(name)}
      :error -> unsupported("alias", ast)
    end
  end

  defp pattern({:<<>>, _, _} = ast, bindings) do
    with {:ok, binary} <- literal_binary(ast), do: {:ok, binary, bindings}
  end

  defp pattern({sigil, _, _} = ast, bindings)
       when sigil in [:sigil_c, :sigil_C, :sigil_s, :sigil_S, :sigil_w, :sigil_W] do
    with {:ok, value} <- literal_sigil(ast), do: head_term(value, bindings)
  end

  defp pattern({:^, _, _} = ast, _bindings) do
    unsupported("the pin operator", ast, "write the value itself")
  end

  defp pattern({:=, _, _} = ast, _bindings) do
    unsupported(
      "= inside an argument pattern",
      ast,
      "match spec heads cannot bind a whole term and its parts; use a variable and a guard"
    )
  end

  defp pattern({:<>, _, _} = ast, _bindings) do
    unsupported(
      "<> in an argument pattern",
      ast,
      "match specs cannot match binary prefixes; bind a variable and use binary_part/3 in a guard"
    )
  end

  defp pattern({:@, _, _} = ast, _bindings) do
    unsupported("module attribute", ast, "write the value itself")
  end

  defp pattern({:when, _, _} = ast, _bindings) do
    unsupported("when inside an argument", ast, "put the guard after the closing parenthesis")
  end

  defp pattern(ast, _bindings) do
    unsupported(describe(ast) <> " in an argument pattern", ast)
  end

  # A literal term (from a sigil) in a head: its atoms escaped where needed.
  defp head_term(atom, bindings) when is_atom(atom), do: pattern(atom, bindings)
  defp head_term(list, bindings) when is_list(list), do: terms(list, bindings, &head_term/2)
  defp head_term(term, bindings), do: {:ok, term, bindings}

  # Match spec heads: `:_` and `:"$1"`, `:"$2"`, ... are not atoms but patterns.
  defp head_variable_atom?(:_), do: true

  defp head_variable_atom?(atom) do
    case Atom.to_string(atom) do
      "$" <> digits -> digits != "" and digits =~ ~r/\A[0-9]+\z/
      _ -> false
    end
  end

  defp map_update(ast) do
    unsupported(
      "map update syntax",
      ast,
      "write a map pattern such as %{key: value}"
    )
  end

  defp patterns(asts, bindings), do: terms(asts, bindings, &pattern/2)

  # Compiles each element with `fun`, threading the bindings.
  defp terms(asts, bindings, fun) do
    Enum.reduce_while(asts, {:ok, [], bindings}, fn ast, {:ok, acc, bindings} ->
      case fun.(ast, bindings) do
        {:ok, compiled, bindings} -> {:cont, {:ok, [compiled | acc], bindings}}
        error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, compiled, bindings} -> {:ok, Enum.reverse(compiled), bindings}
      error -> error
    end
  end

  # `[a, b | t]` is quoted as `[a, {:|, _, [b, t]}]`.
  defp list_pattern(list, bindings) do
    case List.last(list) do
      {:|, _, [last, tail]} ->
        with {:ok, elements, bindings} <- patterns(List.replace_at(list, -1, last), bindings),
             {:ok, tail, bindings} <- pattern(tail, bindings) do
          {:ok, elements ++ tail, bindings}
        end

      _ ->
        patterns(list, bindings)
    end
  end

  defp map_pattern(pairs, bindings) do
    Enum.reduce_while(pairs, {:ok, %{}, bindings}, fn pair, {:ok, map, bindings} ->
      case map_pair_pattern(pair, bindings) do
        {:ok, key, value, bindings} -> {:cont, {:ok, Map.put(map, key, value), bindings}}
        error -> {:halt, error}
      end
    end)
  end

  defp map_pair_pattern({key_ast, value_ast}, bindings) do
    with {:ok, key} <- literal_term(key_ast, "map key"),
         :ok <- head_key(key),
         {:ok, value, bindings} <- pattern(value_ast, bindings),
         do: {:ok, key, value, bindings}
  end

  defp map_pair_pattern(ast, _bindings), do: unsupported("map entry", ast)

  # A map key in a head is taken literally, so it cannot hold a variable atom.
  defp head_key(key) do
    case find_head_variable_atom(key) do
      nil ->
        :ok

      atom ->
        {:error,
         "the atom #{inspect(atom)} cannot be a map key in a trace pattern (match specs read it " <>
           "as a variable); bind the map to a variable and use is_map_key/2 or map_get/2 in a guard"}
    end
  end

  defp find_head_variable_atom(atom) when is_atom(atom),
    do: if(head_variable_atom?(atom), do: atom)

  defp find_head_variable_atom([head | tail]),
    do: find_head_variable_atom(head) || find_head_variable_atom(tail)

  defp find_head_variable_atom(tuple) when is_tuple(tuple),
    do: find_head_variable_atom(Tuple.to_list(tuple))

  defp find_head_variable_atom(map) when is_map(map),
    do: find_head_variable_atom(Map.to_list(map))

  defp find_head_variable_atom(_term), do: nil

  # `%_{}` and `%name{}` match a struct of any module: Elixir checks that
  # `__struct__` is an atom, so a check does here too.
  defp struct_name_pattern({name, _, context} = name_ast, _ast, bindings)
       when is_name(name) and is_atom(context) do
    with {:ok, var, bindings} <- any_struct_name(name_ast, bindings),
         do: {:ok, var, add_check(bindings, {:is_atom, var})}
  end

  defp struct_name_pattern({:__aliases__, _, _} = name_ast, _ast, bindings),
    do: pattern(name_ast, bindings)

  defp struct_name_pattern(name_ast, ast, bindings) do
    case literal_term(name_ast, "struct name") do
      {:ok, name} when is_atom(name) -> pattern(name, bindings)
      _ -> unsupported("struct name", ast, "write the struct module, as in %MyApp.User{}")
    end
  end

  defp any_struct_name({:_, _, _}, bindings), do: fresh_variable(bindings)
  defp any_struct_name(var, bindings), do: pattern(var, bindings)

  ## Guards

  defp guard_expr({:_, _, context} = ast, _bindings) when is_atom(context) do
    unsupported("_ in a guard", ast, "_ matches anything and binds nothing")
  end

  defp guard_expr({name, _, context}, bindings) when is_name(name) and is_atom(context) do
    case bindings.vars do
      %{^name => ms_var} ->
        {:ok, ms_var}

      %{} ->
        {:error,
         "variable #{Name.text(name)} is used in the guard but not bound in the argument patterns"}
    end
  end

  defp guard_expr({:when, _, _} = ast, _bindings) do
    unsupported("when inside a guard", ast, "write each alternative as a when clause of its own")
  end

  defp guard_expr({op, _, [left, right]}, bindings) when is_map_key(@comparisons, op) do
    with {:ok, left} <- guard_expr(left, bindings),
         {:ok, right} <- guard_expr(right, bindings),
         do: {:ok, {Map.fetch!(@comparisons, op), left, right}}
  end

  defp guard_expr({:and, _, [left, right]}, bindings),
    do: boolean_op(:andalso, left, right, bindings)

  defp guard_expr({:or, _, [left, right]}, bindings),
    do: boolean_op(:orelse, left, right, bindings)

  defp guard_expr({:not, _, [operand]}, bindings) do
    with {:ok, operand} <- guard_expr(operand, bindings), do: {:ok, {:not, operand}}
  end

  defp guard_expr({op, _, operands} = ast, bindings) when op in [:&&, :||, :!] do
    if Enum.all?(operands, &boolean_expr?/1) do
      case {op, operands} do
        {:&&, [left, right]} -> boolean_op(:andalso, left, right, bindings)
        {:||, [left, right]} -> boolean_op(:orelse, left, right, bindings)
        {:!, [operand]} -> guard_expr({:not, [], [operand]}, bindings)
      end
    else
      unsupported(
        "#{op} on values that may not be booleans",
        ast,
        "guards only accept #{op} between comparisons or type checks; use and/or/not"
      )
    end
  end

  defp guard_expr({:in, _, [left, right]} = ast, bindings) do
    with {:ok, left} <- guard_expr(left, bindings), do: membership(left, right, ast)
  end

  defp guard_expr({:is_nil, _, [operand]}, bindings) do
    with {:ok, operand} <- guard_expr(operand, bindings), do: {:ok, {:"=:=", operand, nil}}
  end

  defp guard_expr({:is_map_key, _, [map, key]}, bindings) do
    guard_call(:is_map_key, [key, map], bindings)
  end

  defp guard_expr({:map_get, _, [map, key]}, bindings) do
    guard_call(:map_get, [key, map], bindings)
  end

  defp guard_expr({:elem, _, [tuple, index]}, bindings) do
    with {:ok, tuple} <- guard_expr(tuple, bindings),
         {:ok, index} <- guard_expr(index, bindings) do
      position = if is_integer(index), do: index + 1, else: {:+, index, 1}
      {:ok, {:element, position, tuple}}
    end
  end

  # Kernel's guards that are macros (is_struct/1,2, is_non_struct_map/1, is_exception/1,2)
  # are expanded as the running Elixir expands them in a guard, then compiled like any
  # guard: they match as they do in that Elixir's code, `:fail` included (a name that is
  # not an atom makes the clause fail). Elixir 1.20's is_exception/1, for one, no longer
  # asks for `__exception__: true`.
  defp guard_expr({name, _, args}, bindings) when is_map_key(@kernel_guard_macros, name) and is_list(args) do
    if length(args) in Map.fetch!(@kernel_guard_macros, name) do
      call = {{:., [], [Kernel, name]}, [], args}

      case Macro.expand_once(call, %{__ENV__ | context: :guard}) do
        ^call -> not_a_guard("Kernel.#{name}/#{length(args)}")
        expanded -> guard_expr(expanded, bindings)
      end
    else
      not_a_guard("Kernel.#{name}/#{length(args)}")
    end
  end

  defp guard_expr({op, _, args}, bindings) when is_map_key(@bitwise_operators, op) do
    guard_expr({Map.fetch!(@bitwise_operators, op), [], args}, bindings)
  end

  defp guard_expr({op, _, [left, right]}, bindings) when op in @arithmetic do
    guard_call(op, [left, right], bindings)
  end

  defp guard_expr({sign, _, [number]}, _bindings) when sign in [:-, :+] and is_number(number) do
    {:ok, if(sign == :-, do: -number, else: number)}
  end

  defp guard_expr({sign, _, [operand]}, bindings) when sign in [:-, :+] do
    guard_call(sign, [operand], bindings)
  end

  # map.field
  defp guard_expr({{:., _, [map, field]}, meta, []}, bindings) when is_name(field) do
    if meta[:no_parens] && not match?({:__aliases__, _, _}, map) && not is_name(map) do
      guard_call(:map_get, [field, map], bindings)
    else
      remote_guard_call(map, field, [], bindings)
    end
  end

  defp guard_expr({{:., _, [module, name]}, _, args}, bindings) when is_name(name) do
    remote_guard_call(module, name, args, bindings)
  end

  defp guard_expr({name, _, args} = ast, bindings) when is_atom(name) and is_list(args) do
    if {name, length(args)} in @same_name_guards do
      guard_call(name, args, bindings)
    else
      literal_or_unsupported(ast, bindings)
    end
  end

  defp guard_expr(ast, bindings), do: literal_or_unsupported(ast, bindings)

  defp remote_guard_call(module_ast, name, args, bindings) do
    arity = length(args)

    case literal_term(module_ast, "module") do
      {:ok, Kernel} ->
        guard_expr({name, [], args}, bindings)

      {:ok, Bitwise} ->
        if is_atom(name) and {name, arity} in @bitwise_functions,
          do: guard_call(name, args, bindings),
          else: not_a_guard(MFA.to_string({Bitwise, name, arity}))

      {:ok, :erlang} ->
        if is_atom(name) and erlang_guard_function?(name, arity) do
          guard_call(name, args, bindings)
        else
          not_a_guard(MFA.to_string({:erlang, name, arity}))
        end

      {:ok, module} when is_atom(module) ->
        not_a_guard(MFA.to_string({module, name, arity}))

      _ ->
        not_a_guard(Quoted.to_string({{:., [], [module_ast, name]}, [], args}))
    end
  end

  defp erlang_guard_function?(name, arity) do
    :erl_internal.guard_bif(name, arity) or :erl_internal.arith_op(name, arity) or
      :erl_internal.comp_op(name, arity) or :erl_internal.bool_op(name, arity) or
      :erl_internal.new_type_test(name, arity) or {name, arity} in [andalso: 2, orelse: 2]
  end

  defp not_a_guard(description) do
    {:error,
     "#{description} cannot be used in a trace guard; only comparisons, and/or/not, " <>
       "is_* checks and guard-safe functions (elem/2, length/1, map_size/1, ...) are allowed"}
  end

  defp guard_call(name, args, bindings) do
    with {:ok, compiled} <- guard_exprs(args, bindings),
         do: {:ok, List.to_tuple([name | compiled])}
  end

  defp boolean_op(op, left, right, bindings) do
    with {:ok, left} <- guard_expr(left, bindings),
         {:ok, right} <- guard_expr(right, bindings),
         do: {:ok, {op, left, right}}
  end

  defp membership(left, right_ast, ast) do
    case right_ast do
      {range, _, bounds} when range in [:.., :..//] and is_list(bounds) ->
        case range_bounds(right_ast) do
          {:ok, first, last, step} ->
            {:ok, in_range(left, first, last, step)}

          :error ->
            unsupported(
              "in with a range that is not of integer literals (and a non-zero integer step)",
              ast
            )
        end

      _ ->
        case literal_term(right_ast, "right side of in") do
          {:ok, []} ->
            {:ok, false}

          {:ok, [_ | _] = values} ->
            if List.improper?(values) do
              unsupported("in with an improper list", ast)
            else
              [first | rest] = Enum.map(values, &{:"=:=", left, guard_literal(&1)})
              {:ok, Enum.reduce(rest, first, &{:orelse, &2, &1})}
            end

          # A list, with something in it that is not a literal: say what.
          {:error, _} = error when is_list(right_ast) ->
            error

          _ ->
            unsupported(
              "in with a right side that is not a literal list or integer range",
              ast,
              "write the values out, as in x in [:a, :b] or x in 1..10"
            )
        end
    end
  end

  # `first..last` (step 1, or -1 when first > last, as Elixir still reads it)
  # and `first..last//step`, of integer literals.
  defp range_bounds({:.., _, [first, last]}) do
    with {:ok, first, last, _} <- range_bounds({:..//, [], [first, last, 1]}),
         do: {:ok, first, last, if(first <= last, do: 1, else: -1)}
  end

  defp range_bounds({:..//, _, [first, last, step]}) do
    case Enum.map([first, last, step], &literal_term(&1, "range bound")) do
      [{:ok, first}, {:ok, last}, {:ok, step}]
      when is_integer(first) and is_integer(last) and is_integer(step) and step != 0 ->
        {:ok, first, last, step}

      _ ->
        :error
    end
  end

  defp range_bounds(_range), do: :error

  # As Kernel.in/2 compiles a literal range in a guard.
  defp in_range(left, first, first, _step), do: {:"=:=", left, first}

  defp in_range(left, first, last, step) do
    bounds =
      if step > 0,
        do: {:andalso, {:>=, left, first}, {:"=<", left, last}},
        else: {:andalso, {:"=<", left, first}, {:>=, left, last}}

    in_bounds = {:andalso, {:is_integer, left}, bounds}

    if step in [1, -1],
      do: in_bounds,
      else: {:andalso, in_bounds, {:"=:=", {:rem, {:-, left, first}, step}, 0}}
  end

  # Literal terms and term constructions inside guards.
  defp literal_or_unsupported(ast, bindings) do
    case literal_term(ast, "guard") do
      {:ok, term} ->
        {:ok, guard_literal(term)}

      {:error, _} = literal_error ->
        case ast do
          {left, right} ->
            with {:ok, left} <- guard_expr(left, bindings),
                 {:ok, right} <- guard_expr(right, bindings),
                 do: {:ok, {{left, right}}}

          {:{}, _, elements} ->
            with {:ok, elements} <- guard_exprs(elements, bindings),
                 do: {:ok, {List.to_tuple(elements)}}

          list when is_list(list) ->
            if match?({:|, _, _}, List.last(list)) do
              unsupported("[head | tail] in a guard", ast, "compare with hd/1 and tl/1 instead")
            else
              guard_exprs(list, bindings)
            end

          {:%{}, _, [{:|, _, _}]} ->
            unsupported("map update syntax", ast, "match specs cannot update a map in a guard")

          {:%{}, _, pairs} when is_list(pairs) ->
            Enum.reduce_while(pairs, {:ok, %{}}, fn pair, {:ok, map} ->
              case guard_map_pair(pair, bindings) do
                {:ok, key, value} -> {:cont, {:ok, Map.put(map, key, value)}}
                error -> {:halt, error}
              end
            end)

          {:^, _, _} ->
            unsupported("the pin operator", ast, "write the value itself")

          {name, _, args} when is_name(name) and is_list(args) and name not in @special_forms ->
            not_a_guard(MFA.to_string({name, length(args)}))

          _ ->
            literal_error
        end
    end
  end

  defp guard_map_pair({key_ast, value_ast}, bindings) do
    with {:ok, key} <- literal_term(key_ast, "map key"),
         {:ok, value} <- guard_expr(value_ast, bindings),
         do: {:ok, key, value}
  end

  defp guard_map_pair(ast, _bindings), do: unsupported("map entry", ast)

  defp guard_exprs(asts, bindings) do
    Enum.reduce_while(asts, {:ok, []}, fn ast, {:ok, acc} ->
      case guard_expr(ast, bindings) do
        {:ok, compiled} -> {:cont, {:ok, [compiled | acc]}}
        error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, compiled} -> {:ok, Enum.reverse(compiled)}
      error -> error
    end
  end

  # Numbers and ordinary atoms stand for themselves in match spec guards;
  # everything else is wrapped so the match spec never reads it as an expression.
  defp guard_literal(term) when is_number(term), do: term

  defp guard_literal(term) when is_atom(term) do
    if special_atom?(term), do: {:const, term}, else: term
  end

  defp guard_literal(term), do: {:const, term}

  defp boolean_expr?(ast) do
    case ast do
      boolean when is_boolean(boolean) ->
        true

      {op, _, args} when op in @boolean_results and is_list(args) ->
        true

      {name, _, args} when is_atom(name) and is_list(args) ->
        {name, length(args)} in @type_checks or name in [:is_struct, :is_exception, :is_map_key]

      _ ->
        false
    end
  end

  ## Literal terms (no variables)

  defp literal_term(ast, where) do
    case pattern(ast, :literal) do
      {:ok, term, :literal} ->
        {:ok, term}

      {:error, {:not_literal, _var}} ->
        {:error, "#{where} must be a literal value, got: #{Quoted.to_string(ast)}"}

      {:error, _} = error ->
        error
    end
  end

  # `<<1, 2>>`, `<<"abc", 0>>`, `<<1::16>>`, `<<"é"::utf8>>`: only literal
  # segments are allowed (match specs cannot match parts of a binary). Built by
  # `Bits`, never evaluated; its size was bounded by `check_sizes/2` already.
  defp literal_binary({:<<>>, _, _} = ast) do
    case Bits.build(ast, :infinity) do
      {:ok, bitstring} -> {:ok, bitstring}
      {:error, _} = error -> error
    end
  end

  ## Sizes

  # What the literals of a pattern build, in all, before any is built: its binaries
  # (`<<0::size(n)>>`, whose size the text alone gives) and the integers its guards
  # shift left by a literal amount (`1 <<< n`, evaluated at each traced call). At most
  # `max_bytes`; the first literal that goes over it is the error. Literals that are
  # not valid are left to the compiler, which names them.
  @doc false
  @spec check_sizes(Macro.t(), pos_integer) :: :ok | {:error, String.t()}
  def check_sizes(ast, max_bytes) do
    case sizes(ast, 0, max_bytes * 8) do
      {:ok, _bits} -> :ok
      {:over, what, total} -> {:error, too_big(what, total, max_bytes)}
    end
  end

  defp sizes({:<<>>, _, segments} = ast, total, max_bits) when is_list(segments) do
    case Bits.size(ast) do
      {:ok, bits} -> add_bits({:binary, ast, bits}, total, max_bits)
      {:error, _} -> sizes(segments, total, max_bits)
    end
  end

  defp sizes({op, _, [left, right]} = ast, total, max_bits) when op in [:<<<, :bsl, :bsr, :>>>] do
    with {:ok, total} <- sizes([left, right], total, max_bits),
         do: shift_bits(op, ast, right, total, max_bits)
  end

  defp sizes({{:., _, [_module, op]}, _, [left, right]} = ast, total, max_bits) when op in [:bsl, :bsr] do
    with {:ok, total} <- sizes([left, right], total, max_bits),
         do: shift_bits(op, ast, right, total, max_bits)
  end

  defp sizes(tuple, total, max_bits) when is_tuple(tuple),
    do: sizes(Tuple.to_list(tuple), total, max_bits)

  defp sizes([head | tail], total, max_bits) do
    with {:ok, total} <- sizes(head, total, max_bits), do: sizes(tail, total, max_bits)
  end

  defp sizes(_leaf, total, _max_bits), do: {:ok, total}

  # A shift left (or right by a negative amount) by a literal: the integer it makes
  # has at least that many bits.
  defp shift_bits(op, ast, right, total, max_bits) do
    amount =
      case right do
        n when is_integer(n) -> n
        {:-, _, [n]} when is_integer(n) -> -n
        {:+, _, [n]} when is_integer(n) -> n
        _ -> 0
      end

    bits = if op in [:<<<, :bsl], do: amount, else: -amount
    if bits > 0, do: add_bits({:shift, ast, bits}, total, max_bits), else: {:ok, total}
  end

  defp add_bits({_kind, _ast, bits} = what, total, max_bits) do
    if total + bits > max_bits, do: {:over, what, total + bits}, else: {:ok, total + bits}
  end

  defp too_big({kind, ast, bits}, total, max_bytes) do
    bytes = div(bits + 7, 8)

    what =
      case kind do
        :binary -> "the binary #{Quoted.to_string(ast)} is #{bytes} bytes"
        :shift -> "the shift #{Quoted.to_string(ast)} makes an integer of #{bytes} bytes or more"
      end

    all = if total > bits, do: ", #{div(total + 7, 8)} bytes with the pattern's other literals", else: ""

    "#{what}#{all}: more than the trace's :max_bytes (#{max_bytes} bytes), the bound on " <>
      "what the literals of a pattern may build (pass a larger max_bytes: to allow it)"
  end

  defp literal_sigil({sigil, _, [{:<<>>, _, [text]}, modifiers]} = ast) when is_binary(text) do
    case {sigil, modifiers} do
      {s, []} when s in [:sigil_s, :sigil_S] ->
        {:ok, text}

      {c, []} when c in [:sigil_c, :sigil_C] ->
        {:ok, String.to_charlist(text)}

      {w, []} when w in [:sigil_w, :sigil_W] ->
        {:ok, String.split(text)}

      {w, ~c"s"} when w in [:sigil_w, :sigil_W] ->
        {:ok, String.split(text)}

      {w, ~c"c"} when w in [:sigil_w, :sigil_W] ->
        {:ok, Enum.map(String.split(text), &String.to_charlist/1)}

      {w, ~c"a"} when w in [:sigil_w, :sigil_W] ->
        words = String.split(text)

        case Enum.find(words, &is_nil(Name.existing(&1))) do
          nil -> {:ok, Enum.map(words, &String.to_existing_atom/1)}
          word -> {:error, unknown_atom(Name.inspect_atom(:literal, word))}
        end

      _ ->
        unsupported("sigil", ast)
    end
  end

  defp literal_sigil(ast), do: unsupported("sigil with interpolation", ast)

  ## Helpers

  # The module an alias names: its atom when the module exists (see
  # `Name.module_name/1`), else a `Name`. `:error` when it is not a plain alias.
  @doc false
  @spec alias_to_atom([term]) :: {:ok, module | Name.t()} | :error
  def alias_to_atom(parts) do
    if parts != [] and Enum.all?(parts, &is_name/1),
      do: {:ok, Name.module_name(parts)},
      else: :error
  end

  defp unknown_alias(name) do
    "unknown module #{Name.inspect_module(name)}: no module or atom of that name exists yet, " <>
      "so no traced term can contain it"
  end

  defp unknown_atom(written) do
    "unknown atom #{written}: no such atom exists yet, so no traced term can contain it " <>
      "(kino_trace never creates atoms from pattern text; if the atom appears once some code " <>
      "has run or loaded, set the pattern again then)"
  end

  # Atoms a match spec reads as variables (`:"$1"`, `:"$_"`) or wildcards (`:_`).
  defp special_atom?(:_), do: true
  defp special_atom?(atom), do: String.starts_with?(Atom.to_string(atom), "$")

  defp describe({{:., _, [_, name]}, _, args}) when is_name(name) and is_list(args),
    do: "the function call"

  defp describe({:.., _, _}), do: "a range"
  defp describe({:&, _, _}), do: "a function capture"
  defp describe({:fn, _, _}), do: "an anonymous function"

  defp describe({name, _, args}) when is_name(name) and is_list(args),
    do: "the call #{MFA.to_string({name, length(args)})}"

  defp describe(_), do: "the expression"

  defp unsupported(what, ast, hint \\ nil) do
    message = "#{what} is not supported in trace patterns: #{Quoted.to_string(ast)}"
    {:error, if(hint, do: message <> " (#{hint})", else: message)}
  end
end
