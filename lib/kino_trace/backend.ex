defmodule KinoTrace.Backend do
  @moduledoc false
  # Where a `KinoTrace.Session`'s trace runs: on this node, with the native tracer (or the
  # pure-Erlang one where the native one is not loaded, `KinoTrace.Tracer.LocalTracer`), or on
  # another node, through kino_trace's agent there (`KinoTrace.Agent`).
  #
  # The session is the same in both cases (decoding, pairing, history and subscribers stay
  # on this node); only these calls differ:
  #
  #   * `trace/3` runs `:trace.fun(session, args...)` on the trace's OTP session, here or
  #     in the agent's worker, and raises as `:trace` does;
  #   * `run/3` runs a list of such calls in order, then `after` ones in any case;
  #   * another node's events are drained raw (`drain/2`), with what decoding them needs
  #     there: the registered names of their processes and that node's time offset (this
  #     node's are drained decoded, from `resource`, by `KinoTrace.Tracer.NativeDecoder`, and
  #     raw from the fallback tracer when this node runs it);
  #   * `counters/1`, `close/1` and `destroy/2`.
  #
  # A backend from `start_counters/2` (`Kino.Trace.Stats`) has an OTP session for the
  # VM's call counters only, and no tracer: it takes `trace/3`, `run/3`, `trace_many/2`
  # and `destroy/2`. On another node, `trace_many/2` and `run/3` are one round trip each,
  # however many calls they carry.

  alias KinoTrace.Tracer
  alias KinoTrace.Agent
  alias KinoTrace.Backend.Reaper
  alias KinoTrace.Tracer.LocalTracer

  defstruct [:node, :id, :resource, :tracer, :session, :worker, mode: :native]

  @type t :: %__MODULE__{
          node: node(),
          id: term(),
          resource: Tracer.resource() | nil,
          tracer: LocalTracer.t() | nil,
          session: term() | nil,
          worker: pid() | nil,
          mode: Agent.mode() | :counters
        }

  @typedoc "What decoding another node's batch needs: that node's names and time offset (`nil`: this node's)."
  @type context :: nil | %{names: %{pid() => atom() | nil}, time_offset: integer()}

  @doc """
  Starts the trace's tracer on this node: a tracer session owned by `owner` with
  `limits`, and an OTP trace session with that tracer: the native one, or the fallback
  where the native one is not loaded (`mode` says which, as `KinoTrace.Tracer.LocalTracer`
  decides). Raises `ArgumentError` for limits the tracer refuses.

  ## Examples

      iex> backend = KinoTrace.Backend.start(self(), %{limit: 5}, node())
      iex> {KinoTrace.Backend.local?(backend), KinoTrace.Backend.counters(backend).accepted}
      {true, 0}
      iex> KinoTrace.Backend.destroy(backend, [])
      iex> KinoTrace.Backend.close(backend)
      :ok
  """
  @spec start(pid(), map(), node(), LocalTracer.mode()) :: t()
  def start(owner, limits, node, mode \\ LocalTracer.mode()) when node == node() do
    tracer = LocalTracer.new(owner, limits, mode)
    session = LocalTracer.session_create(tracer)
    :ok = LocalTracer.attach(tracer, session)
    resource = if LocalTracer.native?(tracer), do: tracer.handle

    %__MODULE__{
      node: node,
      id: tracer.id,
      resource: resource,
      tracer: tracer,
      session: session,
      mode: tracer.mode
    }
  end

  @doc """
  Starts the trace's tracer on `node` through its agent: `owner` gets the tracer's
  messages as `{:kino_trace, id, message}`. `opts` as `KinoTrace.Agent.start/5` takes.
  Returns `{:ok, backend}` or `{:error, message}`.
  """
  @spec start_remote(pid(), term(), map(), node(), keyword()) :: {:ok, t()} | {:error, String.t()}
  def start_remote(owner, id, limits, node, opts) do
    with {:ok, worker, mode} <- Agent.start(node, owner, id, limits, opts) do
      {:ok,
       %__MODULE__{node: node, id: id, worker: worker, session: {:agent, worker}, mode: mode}}
    end
  end

  @doc """
  Starts an OTP trace session for the VM's call counters (`call_count`, `call_time`,
  `call_memory`) only, owned by the calling process, whose messages carry `id`: on this
  node a session whose tracer is the caller (no function is call-traced in it, so it
  never gets a message), on another node a worker of kino_trace's agent in counters
  mode (`KinoTrace.Agent.start/5`), which ends when the caller does or the connection
  drops. Returns `{:ok, backend}` or `{:error, message}`.

      iex> {:ok, backend} = KinoTrace.Backend.start_counters(node(), 1)
      iex> KinoTrace.Backend.run(backend, [{:function, [{:lists, :seq, 2}, true, [:call_count]]}])
      iex> [{:ok, {:call_count, 0}}] = KinoTrace.Backend.trace_many(backend, [{:info, [{:lists, :seq, 2}, :call_count]}])
      iex> KinoTrace.Backend.destroy(backend, []).session
      nil
  """
  @spec start_counters(node(), term()) :: {:ok, t()} | {:error, String.t()}
  def start_counters(node, id) when node == node() do
    session = :trace.session_create(:kino_trace_stats, self(), [])
    {:ok, %__MODULE__{node: node, id: id, session: session, mode: :counters}}
  end

  def start_counters(node, id), do: start_remote(self(), id, %{}, node, counters: true)

  @doc "Whether the trace runs on this node."
  @spec local?(t()) :: boolean()
  def local?(%__MODULE__{worker: worker}), do: worker == nil

  @doc "Whether the trace runs on this node's native tracer (its events are drained decoded)."
  @spec native?(t()) :: boolean()
  def native?(%__MODULE__{worker: worker, resource: resource}),
    do: worker == nil and resource != nil

  @doc "Whether the trace's OTP session is still there (not destroyed)."
  @spec tracing?(t() | nil) :: boolean()
  def tracing?(%__MODULE__{session: session}), do: session != nil
  # (another node's trace before its agent started the tracer there, or when it could not)
  def tracing?(nil), do: false

  @doc "Runs `:trace.fun(session, args...)` on the trace's session; raises as `:trace` does."
  @spec trace(t(), atom(), list()) :: term()
  def trace(%__MODULE__{worker: nil, session: session} = backend, fun, args),
    do: apply(:trace, fun, [session | local_args(backend, fun, args)])

  def trace(%__MODULE__{worker: worker}, fun, args) do
    case call!(worker, {:trace, fun, args}) do
      {:ok, result} -> result
      {:error, {kind, reason}} -> :erlang.raise(kind, reason, [])
    end
  end

  @doc """
  Runs each `{fun, args}` (as `trace/3` takes them) on the trace's session and returns
  each one's result, `{:ok, result}` or `{:error, {kind, reason}}` when it raised: on
  another node in one round trip.
  """
  @spec trace_many(t(), [{atom(), list()}]) :: [{:ok, term()} | {:error, {atom(), term()}}]
  def trace_many(%__MODULE__{worker: nil, session: session} = backend, calls) do
    for {fun, args} <- calls do
      try do
        {:ok, apply(:trace, fun, [session | local_args(backend, fun, args)])}
      catch
        kind, reason -> {:error, {kind, reason}}
      end
    end
  end

  def trace_many(%__MODULE__{worker: worker}, calls) do
    call!(worker, {:trace_many, calls})
  end

  @doc "Runs `ops` (`{fun, args}` as `trace/3` takes them) in order, then `after` in any case."
  @spec run(t(), [{atom(), list()}], [{atom(), list()}]) :: :ok
  def run(backend, ops, after_ops \\ [])

  def run(%__MODULE__{worker: nil} = backend, ops, after_ops) do
    Enum.each(ops, fn {fun, args} -> trace(backend, fun, args) end)
  after
    Enum.each(after_ops, fn {fun, args} -> trace(backend, fun, args) end)
  end

  def run(%__MODULE__{worker: worker}, ops, after_ops) do
    case call!(worker, {:trace_all, ops, after_ops}) do
      :ok -> :ok
      {:error, {kind, reason}} -> :erlang.raise(kind, reason, [])
    end
  end

  # The fallback tracer's sessions get its process flags and call match specs.
  defp local_args(%__MODULE__{tracer: %LocalTracer{} = tracer}, fun, args),
    do: LocalTracer.trace_args(tracer, fun, args)

  defp local_args(_backend, _fun, args), do: args

  @doc """
  Takes up to `max` raw events from another node's tracer, or this node's fallback
  tracer: `{events, more, context}` (`nil`: this node's; `more` as `t:KinoTrace.Tracer.more/0`). (This node's native session
  drains its `resource` decoded, with `KinoTrace.Tracer.NativeDecoder`.)
  """
  @spec drain(t(), pos_integer()) :: {[Tracer.raw_event()], Tracer.more(), context()}
  def drain(%__MODULE__{worker: nil, resource: nil, tracer: tracer}, max) when tracer != nil do
    {raw, more} = LocalTracer.drain(tracer, max)
    {raw, more, nil}
  end

  def drain(%__MODULE__{worker: worker}, max) when worker != nil do
    {raw, more, names, offset} = call!(worker, {:drain, max})
    {raw, more, %{names: names, time_offset: offset}}
  end

  @doc "The tracer's counters (see `KinoTrace.Tracer.counters/1`); the last known ones once the agent is gone."
  @spec counters(t()) :: map()
  def counters(%__MODULE__{worker: nil, tracer: tracer}), do: LocalTracer.counters(tracer)

  def counters(%__MODULE__{worker: worker}) do
    %{} = call!(worker, :counters)
  end

  @doc "Closes the tracer's session: nothing more is accepted, what is queued is freed."
  @spec close(t()) :: :ok
  def close(%__MODULE__{worker: nil, tracer: tracer}), do: LocalTracer.close(tracer)

  def close(%__MODULE__{worker: worker}) do
    Agent.call(worker, :close)
    :ok
  end

  @doc """
  Destroys the trace's OTP session (here through `KinoTrace.Backend.Reaper`, with the given
  function patterns, see there). What the tracer queued before stays to be drained.
  """
  @spec destroy(t(), list()) :: t()
  def destroy(%__MODULE__{session: nil} = backend, _functions), do: backend

  def destroy(%__MODULE__{worker: nil, session: session} = backend, functions) do
    Reaper.destroy(session, functions)
    %{backend | session: nil}
  end

  def destroy(%__MODULE__{worker: worker} = backend, _functions) do
    Agent.call(worker, :destroy)
    %{backend | session: nil}
  end

  @doc """
  Ends the trace's agent worker on another node and waits until that node is as it was
  (`KinoTrace.Agent.stop/1`: `:removed`, `:kept` or `:lost`); `nil` for this node's.
  Call it after `close/1` and `destroy/2`.
  """
  @spec release(t()) :: Agent.release() | nil
  def release(%__MODULE__{worker: nil}), do: nil
  def release(%__MODULE__{worker: worker}), do: Agent.stop(worker)

  # The worker's answer to `request`; exits `{:agent_down, worker}` when the worker or its
  # node is gone (the session turns that exit into marking the node gone).
  defp call!(worker, request) do
    case Agent.call(worker, request) do
      {:error, :agent_down} -> exit({:agent_down, worker})
      reply -> reply
    end
  end
end
