defmodule KinoTrace.Tracer.LocalTracer do
  @moduledoc false
  # The tracer of a trace session on this node: the native one (`:kino_trace_tracer`),
  # or the pure-Erlang `:kino_trace_fallback` (the one kino_trace's agent runs on nodes
  # where the native one cannot load) when the native one is not loaded here (not built,
  # or it refused to load: `KinoTrace.Tracer.load_error/0` says why), or when the
  # application environment says `config :kino_trace, tracer: :fallback`.
  #
  # Both take the same limits, return the same raw events and counters. What differs is
  # hidden here: what `:trace.session_create/3` is given, the fallback's process flags
  # and call match specs (`:kino_trace_fallback.trace_args/3`: a timestamp, and calls
  # whose huge arguments the VM does not copy), its attachment to the session (its
  # mailbox guard switches the session's process flags off, and asks the owner to set
  # them again), and its tracer process, which is one of kino_trace's own
  # (`KinoTrace.Internal`): no trace records it.

  alias KinoTrace.{Internal, Tracer}

  defstruct [:mode, :handle, :id]

  @type mode :: :native | {:fallback, String.t()}
  @type t :: %__MODULE__{mode: mode(), handle: term(), id: pos_integer()}

  @doc "The tracer a trace started now runs on, and why when it is the fallback."
  @spec mode() :: mode()
  def mode do
    cond do
      Application.get_env(:kino_trace, :tracer, :auto) == :fallback ->
        {:fallback, "the application environment sets kino_trace's :tracer to :fallback"}

      Tracer.loaded?() ->
        :native

      true ->
        {:fallback, Tracer.load_error() || "the native tracer is not loaded"}
    end
  end

  @doc "A tracer session owned (and drained) by `owner`; raises `ArgumentError` for bad limits."
  @spec new(pid(), map(), mode()) :: t()
  def new(owner, limits, mode \\ mode())

  def new(owner, limits, :native) do
    resource = Tracer.new_session(owner, limits)
    # The tracer module must be loaded before a session is created with it.
    Code.ensure_loaded!(:kino_trace_tracer)
    %__MODULE__{mode: :native, handle: resource, id: Tracer.session_id(resource)}
  end

  def new(owner, limits, {:fallback, _why} = mode) do
    handle = :kino_trace_fallback.new_session(owner, limits)
    Internal.register(:kino_trace_fallback.tracer(handle))
    %__MODULE__{mode: mode, handle: handle, id: :kino_trace_fallback.session_id(handle)}
  end

  @doc "Whether it is the native tracer."
  @spec native?(t()) :: boolean()
  def native?(%__MODULE__{mode: mode}), do: mode == :native

  @doc "A new OTP trace session with this tracer."
  @spec session_create(t(), atom()) :: term()
  def session_create(%__MODULE__{} = tracer, name \\ :kino_trace) do
    :trace.session_create(name, tracer_spec(tracer), [])
  end

  @doc "What `:trace.session_create/3` and `:trace.info(_, _, :tracer)` name as the tracer."
  @spec tracer_spec(t()) :: term()
  def tracer_spec(%__MODULE__{mode: :native, handle: resource}),
    do: {:kino_trace_tracer, resource}

  def tracer_spec(%__MODULE__{handle: handle}), do: :kino_trace_fallback.tracer(handle)

  @doc """
  Makes `session` the one whose process flags the fallback's mailbox guard switches off
  (before any flag is set): the owner then gets `{:kino_trace, id, :restore}` when they
  are to be set again. Nothing for the native tracer.
  """
  @spec attach(t(), term()) :: :ok
  def attach(%__MODULE__{mode: :native}, _session), do: :ok

  def attach(%__MODULE__{handle: handle}, session),
    do: :kino_trace_fallback.attach(handle, session, :owner)

  @doc """
  The process flags to set for `flags` in a session of this tracer (for the fallback,
  with `:call`, its call match specs must come from `trace_args/3`).
  """
  @spec flags(t(), [atom()]) :: [atom()]
  def flags(%__MODULE__{mode: :native}, flags), do: flags
  def flags(%__MODULE__{}, flags), do: :kino_trace_fallback.process_flags(flags)

  @doc """
  The arguments of `:trace.fun(session, args...)` for a session of this tracer: as given
  for the native one; for the fallback, process flags with `:call` get `:arity` (and a
  timestamp) and call match specs send the arguments only when they do not look huge
  (`:kino_trace_fallback.trace_args/3`), so the VM does not copy them whole.
  """
  @spec trace_args(t(), atom(), list()) :: list()
  def trace_args(%__MODULE__{mode: :native}, _fun, args), do: args

  def trace_args(%__MODULE__{handle: handle}, fun, args),
    do: :kino_trace_fallback.trace_args(handle, fun, args)

  @doc "Up to `max` raw events (`KinoTrace.Tracer.drain/2`)."
  @spec drain(t(), pos_integer()) :: {[Tracer.raw_event()], Tracer.more()}
  def drain(%__MODULE__{mode: :native, handle: resource}, max), do: Tracer.drain(resource, max)
  def drain(%__MODULE__{handle: handle}, max), do: :kino_trace_fallback.drain(handle, max)

  @doc """
  The counters (`KinoTrace.Tracer.counters/1`); the fallback's add `fallback:` (what
  it received, how often its guard switched tracing off), as the agent's do.
  """
  @spec counters(t()) :: map()
  def counters(%__MODULE__{mode: :native, handle: resource}), do: Tracer.counters(resource)

  def counters(%__MODULE__{handle: handle}) do
    Map.put(:kino_trace_fallback.counters(handle), :fallback, :kino_trace_fallback.info(handle))
  end

  @doc """
  Has the tracer count, in the traced processes' own trace callbacks (native) or as its
  process receives their messages (fallback), each process's open calls of `modules`
  (`[]`: off): a process with too many is held (the native tracer discards its calls, so
  no return-trace frame is pushed; the fallback switches its call flag off in the
  attached session) and the owner gets `{:kino_trace, id, {:loop, pid, mfa}}`
  (`KinoTrace.Session.StackGuard`).
  """
  @spec set_loop_modules(t(), [module()]) :: :ok
  def set_loop_modules(%__MODULE__{mode: :native, handle: resource}, modules),
    do: Tracer.set_loop_modules(resource, modules)

  def set_loop_modules(%__MODULE__{handle: handle}, modules),
    do: :kino_trace_fallback.set_loop_modules(handle, modules)

  @doc "A held process counts from 0 again (`exempt` false), or never again (true)."
  @spec loop_release(t(), pid(), boolean()) :: :ok
  def loop_release(%__MODULE__{mode: :native, handle: resource}, pid, exempt),
    do: Tracer.loop_release(resource, pid, exempt)

  def loop_release(%__MODULE__{handle: handle}, pid, exempt),
    do: :kino_trace_fallback.loop_release(handle, pid, exempt)

  @doc "Closes it: nothing more is accepted, what is queued is freed (counted as discarded)."
  @spec close(t()) :: :ok
  def close(%__MODULE__{mode: :native, handle: resource}), do: Tracer.close(resource)
  def close(%__MODULE__{handle: handle}), do: :kino_trace_fallback.close(handle)
end
