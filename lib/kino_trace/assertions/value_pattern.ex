defmodule KinoTrace.Assertions.ValuePattern do
  @moduledoc false
  # A pattern for the outcome of a call (its return value, or `{class, reason}` of its
  # exception), optionally with a guard, compiled at macro-expansion time into a match
  # function.
  #
  # Like `KinoTrace.Assertions.CallPattern`, pins read the test's variables and the
  # pattern's own variables stay local to the assertion. When it is compiled together with
  # a call pattern, it is matched after the call's arguments, so it can pin (and its guard
  # can use) the variables the call pattern bound:
  # `assert_returned trace, Repo.get(_, id), {:ok, %{id: ^id}}`.

  alias KinoTrace.Assertions.CallPattern

  @enforce_keys [:source, :matcher]
  defstruct [:source, :matcher, :ast, pins: [], diff?: true]

  @type t :: %__MODULE__{
          source: String.t(),
          matcher: (list(), term() -> boolean()),
          ast: Macro.t(),
          pins: [{{atom(), atom() | integer()}, term()}],
          diff?: boolean()
        }

  @doc """
  Compiles `expr` (a pattern, optionally `pattern when guard`) into a `%ValuePattern{}`.

  ## Examples

      iex> require KinoTrace.Assertions.ValuePattern, as: ValuePattern
      iex> pattern = ValuePattern.compile({:ok, n} when n > 0)
      iex> ValuePattern.match?(pattern, [], {:ok, 1})
      true
      iex> ValuePattern.match?(pattern, [], {:ok, 0})
      false
      iex> pattern.source
      "{:ok, n} when n > 0"
  """
  defmacro compile(expr), do: quoted(expr, __CALLER__)

  @doc """
  Returns the quoted code building the `%ValuePattern{}` for `expr` in the caller `env`.

  `call` is the call pattern it belongs to, as returned by `CallPattern.parse!/3`, or
  `nil`: the value is then matched on its own.
  """
  @spec quoted(Macro.t(), Macro.Env.t(), map() | nil) :: Macro.t()
  def quoted(expr, env, call \\ nil) do
    {pattern, guard} =
      case expr do
        {:when, _, [pattern, guard]} -> {pattern, guard}
        pattern -> {pattern, nil}
      end

    call_args = if call, do: call.args

    local =
      if call_args,
        do: call_args |> CallPattern.vars() |> Enum.map(fn {n, _, c} -> {n, c} end),
        else: []

    display = CallPattern.expand_for_display(expr, env)
    args = Macro.unique_var(:args, __MODULE__)
    value = Macro.unique_var(:value, __MODULE__)
    value_match = CallPattern.match_expr(value, pattern, guard, true)

    body =
      if call_args,
        do: CallPattern.match_expr(args, call_args, call.guard, value_match),
        else: {:__block__, [], [quote(do: _ = unquote(args)), value_match]}

    quote do
      %KinoTrace.Assertions.ValuePattern{
        source: unquote(Macro.to_string(display)),
        matcher: fn unquote(args), unquote(value) -> unquote(body) end,
        ast: unquote(Macro.escape(display)),
        pins: unquote(CallPattern.pins(expr, local)),
        diff?: unquote(not uses_call_vars?(expr, pattern, local))
      }
    end
  end

  @doc "Returns true when `value` matches the pattern, for a call with arguments `args`."
  @spec match?(t(), list(), term()) :: boolean()
  def match?(%__MODULE__{matcher: matcher}, args, value), do: matcher.(args, value)

  # Whether the pattern or its guard reads a variable bound by the call pattern: ExUnit's
  # diff can not show those (it only knows the test's variables).
  defp uses_call_vars?(expr, pattern, local) do
    own = pattern |> CallPattern.vars() |> Enum.map(fn {n, _, c} -> {n, c} end)

    {_, found} =
      Macro.prewalk(expr, false, fn
        {name, _, ctx} = node, acc when is_atom(name) and is_atom(ctx) ->
          {node, acc or ({name, ctx} in local and {name, ctx} not in own)}

        {:^, _, [{name, _, ctx}]} = node, acc when is_atom(name) and is_atom(ctx) ->
          {node, acc or {name, ctx} in local}

        node, acc ->
          {node, acc}
      end)

    found
  end
end
