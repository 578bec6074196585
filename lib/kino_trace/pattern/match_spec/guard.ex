defmodule KinoTrace.Pattern.MatchSpec.Guard do
  @moduledoc false
  # Compiles a quoted Elixir guard into a match spec guard expression, over the
  # match variables the head bound (`vars`: each variable's `$N`). Guards may only
  # use those variables. Kernel's and Bitwise's guards compile to the match spec's
  # functions; `:"$1"`, `:"$_"`, `:"$$"` and other atoms a match spec reads as
  # variables are `{:const, atom}`.

  import KinoTrace.Base.Name, only: [is_name: 1]
  import KinoTrace.Pattern.MatchSpec.Literal, only: [unsupported: 2, unsupported: 3]
  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.Quoted
  alias KinoTrace.Pattern.MatchSpec.Head
  alias KinoTrace.Base.MFA

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

  @doc false
  # The match spec expression of one guard expression.
  @spec expr(Macro.t(), %{term => atom}) :: {:ok, term} | {:error, String.t()}
  def expr({:_, _, context} = ast, _vars) when is_atom(context) do
    unsupported("_ in a guard", ast, "_ matches anything and binds nothing")
  end

  def expr({name, _, context}, vars) when is_name(name) and is_atom(context) do
    case vars do
      %{^name => ms_var} ->
        {:ok, ms_var}

      %{} ->
        {:error,
         "variable #{Name.text(name)} is used in the guard but not bound in the argument patterns"}
    end
  end

  def expr({:when, _, _} = ast, _vars) do
    unsupported("when inside a guard", ast, "write each alternative as a when clause of its own")
  end

  def expr({op, _, [left, right]}, vars) when is_map_key(@comparisons, op) do
    with {:ok, left} <- expr(left, vars),
         {:ok, right} <- expr(right, vars),
         do: {:ok, {Map.fetch!(@comparisons, op), left, right}}
  end

  def expr({:and, _, [left, right]}, vars),
    do: boolean_op(:andalso, left, right, vars)

  def expr({:or, _, [left, right]}, vars),
    do: boolean_op(:orelse, left, right, vars)

  def expr({:not, _, [operand]}, vars) do
    with {:ok, operand} <- expr(operand, vars), do: {:ok, {:not, operand}}
  end

  def expr({op, _, operands} = ast, vars) when op in [:&&, :||, :!] do
    if Enum.all?(operands, &boolean_expr?/1) do
      case {op, operands} do
        {:&&, [left, right]} -> boolean_op(:andalso, left, right, vars)
        {:||, [left, right]} -> boolean_op(:orelse, left, right, vars)
        {:!, [operand]} -> expr({:not, [], [operand]}, vars)
      end
    else
      unsupported(
        "#{op} on values that may not be booleans",
        ast,
        "guards only accept #{op} between comparisons or type checks; use and/or/not"
      )
    end
  end

  def expr({:in, _, [left, right]} = ast, vars) do
    with {:ok, left} <- expr(left, vars), do: membership(left, right, ast)
  end

  def expr({:is_nil, _, [operand]}, vars) do
    with {:ok, operand} <- expr(operand, vars), do: {:ok, {:"=:=", operand, nil}}
  end

  def expr({:is_map_key, _, [map, key]}, vars) do
    guard_call(:is_map_key, [key, map], vars)
  end

  def expr({:map_get, _, [map, key]}, vars) do
    guard_call(:map_get, [key, map], vars)
  end

  def expr({:elem, _, [tuple, index]}, vars) do
    with {:ok, tuple} <- expr(tuple, vars),
         {:ok, index} <- expr(index, vars) do
      position = if is_integer(index), do: index + 1, else: {:+, index, 1}
      {:ok, {:element, position, tuple}}
    end
  end

  # Kernel's guards that are macros (is_struct/1,2, is_non_struct_map/1, is_exception/1,2)
  # are expanded as the running Elixir expands them in a guard, then compiled like any
  # guard: they match as they do in that Elixir's code, `:fail` included (a name that is
  # not an atom makes the clause fail). Elixir 1.20's is_exception/1, for one, no longer
  # asks for `__exception__: true`.
  def expr({name, _, args}, vars) when is_map_key(@kernel_guard_macros, name) and is_list(args) do
    if length(args) in Map.fetch!(@kernel_guard_macros, name) do
      call = {{:., [], [Kernel, name]}, [], args}

      case Macro.expand_once(call, %{__ENV__ | context: :guard}) do
        ^call -> not_a_guard("Kernel.#{name}/#{length(args)}")
        expanded -> expr(expanded, vars)
      end
    else
      not_a_guard("Kernel.#{name}/#{length(args)}")
    end
  end

  def expr({op, _, args}, vars) when is_map_key(@bitwise_operators, op) do
    expr({Map.fetch!(@bitwise_operators, op), [], args}, vars)
  end

  def expr({op, _, [left, right]}, vars) when op in @arithmetic do
    guard_call(op, [left, right], vars)
  end

  def expr({sign, _, [number]}, _vars) when sign in [:-, :+] and is_number(number) do
    {:ok, if(sign == :-, do: -number, else: number)}
  end

  def expr({sign, _, [operand]}, vars) when sign in [:-, :+] do
    guard_call(sign, [operand], vars)
  end

  # map.field
  def expr({{:., _, [map, field]}, meta, []}, vars) when is_name(field) do
    if meta[:no_parens] && not match?({:__aliases__, _, _}, map) && not is_name(map) do
      guard_call(:map_get, [field, map], vars)
    else
      remote_guard_call(map, field, [], vars)
    end
  end

  def expr({{:., _, [module, name]}, _, args}, vars) when is_name(name) do
    remote_guard_call(module, name, args, vars)
  end

  def expr({name, _, args} = ast, vars) when is_atom(name) and is_list(args) do
    if {name, length(args)} in @same_name_guards do
      guard_call(name, args, vars)
    else
      literal_or_unsupported(ast, vars)
    end
  end

  def expr(ast, vars), do: literal_or_unsupported(ast, vars)

  defp remote_guard_call(module_ast, name, args, vars) do
    arity = length(args)

    case Head.literal_term(module_ast, "module") do
      {:ok, Kernel} ->
        expr({name, [], args}, vars)

      {:ok, Bitwise} ->
        if is_atom(name) and {name, arity} in @bitwise_functions,
          do: guard_call(name, args, vars),
          else: not_a_guard(MFA.to_string({Bitwise, name, arity}))

      {:ok, :erlang} ->
        if is_atom(name) and erlang_guard_function?(name, arity) do
          guard_call(name, args, vars)
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

  defp guard_call(name, args, vars) do
    with {:ok, compiled} <- exprs(args, vars),
         do: {:ok, List.to_tuple([name | compiled])}
  end

  defp boolean_op(op, left, right, vars) do
    with {:ok, left} <- expr(left, vars),
         {:ok, right} <- expr(right, vars),
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
        case Head.literal_term(right_ast, "right side of in") do
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
    case Enum.map([first, last, step], &Head.literal_term(&1, "range bound")) do
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
  defp literal_or_unsupported(ast, vars) do
    case Head.literal_term(ast, "guard") do
      {:ok, term} ->
        {:ok, guard_literal(term)}

      {:error, _} = literal_error ->
        case ast do
          {left, right} ->
            with {:ok, left} <- expr(left, vars),
                 {:ok, right} <- expr(right, vars),
                 do: {:ok, {{left, right}}}

          {:{}, _, elements} ->
            with {:ok, elements} <- exprs(elements, vars),
                 do: {:ok, {List.to_tuple(elements)}}

          list when is_list(list) ->
            if match?({:|, _, _}, List.last(list)) do
              unsupported("[head | tail] in a guard", ast, "compare with hd/1 and tl/1 instead")
            else
              exprs(list, vars)
            end

          {:%{}, _, [{:|, _, _}]} ->
            unsupported("map update syntax", ast, "match specs cannot update a map in a guard")

          {:%{}, _, pairs} when is_list(pairs) ->
            Enum.reduce_while(pairs, {:ok, %{}}, fn pair, {:ok, map} ->
              case guard_map_pair(pair, vars) do
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

  defp guard_map_pair({key_ast, value_ast}, vars) do
    with {:ok, key} <- Head.literal_term(key_ast, "map key"),
         {:ok, value} <- expr(value_ast, vars),
         do: {:ok, key, value}
  end

  defp guard_map_pair(ast, _vars), do: unsupported("map entry", ast)

  @doc false
  # The match spec expressions of guard expressions, in order; the first error if any.
  @spec exprs([Macro.t()], %{term => atom}) :: {:ok, [term]} | {:error, String.t()}
  def exprs(asts, vars) do
    Enum.reduce_while(asts, {:ok, []}, fn ast, {:ok, acc} ->
      case expr(ast, vars) do
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

  # Atoms a match spec reads as variables (`:"$1"`, `:"$_"`) or wildcards (`:_`).
  defp special_atom?(:_), do: true
  defp special_atom?(atom), do: String.starts_with?(Atom.to_string(atom), "$")
end
