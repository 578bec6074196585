defmodule Kino.Trace.Pattern.Text do
  @moduledoc false
  # The canonical text of a pattern (`Kino.Trace.Pattern.to_string/1`), below the
  # pattern's module: its checks (Kino.Trace.Pattern.Preflight) name patterns in their
  # messages without depending on the module that runs them. Takes the pattern by its
  # fields.

  alias Kino.Trace.MFA
  alias Kino.Trace.Pattern.Name

  @doc "The canonical text of `pattern` (a `Kino.Trace.Pattern`)."
  @spec of(map()) :: String.t()
  def of(%{module: :_}), do: "*"
  def of(%{module: module, function: :_}), do: Name.inspect_module(module)

  def of(%{module: module, function: function, arity: arity, call_text: call_text}) do
    if call_text,
      do: MFA.call(module, function) <> call_text,
      else: MFA.to_string({module, function, arity})
  end
end
