defmodule KinoTrace.Backend.Local do
  @moduledoc false
  # What the backends of this node (`KinoTrace.Backend.Native`, `Fallback`, `Counters`)
  # share: their OTP trace session is here, called with the arguments the backend's
  # tracer takes (its `trace_args/3`), and destroyed through `KinoTrace.Backend.BifWorkaround.destroy/2`.

  alias KinoTrace.Backend.BifWorkaround

  # A mode of this node (`use KinoTrace.Backend.Local`) takes its `trace/3`,
  # `trace_many/2`, `run/3` and `destroy/2` callbacks from here.
  defmacro __using__(_opts) do
    quote do
      @impl true
      defdelegate trace(backend, fun, args), to: KinoTrace.Backend.Local
      @impl true
      defdelegate trace_many(backend, calls), to: KinoTrace.Backend.Local
      @impl true
      defdelegate run(backend, ops, after_ops), to: KinoTrace.Backend.Local
      @impl true
      defdelegate destroy(backend, functions), to: KinoTrace.Backend.Local
    end
  end

  @doc "`:trace.fun(session, args...)` on the backend's session."
  @spec trace(struct(), atom(), list()) :: term()
  def trace(%module{session: session} = backend, fun, args),
    do: apply(:trace, fun, [session | module.trace_args(backend, fun, args)])

  @doc "Each call's result, or `{:error, {kind, reason}}` when it raised."
  @spec trace_many(struct(), [{atom(), list()}]) :: [KinoTrace.Backend.result()]
  def trace_many(backend, calls) do
    for {fun, args} <- calls do
      try do
        {:ok, trace(backend, fun, args)}
      catch
        kind, reason -> {:error, {kind, reason}}
      end
    end
  end

  @doc "`ops` in order, then `after_ops` in any case."
  @spec run(struct(), [{atom(), list()}], [{atom(), list()}]) :: :ok
  def run(backend, ops, after_ops) do
    Enum.each(ops, fn {fun, args} -> trace(backend, fun, args) end)
  after
    Enum.each(after_ops, fn {fun, args} -> trace(backend, fun, args) end)
  end

  @doc "Destroys the backend's session through the BIF work-around's facade (see there)."
  @spec destroy(struct(), list()) :: struct()
  def destroy(%{session: session} = backend, functions) do
    BifWorkaround.destroy(session, functions)
    %{backend | session: nil}
  end
end
