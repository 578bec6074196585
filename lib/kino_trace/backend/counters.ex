defmodule KinoTrace.Backend.Counters do
  @moduledoc false
  # An OTP trace session of this node for the VM's call counters (`call_count`,
  # `call_time`, `call_memory`) only (`Kino.Trace.Stats`): its tracer is the process
  # that starts it, and no function is call-traced in it, so it never gets a message.
  # It has no tracer of kino_trace's: no events, and the counters of `counters/1` are 0.

  @behaviour KinoTrace.Backend.Mode
  # trace/3, trace_many/2, run/3 and destroy/2: those of every mode of this node
  use KinoTrace.Backend.Local

  @enforce_keys [:node, :id, :session]
  defstruct [:node, :id, :session]

  @type t :: %__MODULE__{node: node(), id: term(), session: term() | nil}

  @doc "A counters session owned by the calling process."
  @spec new(term()) :: t()
  def new(id),
    do: %__MODULE__{
      node: node(),
      id: id,
      session: :trace.session_create(:kino_trace_stats, self(), [])
    }

  @impl true
  def trace_args(_backend, _fun, args), do: args
  @impl true
  def drain(backend, _max), do: {[], false, backend}
  @impl true
  def counters(_backend), do: %{accepted: 0, delivered: 0, queued: 0}
  @impl true
  def close(_backend), do: :ok
  @impl true
  def release(_backend), do: nil
  @impl true
  def mode(_backend), do: :counters
  @impl true
  def safeguards?(_backend), do: true
  @impl true
  def in_flight?(_backend), do: false
  @impl true
  def trace_id(_backend), do: nil
  @impl true
  def tracer_spec(_backend), do: nil
end
