defmodule KinoTrace.Pattern.MatchSpec.Head do
  @moduledoc false
  # Compiles quoted argument patterns into a match spec head.
  #
  # Variables bind `:"$1"`, `:"$2"`, ... in order of first appearance in the
  # arguments; a variable seen again reuses its `$N`, so the match spec only matches
  # when both places hold equal terms. Atoms a match spec head reads as variables
  # (`:_`, `:"$1"`, ...) become a fresh variable and a check that compares it with
  # the atom; a struct name that must be an atom is a check too. The same compiler,
  # with `:literal` for bindings, reads literal terms (`literal_term/2`), for the
  # guard compiler and for map keys and struct names.

  import KinoTrace.Base.Name, only: [is_name: 1]
  import KinoTrace.Pattern.MatchSpec.Literal, only: [unsupported: 2, unsupported: 3]
  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.Quoted
  alias KinoTrace.Pattern.MatchSpec.Literal
  alias KinoTrace.Base.MFA

  # Match variables of one pattern, at most (each is an atom `:"$N"`, shared by
  # every pattern; the bound keeps their number bounded).
  @max_variables 1_000

  # `vars`: each variable's match variable; `count`: match variables so far;
  # `checks`: conditions the head needs (reversed), for what a head cannot say
  # itself (an atom a match spec would read as a variable, a struct name that
  # must be an atom). With `:literal` instead, only literal terms are accepted.
  @no_bindings %{vars: %{}, count: 0, checks: []}

  @doc false
  # The head of argument patterns `args`, the checks it needs (in its clauses'
  # guards, before any other), and each variable's match variable (what a guard
  # may use).
  @spec compile([Macro.t()]) :: {:ok, list, [tuple], %{term => atom}} | {:error, String.t()}
  def compile(args) when is_list(args) do
    with {:ok, head, bindings} <- patterns(args, @no_bindings),
         do: {:ok, head, Enum.reverse(bindings.checks), bindings.vars}
  end

  @doc false
  # The literal term `ast` stands for (no variables); `where` names the place in
  # the error when it is not one.
  @spec literal_term(Macro.t(), String.t()) :: {:ok, term} | {:error, String.t()}
  def literal_term(ast, where) do
    case pattern(ast, :literal) do
      {:ok, term, :literal} ->
        {:ok, term}

      {:error, {:not_literal, _var}} ->
        {:error, "#{where} must be a literal value, got: #{Quoted.to_string(ast)}"}

      {:error, _} = error ->
        error
    end
  end

  ## Argument patterns

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
      nil -> {:error, Literal.unknown_atom(Name.inspect_atom(:literal, text))}
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
    case Literal.alias_to_atom(parts) do
      {:ok, atom} when is_atom(atom) -> {:ok, atom, bindings}
      {:ok, %Name{} = name} -> {:error, Literal.unknown_alias(name)}
      :error -> unsupported("alias", ast)
    end
  end

  defp pattern({:<<>>, _, _} = ast, bindings) do
    with {:ok, binary} <- Literal.binary(ast), do: {:ok, binary, bindings}
  end

  defp pattern({sigil, _, _} = ast, bindings)
       when sigil in [:sigil_c, :sigil_C, :sigil_s, :sigil_S, :sigil_w, :sigil_W] do
    with {:ok, value} <- Literal.sigil(ast), do: head_term(value, bindings)
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

  defp describe({{:., _, [_, name]}, _, args}) when is_name(name) and is_list(args),
    do: "the function call"

  defp describe({:.., _, _}), do: "a range"
  defp describe({:&, _, _}), do: "a function capture"
  defp describe({:fn, _, _}), do: "an anonymous function"

  defp describe({name, _, args}) when is_name(name) and is_list(args),
    do: "the call #{MFA.to_string({name, length(args)})}"

  defp describe(_), do: "the expression"
end
