defmodule KinoTrace.Backend.Native do
  @moduledoc false
  # A trace of this node on the native tracer (`:kino_trace_tracer`, `KinoTrace.Tracer`):
  # a native session (`resource`, the limits inside), an OTP trace session with it as
  # the tracer, and the trace's native decoder, which drains the queue decoded in one
  # NIF call per batch (`KinoTrace.Tracer.NativeDecoder`).

  @behaviour KinoTrace.Backend.Mode
  # trace/3, trace_many/2, run/3 and destroy/2: those of every mode of this node
  use KinoTrace.Backend.Local

  alias KinoTrace.Tracer
  alias KinoTrace.Tracer.NativeDecoder

  @enforce_keys [:node, :id, :resource, :session, :decoder]
  defstruct [:node, :id, :resource, :session, :decoder]

  @type t :: %__MODULE__{
          node: node(),
          id: pos_integer(),
          resource: Tracer.resource(),
          session: term() | nil,
          decoder: NativeDecoder.t()
        }

  @doc "A native session owned by `owner` and an OTP session with it; raises `ArgumentError` for bad limits."
  @spec new(pid(), map(), keyword()) :: t()
  def new(owner, limits, opts) do
    resource = Tracer.new_session(owner, limits)
    # The tracer module must be loaded before a session is created with it.
    Code.ensure_loaded!(:kino_trace_tracer)
    session = :trace.session_create(:kino_trace, {:kino_trace_tracer, resource}, [])
    decoder = NativeDecoder.new(pairing: Keyword.get(opts, :pairing, true))

    %__MODULE__{
      node: node(),
      id: Tracer.session_id(resource),
      resource: resource,
      session: session,
      decoder: decoder
    }
  end

  @doc "Nothing to attach: the native tracer has no mailbox guard."
  @spec attach(t()) :: :ok
  def attach(%__MODULE__{}), do: :ok

  @impl true
  def trace_args(_backend, _fun, args), do: args

  @impl true
  def drain(%__MODULE__{decoder: decoder, resource: resource} = backend, max) do
    {events, more} = NativeDecoder.drain(decoder, resource, max)
    {events, more, backend}
  end

  @impl true
  def counters(%__MODULE__{resource: resource}), do: Tracer.counters(resource)
  @impl true
  def close(%__MODULE__{resource: resource}), do: Tracer.close(resource)
  @impl true
  def release(_backend), do: nil
  @impl true
  def mode(_backend), do: :native
  @impl true
  def safeguards?(_backend), do: true
  @impl true
  def in_flight?(_backend), do: false
  @impl true
  def trace_id(%__MODULE__{id: id}), do: id
  @impl true
  def tracer_spec(%__MODULE__{resource: resource}), do: {:kino_trace_tracer, resource}
  @impl true
  def flags(_backend, flags), do: flags
  @impl true
  def set_loop_modules(%__MODULE__{resource: resource}, modules),
    do: Tracer.set_loop_modules(resource, modules)

  @impl true
  def loop_release(%__MODULE__{resource: resource}, pid, exempt),
    do: Tracer.loop_release(resource, pid, exempt)

  @impl true
  def loop_resume(backend, _session, pid, _call_flags), do: loop_release(backend, pid, false)
end
