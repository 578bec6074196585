defmodule Kino.Trace.MFA do
  @moduledoc """
  How a function is written in messages, printed lines, the widget and the stats:
  `Module.function/arity`, as Elixir code names it.

  Elixir modules are written as aliases (`Enum`, not `Elixir.Enum`), Erlang modules as
  atoms (`:ets`). A function name is written as it stands after a dot in a remote call:
  operators and identifiers as they are (`Kernel.+/2`), any other name quoted
  (`MyApp."-run/2-fun-0-"/1`). Modules and functions may also be
  `Kino.Trace.Pattern.Name`s, the names a pattern holds as text when no atom exists.

  The arity `:_` (a pattern's "any arity") is written `/*`; `nil` writes no arity.

  ## Examples

      iex> Kino.Trace.MFA.to_string({Enum, :map, 2})
      "Enum.map/2"
      iex> Kino.Trace.MFA.to_string({:ets, :insert, 2})
      ":ets.insert/2"
      iex> Kino.Trace.MFA.to_string({Kernel, :+, 2})
      "Kernel.+/2"
      iex> Kino.Trace.MFA.to_string({MyApp, :"-run/2-fun-0-", 1})
      ~s(MyApp."-run/2-fun-0-"/1)
      iex> Kino.Trace.MFA.to_string({:ets, :insert, :_})
      ":ets.insert/*"
      iex> Kino.Trace.MFA.to_string({:ets, :insert, nil})
      ":ets.insert"
      iex> Kino.Trace.MFA.to_string({:map, 2})
      "map/2"
      iex> Kino.Trace.MFA.call(Enum, :map)
      "Enum.map"
  """

  alias Kino.Trace.Pattern.Name

  @typedoc "A module: an atom, or a `Kino.Trace.Pattern.Name` when no atom of it exists."
  @type module_name :: module() | Name.t()

  @typedoc "A function name: an atom, or a `Kino.Trace.Pattern.Name`."
  @type function_name :: atom() | Name.t()

  @typedoc "An arity; `:_` is any arity (written `/*`), `nil` none (nothing written)."
  @type arity_spec :: arity() | :_ | nil

  @doc """
  `Module.function/arity` for `{module, function, arity}`, or `function/arity` for a
  local `{function, arity}`.

      iex> Kino.Trace.MFA.to_string({Map, :get, 2})
      "Map.get/2"
      iex> Kino.Trace.MFA.to_string({%Kino.Trace.Pattern.Name{text: "Elixir.NoSuch1f3c"}, :run, 0})
      "NoSuch1f3c.run/0"
      iex> Kino.Trace.MFA.to_string({:valid?, 1})
      "valid?/1"
  """
  @spec to_string({module_name(), function_name(), arity_spec()} | {function_name(), arity()}) ::
          String.t()
  def to_string({module, function, arity}), do: with_arity(call(module, function), arity)
  def to_string({function, arity}), do: with_arity(function_name(function), arity)

  @doc """
  `Module.function` as written in a remote call.

      iex> Kino.Trace.MFA.call(:ets, :lookup)
      ":ets.lookup"
      iex> Kino.Trace.MFA.call(MyApp, :"a b")
      ~s(MyApp."a b")
  """
  @spec call(module_name(), function_name()) :: String.t()
  def call(module, function),
    do: Name.inspect_module(module) <> "." <> function_name(function)

  defp function_name(function), do: Name.inspect_atom(:remote_call, function)

  defp with_arity(text, nil), do: text
  defp with_arity(text, :_), do: text <> "/*"
  defp with_arity(text, arity) when is_integer(arity), do: text <> "/" <> Integer.to_string(arity)
end
