defmodule KinoTrace.Pattern.Generated do
  @moduledoc false
  # The functions the compiler adds to a module (`__info__/1`, `module_info/0,1`,
  # `__struct__/0,1`, `behaviour_info/1`, and a protocol's or implementation's
  # `__protocol__/1` and `__impl__/1`).
  #
  # Tools call them all the time (IEx calls `__info__/1` to autocomplete and to print, the
  # code server calls `module_info/1`), so a trace of a whole module would record those
  # calls and spend its `:limit` on them. Module-wide patterns (`"MyApp.Repo"`) leave
  # them out, in call traces (`KinoTrace.Plan.Functions`) and statistics
  # (`KinoTrace.Stats.Targets`); a pattern that names one (`"MyApp.Repo.__info__"`,
  # `"MyApp.Repo.__info__/1"`) traces it.

  @functions [
    __info__: 1,
    module_info: 0,
    module_info: 1,
    __struct__: 0,
    __struct__: 1,
    behaviour_info: 1,
    __protocol__: 1,
    __impl__: 1
  ]

  @doc """
  Whether `function/arity` is one the compiler generates.

  ## Examples

      iex> KinoTrace.Pattern.Generated.generated?(:__info__, 1)
      true
      iex> KinoTrace.Pattern.Generated.generated?(:info, 1)
      false
      iex> KinoTrace.Pattern.Generated.of(KinoTrace.Pattern.Generated)
      [{KinoTrace.Pattern.Generated, :__info__, 1}, {KinoTrace.Pattern.Generated, :module_info, 0},
       {KinoTrace.Pattern.Generated, :module_info, 1}]
  """
  @spec generated?(atom(), arity()) :: boolean()
  def generated?(function, arity), do: {function, arity} in @functions

  @doc """
  The generated functions `module` has, as `{module, function, arity}` (none when the
  module is not loaded).
  """
  @spec of(module()) :: [mfa()]
  def of(module) when is_atom(module) do
    for {f, a} <- @functions, function_exported?(module, f, a), do: {module, f, a}
  end

  @doc """
  The generated functions among `exports` (`{function, arity}`, the exports of
  `module` wherever it is loaded), as `{module, function, arity}`.

      iex> KinoTrace.Pattern.Generated.of(M, [module_info: 0, run: 1, __info__: 1])
      [{M, :__info__, 1}, {M, :module_info, 0}]
  """
  @spec of(module(), [{atom(), arity()}]) :: [mfa()]
  def of(module, exports) when is_atom(module) and is_list(exports) do
    for {f, a} = fa <- @functions, fa in exports, do: {module, f, a}
  end
end
