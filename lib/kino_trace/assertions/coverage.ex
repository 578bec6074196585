defmodule KinoTrace.Assertions.Coverage do
  @moduledoc false
  # Tells whether a capture traced a function at all, from the patterns it recorded
  # (`Kino.Trace.Capture` keeps them in `:patterns`).
  #
  # A call of a function the capture did not trace can never be seen: `refute_called`
  # would pass whatever the code did, and `assert_called` would fail with a misleading
  # message. The assertions use this to say so.

  alias KinoTrace.Pattern

  @doc """
  `true` when one of the trace's patterns covers `{module, function, arity}`, `false`
  when none does, `:unknown` when the trace does not say what it traced (a list of events).

  ## Examples

      iex> capture = %{events: [], patterns: ["MyApp.Cache", "MyApp.Repo.get/2"]}
      iex> KinoTrace.Assertions.Coverage.traced?(capture, {MyApp.Cache, :fetch, 2})
      true
      iex> KinoTrace.Assertions.Coverage.traced?(capture, {MyApp.Repo, :delete, 1})
      false
      iex> KinoTrace.Assertions.Coverage.traced?([], {MyApp.Repo, :delete, 1})
      :unknown
  """
  @spec traced?(term(), mfa()) :: boolean() | :unknown
  def traced?(%{patterns: [_ | _] = patterns}, mfa) do
    parsed =
      for text <- patterns, {:ok, pattern} <- [Pattern.parse(text)], do: Pattern.mfa(pattern)

    if length(parsed) == length(patterns),
      do: Enum.any?(parsed, &covers?(&1, mfa)),
      else: :unknown
  end

  def traced?(_trace, _mfa), do: :unknown

  @doc "The trace's patterns as a readable list, or `nil` when it has none."
  @spec patterns_text(term()) :: String.t() | nil
  def patterns_text(%{patterns: [_ | _] = patterns}),
    do: Enum.map_join(patterns, ", ", &inspect/1)

  def patterns_text(_trace), do: nil

  defp covers?({pm, pf, pa}, {m, f, a}) do
    (pm == :_ or pm == m) and (pf == :_ or pf == f) and (pa == :_ or pa == a)
  end
end
