defmodule KinoTrace.Backend.Remote do
  @moduledoc false
  # A trace of another node: its tracer runs there, in a worker of kino_trace's agent
  # (`KinoTrace.Agent`), which makes the `:trace` calls and drains the tracer for this
  # node. Its raw events are decoded here (`KinoTrace.Tracer.Decoder`), with that node's
  # registered names and time offset, drained in the same round trip. `trace_many/2` and
  # `run/3` are one round trip each, however many calls they carry. A worker in counters
  # mode (`Kino.Trace.Stats` of another node) has no tracer: only the `:trace` calls.
  #
  # A request whose worker or node is gone exits `{:agent_down, worker}` (the session
  # turns that exit into marking the node gone).

  @behaviour KinoTrace.Backend.Mode

  alias KinoTrace.Agent
  alias KinoTrace.Tracer.Decoder

  @enforce_keys [:node, :id, :worker, :session, :mode]
  defstruct [:node, :id, :worker, :session, :mode, :decoder]

  @type t :: %__MODULE__{
          node: node(),
          id: term(),
          worker: pid(),
          session: {:agent, pid()} | nil,
          mode: Agent.mode() | :counters,
          decoder: Decoder.t() | nil
        }

  @doc "Starts the worker on `node` (`KinoTrace.Agent.start/5`); `pairing:` as the decoder's."
  @spec start(pid(), term(), map(), node(), keyword()) :: {:ok, t()} | {:error, String.t()}
  def start(owner, id, limits, node, opts) do
    {pairing, opts} = Keyword.pop(opts, :pairing, true)

    with {:ok, worker, mode} <- Agent.start(node, owner, id, limits, opts) do
      decoder = if mode != :counters, do: Decoder.new(pairing: pairing, node: node)

      {:ok,
       %__MODULE__{
         node: node,
         id: id,
         worker: worker,
         session: {:agent, worker},
         mode: mode,
         decoder: decoder
       }}
    end
  end

  @impl true
  def trace(%__MODULE__{worker: worker}, fun, args) do
    case call!(worker, {:trace, fun, args}) do
      {:ok, result} -> result
      {:error, {kind, reason}} -> :erlang.raise(kind, reason, [])
    end
  end

  @impl true
  def trace_many(%__MODULE__{worker: worker}, calls), do: call!(worker, {:trace_many, calls})

  @impl true
  def run(%__MODULE__{worker: worker}, ops, after_ops) do
    case call!(worker, {:trace_all, ops, after_ops}) do
      :ok -> :ok
      {:error, {kind, reason}} -> :erlang.raise(kind, reason, [])
    end
  end

  @impl true
  def drain(%__MODULE__{worker: worker, decoder: decoder} = backend, max) do
    {raw, more, names, offset} = call!(worker, {:drain, max})
    {events, decoder} = Decoder.decode(decoder, raw, %{names: names, time_offset: offset})
    {events, more, %{backend | decoder: decoder}}
  end

  @doc "The ring its worker keeps (a recorder's), decoded: `{events, figures}` (see `KinoTrace.Backend.ring/1`)."
  @spec ring(t()) :: {[Kino.Trace.Event.t()], map()}
  def ring(%__MODULE__{worker: worker, decoder: decoder}) do
    {raw, names, offset, figures} = call!(worker, :ring)
    {events, _decoder} = Decoder.decode(decoder, raw, %{names: names, time_offset: offset})
    {events, figures}
  end

  @doc """
  What the agent's worker takes to keep a recorder's ring on its node and run its
  triggers there (`kino_trace_agent_worker`): the ring's bounds, the triggers (plain
  terms), the after-window and the snapshots' bounds, and what it needs to see events
  as this node does.
  """
  @spec ring_config(KinoTrace.Plan.Record.t()) :: map()
  def ring_config(record) do
    record
    |> Map.take([:events, :bytes, :snapshots, :snapshot_bytes, :after])
    |> Map.merge(%{
      triggers: record.on,
      window_ms: KinoTrace.Plan.Record.events_window_ms(),
      timeout_marker: KinoTrace.Plan.MessagePattern.timeout_marker(),
      fields: KinoTrace.Tracer.NativeDecoder.fields()
    })
  end

  @doc "Its worker's triggered snapshots, taken (see `KinoTrace.Backend.take_snapshots/1`)."
  @spec take_snapshots(t()) :: [{map(), [Kino.Trace.Event.t()]}]
  def take_snapshots(%__MODULE__{worker: worker, decoder: decoder}) do
    {taken, names, offset} = call!(worker, :take_snapshots)

    # (each decoded from the decoder's first state, as a ring is)
    for {meta, raw} <- taken do
      {events, _decoder} = Decoder.decode(decoder, raw, %{names: names, time_offset: offset})
      {meta, events}
    end
  end

  @impl true
  def counters(%__MODULE__{worker: worker}), do: %{} = call!(worker, :counters)

  @impl true
  def close(%__MODULE__{worker: worker}) do
    Agent.call(worker, :close)
    :ok
  end

  @impl true
  def destroy(%__MODULE__{worker: worker} = backend, _functions) do
    Agent.call(worker, :destroy)
    %{backend | session: nil}
  end

  @impl true
  def release(%__MODULE__{worker: worker}), do: Agent.stop(worker)
  @impl true
  def mode(%__MODULE__{mode: mode}), do: mode
  @impl true
  def safeguards?(_backend), do: false
  @impl true
  def in_flight?(_backend), do: false
  @impl true
  def trace_id(_backend), do: nil
  @impl true
  def tracer_spec(_backend), do: nil
  @impl true
  def trace_args(_backend, _fun, args), do: args

  # The worker's answer to `request`; exits `{:agent_down, worker}` when the worker or its
  # node is gone.
  defp call!(worker, request) do
    case Agent.call(worker, request) do
      {:error, :agent_down} -> exit({:agent_down, worker})
      reply -> reply
    end
  end
end
