defmodule KinoTrace.Assertions.CallPattern do
  @moduledoc false
  # A call pattern such as `MyApp.Cache.fetch(:users, id) when id > 0`, compiled at
  # macro-expansion time into a match function.
  #
  # The assertion macros in `Kino.Trace.Assertions` turn the pattern written in a test into
  # a `%CallPattern{}`: the module (aliases expanded in the caller), the function name, the
  # arity, and a function that tells whether an argument list matches. The arguments are
  # compiled into an ordinary `case` clause (with the guard, if any) inside an anonymous
  # function, so
  #
  #   * pins (`^id`) read the test's variables,
  #   * variables in the pattern are local to the assertion: they bind nothing in the
  #     test and cause no "unused variable" warnings,
  #   * the guard is a real guard, checked by the compiler.
  #
  # Two forms are accepted:
  #
  #   * `Mod.fun(arg_pattern, ...)`, optionally followed by `when guard`
  #   * `&Mod.fun/arity` (or `Mod.fun/arity`), matching any arguments

  @enforce_keys [:module, :function, :arity, :source, :matcher]
  defstruct [:module, :function, :arity, :source, :matcher, :args_ast, arg_matchers: [], pins: []]

  @type t :: %__MODULE__{
          module: module(),
          function: atom(),
          arity: non_neg_integer(),
          source: String.t(),
          matcher: (list() -> boolean()),
          args_ast: Macro.t() | nil,
          arg_matchers: [(term() -> boolean()) | nil],
          pins: [{{atom(), atom() | integer()}, term()}]
        }

  @doc """
  Compiles a call pattern into code that builds a `%CallPattern{}` at run time.

  Raises `CompileError` (pointing at the caller's line) when the expression is not a
  remote call pattern.

  ## Examples

      iex> require KinoTrace.Assertions.CallPattern, as: CallPattern
      iex> pattern = CallPattern.compile(Map.get(%{}, key) when is_atom(key))
      iex> {pattern.module, pattern.function, pattern.arity}
      {Map, :get, 2}
      iex> CallPattern.match?(pattern, [%{}, :a])
      true
      iex> CallPattern.match?(pattern, [%{}, "a"])
      false
      iex> pattern.source
      "Map.get(%{}, key) when is_atom(key)"
  """
  defmacro compile(expr), do: quoted(expr, __CALLER__)

  @doc """
  Returns the quoted code building the `%CallPattern{}` for `expr` in the caller `env`.

  Used by the assertion macros; `what` names the macro in error messages.
  """
  @spec quoted(Macro.t(), Macro.Env.t(), String.t()) :: Macro.t()
  def quoted(expr, env, what \\ "a call pattern") do
    case parse!(expr, env, what) do
      %{args: nil} = parsed -> any_args(parsed)
      parsed -> with_args(parsed, env)
    end
  end

  @doc """
  Checks the shape of a call pattern at compile time and takes it apart:
  `%{module: m, function: f, arity: n, args: [arg_pattern] | nil, guard: guard | nil}`
  (`args` is `nil` for `&Mod.fun/arity`).

  Raises `CompileError` (pointing at the caller's line) when the expression is not a
  remote call pattern.
  """
  @spec parse!(Macro.t(), Macro.Env.t(), String.t()) :: %{
          module: module(),
          function: atom(),
          arity: non_neg_integer(),
          args: [Macro.t()] | nil,
          guard: Macro.t() | nil
        }
  def parse!(expr, env, what \\ "a call pattern") do
    {call, guard} = split_guard(expr)

    case unwrap_capture(call) do
      {:/, _, [{{:., _, [mod_ast, fun]}, _, []}, arity]}
      when is_atom(fun) and is_integer(arity) and arity >= 0 ->
        if guard,
          do:
            compile_error!(
              env,
              "#{what}: &Mod.fun/arity cannot take a guard, got: #{Macro.to_string(expr)}"
            )

        module = expand_module!(mod_ast, env, expr, what)
        %{module: module, function: fun, arity: arity, args: nil, guard: nil}

      {{:., _, [mod_ast, fun]}, meta, args} when is_atom(fun) and is_list(args) ->
        if meta[:no_parens] do
          compile_error!(
            env,
            "#{what}: a call pattern needs parentheses with the argument patterns " <>
              "(use _ to match any), or write &Mod.fun/arity, got: " <>
              String.trim_trailing(Macro.to_string(expr), "()")
          )
        end

        module = expand_module!(mod_ast, env, expr, what)
        %{module: module, function: fun, arity: length(args), args: args, guard: guard}

      _ ->
        compile_error!(
          env,
          "#{what} must be a remote call pattern such as MyApp.Cache.fetch(:users, _) " <>
            "(optionally with `when` guards) or &MyApp.Cache.fetch/2, got: #{Macro.to_string(expr)}"
        )
    end
  end

  @doc "Returns true when the argument list `args` matches the pattern."
  @spec match?(t(), list()) :: boolean()
  def match?(%__MODULE__{arity: arity, matcher: matcher}, args) when is_list(args) do
    length(args) == arity and matcher.(args)
  end

  @doc """
  How many arguments of `args` match their own pattern, ignoring the guard and any
  variable shared between arguments. Used to pick the closest call in failure messages.
  """
  @spec score(t(), list()) :: non_neg_integer()
  def score(%__MODULE__{arg_matchers: matchers}, args) when is_list(args) do
    matchers
    |> Enum.zip(args)
    |> Enum.count(fn {matcher, arg} -> matcher != nil and matcher.(arg) end)
  end

  @doc "The `{module, function, arity}` the pattern is about."
  @spec mfa(t()) :: mfa()
  def mfa(%__MODULE__{module: m, function: f, arity: a}), do: {m, f, a}

  ## Compilation

  defp unwrap_capture({:&, _, [{:/, _, _} = fun_arity]}), do: fun_arity
  defp unwrap_capture(call), do: call

  defp split_guard({:when, _, [call, guard]}), do: {call, guard}
  defp split_guard(expr), do: {expr, nil}

  defp any_args(%{module: module, function: fun, arity: arity}) do
    source = KinoTrace.Base.MFA.to_string({module, fun, arity})

    quote do
      %KinoTrace.Assertions.CallPattern{
        module: unquote(module),
        function: unquote(fun),
        arity: unquote(arity),
        source: unquote(source),
        matcher: fn _args -> true end,
        args_ast: nil,
        arg_matchers: unquote(List.duplicate(nil, arity)),
        pins: []
      }
    end
  end

  defp with_args(%{module: module, function: fun, args: args, guard: guard}, env) do
    display_args = Enum.map(args, &expand_for_display(&1, env))
    display_guard = guard && expand_for_display(guard, env)
    display_call = {{:., [], [module, fun]}, [], display_args}
    source = Macro.to_string(with_guard(display_call, display_guard))
    args_ast = with_guard(display_args, display_guard)

    quote do
      %KinoTrace.Assertions.CallPattern{
        module: unquote(module),
        function: unquote(fun),
        arity: unquote(length(args)),
        source: unquote(source),
        matcher: unquote(matcher(args, guard)),
        args_ast: unquote(Macro.escape(args_ast)),
        arg_matchers: unquote(Enum.map(args, &arg_matcher/1)),
        pins: unquote(pins(args ++ List.wrap(guard)))
      }
    end
  end

  defp with_guard(ast, nil), do: ast
  defp with_guard(ast, guard), do: {:when, [], [ast, guard]}

  @doc false
  # A `fn value -> boolean end` matching `value` against `pattern` (and `guard`).
  @spec matcher(Macro.t(), Macro.t() | nil) :: Macro.t()
  def matcher(pattern, guard) do
    value = Macro.unique_var(:value, __MODULE__)

    quote do
      fn unquote(value) -> unquote(match_expr(value, pattern, guard, true)) end
    end
  end

  @doc false
  # An expression: `then` (which may use the pattern's variables) when `value` matches
  # `pattern` and `guard`, else false.
  @spec match_expr(Macro.t(), Macro.t(), Macro.t() | nil, Macro.t()) :: Macro.t()
  def match_expr(value, pattern, guard, then) do
    head = with_guard(pattern, guard)

    used =
      pattern
      |> vars()
      |> Enum.map(fn {name, meta, ctx} -> {name, [generated: true] ++ meta, ctx} end)

    quote generated: true do
      case unquote(value) do
        unquote(head) ->
          _ = unquote(used)
          unquote(then)

        _ ->
          false
      end
    end
  end

  # Per-argument matcher (no guard). Arguments whose pattern uses a binary size or a
  # variable that may come from elsewhere in the pattern get no matcher.
  defp arg_matcher(arg) do
    if has_binary_spec?(arg), do: nil, else: matcher(arg, nil)
  end

  defp has_binary_spec?(ast) do
    {_, found} =
      Macro.prewalk(ast, false, fn
        {:"::", _, _} = node, _ -> {node, true}
        node, acc -> {node, acc}
      end)

    found
  end

  # Variables bound by a pattern (not pinned, not underscored).
  @doc false
  @spec vars(Macro.t()) :: [Macro.t()]
  def vars(pattern) do
    {_, acc} =
      Macro.prewalk(pattern, [], fn
        {:^, _, _}, acc ->
          {:ok, acc}

        {:"::", _, [left, _type_and_size]}, acc ->
          {{:__block__, [], [left]}, acc}

        {:@, _, _}, acc ->
          {:ok, acc}

        {name, meta, ctx} = var, acc when is_atom(name) and is_atom(ctx) ->
          if String.starts_with?(Atom.to_string(name), "_") or meta[:generated],
            do: {var, acc},
            else: {var, [{name, meta, ctx} | acc]}

        node, acc ->
          {node, acc}
      end)

    acc |> Enum.reverse() |> Enum.uniq_by(fn {name, _, ctx} -> {name, ctx} end)
  end

  # Code building `[{{name, context}, value}]` for every pinned variable, so failure
  # messages can show the pinned values (and ExUnit's diff can use them).
  @doc false
  # Pins of variables in `local` (bound by an enclosing pattern, `{name, context}`) are left out.
  @spec pins(Macro.t(), [{atom(), atom()}]) :: Macro.t()
  def pins(ast, local \\ []) do
    {_, acc} =
      Macro.prewalk(ast, [], fn
        {:^, _, [{name, meta, ctx} = var]}, acc when is_atom(name) and is_atom(ctx) ->
          if {name, ctx} in local,
            do: {:ok, acc},
            else: {:ok, [{{name, meta[:counter] || ctx}, var} | acc]}

        node, acc ->
          {node, acc}
      end)

    acc = acc |> Enum.reverse() |> Enum.uniq_by(&elem(&1, 0))

    for {{name, ctx}, var} <- acc do
      quote do: {{unquote(name), unquote(ctx)}, unquote(var)}
    end
  end

  defp expand_module!(mod_ast, env, expr, what) do
    case Macro.expand(mod_ast, env) do
      module when is_atom(module) ->
        module

      _ ->
        compile_error!(
          env,
          "#{what}: the module must be an alias or an atom (such as MyApp.Cache or :ets), got: " <>
            Macro.to_string(expr)
        )
    end
  end

  # For messages and diffs: aliases and module attributes written in the pattern are shown
  # as what they stand for.
  @doc false
  @spec expand_for_display(Macro.t(), Macro.Env.t()) :: Macro.t()
  def expand_for_display(ast, env) do
    Macro.prewalk(ast, fn
      {:__aliases__, _, _} = alias ->
        Macro.expand(alias, env)

      {:__MODULE__, _, ctx} = node when is_atom(ctx) ->
        Macro.expand(node, env)

      {:@, _, [{name, _, ctx}]} = attr when is_atom(name) and is_atom(ctx) ->
        expand_attribute(attr, env)

      node ->
        node
    end)
  end

  defp expand_attribute(attr, env) do
    case Macro.expand(attr, env) do
      {:@, _, _} -> attr
      expanded -> expanded
    end
  rescue
    _ -> attr
  end

  @doc false
  @spec compile_error!(Macro.Env.t(), String.t()) :: no_return()
  def compile_error!(env, description) do
    raise CompileError, file: env.file, line: env.line, description: description
  end
end
