defmodule KinoTrace.Backend.Fallback do
  @moduledoc false
  # A trace of this node on the pure-Erlang tracer (`:kino_trace_fallback`, the one
  # kino_trace's agent runs on nodes where the native one cannot load): where the native
  # one is not loaded here, or the application environment says so
  # (`KinoTrace.Backend.local_module/0`). It takes the same limits and gives the same
  # raw events and counters; its raw events are decoded here (`KinoTrace.Tracer.Decoder`).
  #
  # What differs from the native tracer is here: its process flags and call match specs
  # (`:kino_trace_fallback.trace_args/3`: a timestamp, and calls whose huge arguments the
  # VM does not copy), its attachment to the session (its mailbox guard switches the
  # session's process flags off, and asks the owner to set them again), and its tracer
  # process, which is one of kino_trace's own (`KinoTrace.Internal`): no trace records it.

  @behaviour KinoTrace.Backend.Mode
  # trace/3, trace_many/2, run/3 and destroy/2: those of every mode of this node
  use KinoTrace.Backend.Local

  alias KinoTrace.{Internal, Tracer}
  alias KinoTrace.Tracer.Decoder

  @enforce_keys [:node, :id, :handle, :session, :decoder, :why]
  defstruct [:node, :id, :handle, :session, :decoder, :why]

  @type t :: %__MODULE__{
          node: node(),
          id: pos_integer(),
          handle: term(),
          session: term() | nil,
          decoder: Decoder.t(),
          why: String.t()
        }

  @doc "A fallback tracer session owned by `owner` and an OTP session with it; raises `ArgumentError` for bad limits."
  @spec new(pid(), map(), keyword()) :: t()
  def new(owner, limits, opts) do
    handle = :kino_trace_fallback.new_session(owner, limits)
    Internal.register(:kino_trace_fallback.tracer(handle))
    session = :trace.session_create(:kino_trace, :kino_trace_fallback.tracer(handle), [])
    decoder = Decoder.new(pairing: Keyword.get(opts, :pairing, true), node: node())
    id = :kino_trace_fallback.session_id(handle)

    %__MODULE__{
      node: node(),
      id: id,
      handle: handle,
      session: session,
      decoder: decoder,
      why: why()
    }
  end

  defp why do
    if Application.get_env(:kino_trace, :tracer, :auto) == :fallback,
      do: "the application environment sets kino_trace's :tracer to :fallback",
      else: Tracer.load_error() || "the native tracer is not loaded"
  end

  @doc """
  Makes the backend's session the one whose process flags the mailbox guard switches
  off (before any flag is set): the owner then gets `{:kino_trace, id, :restore}` when
  they are to be set again.
  """
  @spec attach(t()) :: :ok
  def attach(%__MODULE__{handle: handle, session: session}),
    do: :kino_trace_fallback.attach(handle, session, :owner)

  # Process flags with `:call` get `:arity` (and a timestamp) and call match specs send
  # the arguments only when they do not look huge, so the VM does not copy them whole.
  @impl true
  def trace_args(%__MODULE__{handle: handle}, fun, args),
    do: :kino_trace_fallback.trace_args(handle, fun, args)

  @impl true
  def drain(%__MODULE__{handle: handle, decoder: decoder} = backend, max) do
    {raw, more} = :kino_trace_fallback.drain(handle, max)
    {events, decoder} = Decoder.decode(decoder, raw, nil)
    {events, more, %{backend | decoder: decoder}}
  end

  # Its counters add `fallback:` (what it received, how often its guard switched tracing
  # off), as the agent's do.
  @impl true
  def counters(%__MODULE__{handle: handle}),
    do:
      Map.put(:kino_trace_fallback.counters(handle), :fallback, :kino_trace_fallback.info(handle))

  @impl true
  def close(%__MODULE__{handle: handle}), do: :kino_trace_fallback.close(handle)
  @impl true
  def release(_backend), do: nil
  @impl true
  def mode(%__MODULE__{why: why}), do: {:fallback, why}
  @impl true
  def safeguards?(_backend), do: true
  @impl true
  def in_flight?(_backend), do: true
  @impl true
  def trace_id(_backend), do: nil
  @impl true
  def tracer_spec(%__MODULE__{handle: handle}), do: :kino_trace_fallback.tracer(handle)
  @impl true
  def flags(_backend, flags), do: :kino_trace_fallback.process_flags(flags)
  @impl true
  def set_loop_modules(%__MODULE__{handle: handle}, modules),
    do: :kino_trace_fallback.set_loop_modules(handle, modules)

  @impl true
  def loop_release(%__MODULE__{handle: handle}, pid, exempt),
    do: :kino_trace_fallback.loop_release(handle, pid, exempt)

  # Its guard switched the call flag off in `session`: on again, then counting from 0.
  @impl true
  def loop_resume(backend, session, pid, call_flags) do
    try do
      :trace.process(session, pid, true, call_flags)
    rescue
      # the process exited meanwhile
      ArgumentError -> :ok
    end

    loop_release(backend, pid, false)
  end
end
