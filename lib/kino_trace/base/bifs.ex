defmodule KinoTrace.Base.Bifs do
  @moduledoc false
  # Which functions are BIFs: the table the OTP 27.3 work-around reads (erlang/otp#10349,
  # see `KinoTrace.Backend.Reaper`). The plan marks the BIFs a pattern covers
  # (`KinoTrace.Plan.Functions`), the session, the stats server and the reaper ask it.

  @doc """
  Whether `{m, f, a}` (`:_` as wildcards) names or covers a BIF.

      iex> KinoTrace.Base.Bifs.bif?(:ets, :insert, 2)
      true
      iex> KinoTrace.Base.Bifs.bif?(:ets, :_, :_)
      true
      iex> KinoTrace.Base.Bifs.bif?(Enum, :map, 2)
      false
  """
  @spec bif?(atom(), atom(), atom() | arity()) :: boolean()
  def bif?(:_, _f, _a), do: true
  def bif?(m, f, a), do: bifs({m, f, a}) != []

  @doc """
  The BIFs that `{m, f, a}` (`:_` as wildcards, but in the module) names or covers.

      iex> KinoTrace.Base.Bifs.bifs({:ets, :insert, :_})
      [{:ets, :insert, 2}]
  """
  @spec bifs({atom(), atom(), atom() | arity()}) :: [mfa()]
  def bifs({:_, _f, _a}), do: []

  def bifs({m, f, a}) do
    candidates = if is_integer(a), do: [{f, a}], else: exports(m)

    for {ef, ea} <- candidates,
        f in [:_, ef],
        a in [:_, ea],
        :erlang.is_builtin(m, ef, ea),
        do: {m, ef, ea}
  end

  defp exports(m) do
    if :erlang.module_loaded(m), do: m.module_info(:exports), else: []
  rescue
    _ -> []
  end
end
