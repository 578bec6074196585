defmodule KinoTrace.Backend.Mode do
  @moduledoc false
  # The behaviour of a backend's mode (`KinoTrace.Backend.Native`, `Fallback`, `Remote`,
  # `Counters`): what `KinoTrace.Backend` dispatches to. The optional callbacks are this
  # node's tracer's (`Native` and `Fallback`). A module apart from `KinoTrace.Backend`,
  # which names the modes: each mode names this one, so no two files depend on each other.

  @typedoc "A mode's struct."
  @type backend :: struct()

  @doc "Runs `:trace.fun(session, args...)` on the backend's OTP session; raises as `:trace` does."
  @callback trace(backend(), atom(), list()) :: term()
  @doc "Runs each call; each one's result, `{:error, {kind, reason}}` when it raised."
  @callback trace_many(backend(), [{atom(), list()}]) :: [KinoTrace.Backend.result()]
  @doc "Runs `ops` in order, then `after_ops` in any case; raises as the first failing op does."
  @callback run(backend(), [{atom(), list()}], [{atom(), list()}]) :: :ok
  @doc "Up to `max` events, decoded, whether more may be waiting, and the backend (its decoder moved on)."
  @callback drain(backend(), pos_integer()) ::
              {[Kino.Trace.Event.t()], KinoTrace.Tracer.more(), backend()}
  @callback counters(backend()) :: map()
  @callback close(backend()) :: :ok
  @callback destroy(backend(), list()) :: backend()
  @callback release(backend()) :: KinoTrace.Agent.release() | nil
  @callback mode(backend()) :: KinoTrace.Backend.mode()
  @callback safeguards?(backend()) :: boolean()
  @callback in_flight?(backend()) :: boolean()
  @callback trace_id(backend()) :: pos_integer() | nil
  @callback tracer_spec(backend()) :: term()
  @callback trace_args(backend(), atom(), list()) :: list()
  @callback flags(backend(), [atom()]) :: [atom()]
  @callback set_loop_modules(backend(), [module()]) :: :ok
  @callback loop_release(backend(), pid(), boolean()) :: :ok
  @callback loop_resume(backend(), term(), pid(), [atom()]) :: :ok
  @optional_callbacks flags: 2, set_loop_modules: 2, loop_release: 3, loop_resume: 4
end
