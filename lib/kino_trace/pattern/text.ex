defmodule KinoTrace.Pattern.Text do
  @moduledoc false
  # Reads patterns written as text (`"Enum.map/2"`, `"Mod.fun(a, _) when a > 1"`) for
  # `KinoTrace.Pattern.parse/2`: the text is quoted without creating atoms
  # (`KinoTrace.Pattern.Quoted`), its target read from the quoted form and its
  # argument patterns and guard compiled to a match spec
  # (`KinoTrace.Pattern.MatchSpec`). What it returns are the fields of a
  # `KinoTrace.Pattern`, which that module makes a struct of (so this module does
  # not depend on it). Also: which names a text's patterns need as atoms, for
  # patterns checked on another node (`import_names/2`).

  import KinoTrace.Base.Name, only: [is_name: 1]
  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.{MatchSpec, Quoted}
  alias KinoTrace.Base.Lookup
  alias KinoTrace.Base.MFA

  # Texts that trace every function.
  @everything ["*", "_", "*.*", "_._/_"]

  @doc false
  # Reads a pattern written as text: the fields of its `KinoTrace.Pattern`, or
  # `{:error, message}` naming what is wrong. Never raises (see `MatchSpec.safely/2`).
  @spec parse(String.t(), keyword) :: {:ok, map} | {:error, String.t()}
  def parse(source, opts) do
    text = String.trim(source)

    cond do
      text == "" ->
        {:error, "empty pattern"}

      text in @everything ->
        {:ok, %{source: source, module: :_, function: :_, arity: :_}}

      true ->
        MatchSpec.safely(inspect(source), fn ->
          with {:ok, ast} <- text |> normalize_wildcards() |> Quoted.parse(),
               do: from_ast(ast, source, opts)
        end)
    end
  end

  # `Mod.fun/*` -> `Mod.fun/_`, `Mod.*` -> `Mod`, which Elixir can parse. A
  # trailing `# comment` may follow.
  defp normalize_wildcards(text) do
    text
    |> String.replace(~r{/\*(\s*(#.*)?)$}, "/_\\1")
    |> String.replace(~r{\.\*(\s*(#.*)?)$}, "\\1")
  end

  # `&Mod.fun/2` written as text
  defp from_ast({:&, _, [capture]}, source, opts), do: from_ast(capture, source, opts)

  defp from_ast({:/, _, [{{:., _, [module_ast, function]}, meta, []}, arity_ast]}, source, _opts)
       when is_name(function) do
    with true <- meta[:no_parens] == true || {:error, expected(source)},
         {:ok, module} <- module_from_ast(module_ast, source),
         {:ok, arity} <- arity_from_ast(arity_ast) do
      target(source, module, function, arity)
    end
  end

  defp from_ast({:when, _, [{:/, _, _}, _guard]}, _source, _opts) do
    {:error,
     "a guard needs argument patterns to refer to: write Mod.fun(a, b) when ... instead of Mod.fun/2 when ..."}
  end

  defp from_ast({:when, _, [call, guard]} = ast, source, opts) do
    case call do
      {{:., _, [_module, function]}, meta, args} when is_name(function) and is_list(args) ->
        if meta[:no_parens],
          do:
            {:error, "a guard needs argument patterns to refer to: write Mod.fun(a, b) when ..."},
          else: call_with_arguments(call, guard, ast, source, opts)

      _ ->
        {:error, expected(source)}
    end
  end

  defp from_ast({{:., _, [module_ast, function]}, meta, args} = call, source, opts)
       when is_name(function) and is_list(args) do
    if meta[:no_parens] && args == [] do
      with {:ok, module} <- module_from_ast(module_ast, source),
           do: target(source, module, function, :_)
    else
      call_with_arguments(call, nil, call, source, opts)
    end
  end

  defp from_ast(module_ast, source, _opts) do
    with {:ok, module} <- module_from_ast(module_ast, source),
         do: target(source, module, :_, :_)
  end

  defp call_with_arguments({{:., _, [module_ast, function]}, _, args}, guard, ast, source, opts) do
    with {:ok, module} <- module_from_ast(module_ast, source),
         :ok <- load(module, [args, guard]),
         {:ok, head, clauses} <- MatchSpec.compile(args, guard, nil, opts) do
      guards = if clauses == [[]], do: [], else: clauses

      if guards == [] and Enum.all?(head, &(&1 == :_)) do
        {:ok, %{source: source, module: module, function: function, arity: length(args)}}
      else
        {:ok,
         %{
           source: source,
           module: module,
           function: function,
           arity: length(args),
           head: head,
           guards: guards,
           call_text: call_text(ast)
         }}
      end
    end
  end

  # Names in the arguments that are no atoms yet may be atoms of the module's code: they
  # exist once it is loaded. Only then is the code server asked: it looks for a module
  # that is not loaded along the whole code path, every time, after whatever other code
  # loading is waiting (in OTP 29's full suite 2 000 patterns on one missing module took
  # over a minute).
  defp load(module, arguments) when is_atom(module) do
    if not :erlang.module_loaded(module) and Quoted.names(arguments) != [],
      do: Code.ensure_loaded(module)

    :ok
  end

  defp load(%Name{}, _arguments), do: :ok

  # "(list, _) when length(list) > 100"
  defp call_text(ast) do
    text = Quoted.to_string(ast)
    [_, rest] = String.split(text, "(", parts: 2)
    "(" <> rest
  end

  # A module that does not exist stays a `Name`: the pre-flight check reports it.
  defp module_from_ast(atom, _source) when is_atom(atom), do: {:ok, atom}
  defp module_from_ast(%Name{text: text}, _source), do: {:ok, Name.module_name(text)}

  defp module_from_ast({:__aliases__, _, parts} = ast, _source) do
    case MatchSpec.Literal.alias_to_atom(parts) do
      {:ok, module} -> {:ok, module}
      :error -> {:error, "cannot use #{Quoted.to_string(ast)} as a module name"}
    end
  end

  defp module_from_ast({name, _, context}, _source) when is_name(name) and is_atom(context) do
    name = Name.text(name)
    alias = Macro.camelize(name)

    {:error,
     "#{name} is not a module name; write :#{name} for an Erlang module or #{alias} for an Elixir alias"}
  end

  defp module_from_ast(_ast, source), do: {:error, expected(source)}

  defp arity_from_ast(arity) when is_integer(arity) and arity >= 0, do: {:ok, arity}
  defp arity_from_ast({:_, _, context}) when is_atom(context), do: {:ok, :_}

  defp arity_from_ast(ast),
    do: {:error, "the arity must be a non-negative integer or *, got: #{Quoted.to_string(ast)}"}

  defp expected(source) do
    "expected Mod, Mod.fun, Mod.fun/arity or Mod.fun(args) when guard, got: #{inspect(source)}"
  end

  @doc false
  # The fields of a pattern that names a target only (any arguments), once checked
  # that its wildcards nest: no function without its module, no arity without its
  # function.
  @spec target(term, module | :_ | Name.t(), atom | :_ | Name.t(), non_neg_integer | :_) ::
          {:ok, map} | {:error, String.t()}
  def target(source, module, function, arity) do
    cond do
      module == :_ and function != :_ ->
        {:error,
         "#{inspect(source)}: when the module is :_ the function and arity must be :_ too"}

      function == :_ and arity != :_ ->
        {:error, "#{inspect(source)}: when the function is :_ the arity must be :_ too"}

      true ->
        {:ok, %{source: source, module: module, function: function, arity: arity}}
    end
  end

  @doc false
  # For patterns checked on another node: the names in argument patterns and guards
  # that are atoms there, once the modules the texts name are loaded there (the atoms
  # of their code count, as here), become atoms here, so they parse as they would
  # there. That node's atom table bounds what this adds to this one's.
  @spec import_names([term], Lookup.t()) :: :ok
  def import_names(inputs, lookup) do
    quoted = for text <- inputs, is_binary(text), {:ok, ast} <- [quoted(text)], do: ast

    with [_ | _] <- quoted do
      modules = for ast <- quoted, text = target_module_text(ast), do: text
      modules = if modules == [], do: %{}, else: Lookup.module_atoms(lookup, modules)
      if map_size(modules) > 0, do: Lookup.ensure_loaded(lookup, Map.values(modules))

      case for(ast <- quoted, name <- Quoted.names(arguments(ast)), do: name.text) do
        [] -> :ok
        texts -> Lookup.existing_atoms(lookup, texts)
      end
    end

    :ok
  end

  defp quoted(text) do
    text = String.trim(text)

    if text in @everything or text == "",
      do: :error,
      else: text |> normalize_wildcards() |> Quoted.parse()
  end

  # The argument patterns and guards of a quoted pattern (the forms of from_ast/3):
  # where literal atoms are. (The function's name is resolved with the module's
  # functions, by the pre-flight check.)
  defp arguments({:when, _, [call, guard]}), do: [arguments(call), guard]

  defp arguments({{:., _, [_module, function]}, _, args})
       when is_name(function) and is_list(args),
       do: args

  defp arguments(_ast), do: []

  # The full atom text of the module a quoted pattern names (the forms of from_ast/3),
  # or nil.
  defp target_module_text({:&, _, [capture]}), do: target_module_text(capture)
  defp target_module_text({:/, _, [{{:., _, [module, _]}, _, []}, _]}), do: module_text(module)
  defp target_module_text({:when, _, [call, _]}), do: target_module_text(call)

  defp target_module_text({{:., _, [module, function]}, _, args})
       when is_name(function) and is_list(args),
       do: module_text(module)

  defp target_module_text(module), do: module_text(module)

  defp module_text({:__aliases__, _, parts}) do
    if Enum.all?(parts, &is_name/1), do: Name.module_text(parts)
  end

  defp module_text(name) when is_name(name), do: Name.text(name)
  defp module_text(_other), do: nil

  @doc "The canonical text of a pattern (`KinoTrace.Pattern.to_string/1`), taken by its fields."
  @spec of(map()) :: String.t()
  def of(%{module: :_}), do: "*"
  def of(%{module: module, function: :_}), do: Name.inspect_module(module)

  def of(%{module: module, function: function, arity: arity, call_text: call_text}) do
    if call_text,
      do: MFA.call(module, function) <> call_text,
      else: MFA.to_string({module, function, arity})
  end
end
