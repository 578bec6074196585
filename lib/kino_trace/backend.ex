defmodule KinoTrace.Backend do
  @moduledoc false
  # Where a trace runs: one struct per mode, each the module of this behaviour that
  # implements it. Every struct has the `node` it traces, the `id` its tracer's messages
  # carry and the OTP `session` (nil once destroyed).
  #
  #   * `KinoTrace.Backend.Native`: this node's native tracer (`:kino_trace_tracer`), its
  #     events drained decoded by the NIF (`KinoTrace.Tracer.NativeDecoder`);
  #   * `KinoTrace.Backend.Fallback`: this node's pure-Erlang tracer
  #     (`:kino_trace_fallback`), where the native one is not loaded (not built, or it
  #     refused to load: `KinoTrace.Tracer.load_error/0` says why) or the application
  #     environment says `config :kino_trace, tracer: :fallback`; its raw events are
  #     decoded here (`KinoTrace.Tracer.Decoder`);
  #   * `KinoTrace.Backend.Remote`: another node's tracer, run by kino_trace's agent
  #     there (`KinoTrace.Agent`); its raw events are decoded here, with that node's
  #     names and time offset;
  #   * `KinoTrace.Backend.Counters`: an OTP session for the VM's call counters only
  #     (`Kino.Trace.Stats`), no tracer (on another node, a `Remote` in counters mode).
  #
  # The mode is chosen once, when the backend starts (`start/4`, `start_remote/5`,
  # `start_counters/2`); every other function here dispatches on the struct. The session
  # is the same for every mode: it calls `trace/3`, `run/3`, `drain/2` (decoded events
  # of every mode) and the rest, and runs this node's safeguards (its own processes kept
  # out, the BIF re-assert, the reload probes, the stack guard, the fallback's restore)
  # where `safeguards?/1` says the backend supports them. The functions marked "this
  # node's tracer" are those of `Native` and `Fallback` only.

  alias Kino.Trace.Event
  alias KinoTrace.Backend.{Counters, Fallback, Native, Remote}
  alias KinoTrace.Tracer

  @type t :: Native.t() | Fallback.t() | Remote.t() | Counters.t()
  @typedoc "A backend of this node's tracer."
  @type local :: Native.t() | Fallback.t()
  @typedoc "What `mode/1` tells: the tracer (and why the fallback), or `:counters`."
  @type mode :: :native | {:fallback, String.t()} | :counters
  @type result :: {:ok, term()} | {:error, {atom(), term()}}

  # --- starting (the one choice of a mode) -------------------------------------------

  @doc """
  Starts the trace's tracer on this node: a tracer session owned by `owner` with
  `limits`, an OTP trace session with it, attached (the fallback's mailbox guard switches
  that session's flags off, and asks the owner to set them again). The native tracer,
  or the fallback (`local_module/0`). `opts`: `pairing:` as `KinoTrace.Tracer.Decoder.new/1`.
  Raises `ArgumentError` for limits the tracer refuses.

  ## Examples

      iex> backend = KinoTrace.Backend.start(self(), %{limit: 5}, node())
      iex> {KinoTrace.Backend.safeguards?(backend), KinoTrace.Backend.counters(backend).accepted}
      {true, 0}
      iex> KinoTrace.Backend.destroy(backend, []).session
      nil
      iex> KinoTrace.Backend.close(backend)
      :ok
  """
  @spec start(pid(), map(), node(), keyword()) :: local()
  def start(owner, limits, node, opts \\ []) when node == node() do
    module = local_module()
    backend = module.new(owner, limits, opts)
    :ok = module.attach(backend)
    backend
  end

  @doc """
  A tracer session of this node's tracer with an OTP session of its own, not attached
  (the capture of sends): as `start/4` otherwise.
  """
  @spec new_local(pid(), map(), keyword()) :: local()
  def new_local(owner, limits, opts \\ []), do: local_module().new(owner, limits, opts)

  @doc "The backend module a trace of this node starts with now."
  @spec local_module() :: Native | Fallback
  def local_module do
    if Application.get_env(:kino_trace, :tracer, :auto) != :fallback and Tracer.loaded?(),
      do: Native,
      else: Fallback
  end

  @doc """
  Starts the trace's tracer on `node` through its agent: `owner` gets the tracer's
  messages as `{:kino_trace, id, message}`. `opts` as `KinoTrace.Agent.start/5` takes,
  and `pairing:`. Returns `{:ok, backend}` or `{:error, message}`.
  """
  @spec start_remote(pid(), term(), map(), node(), keyword()) ::
          {:ok, Remote.t()} | {:error, String.t()}
  def start_remote(owner, id, limits, node, opts), do: Remote.start(owner, id, limits, node, opts)

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
  @spec start_counters(node(), term()) :: {:ok, Counters.t() | Remote.t()} | {:error, String.t()}
  def start_counters(node, id) when node == node(), do: {:ok, Counters.new(id)}
  def start_counters(node, id), do: Remote.start(self(), id, %{}, node, counters: true)

  # --- every mode ----------------------------------------------------------------------

  @doc "Whether the trace's OTP session is still there (not destroyed)."
  @spec tracing?(t() | nil) :: boolean()
  def tracing?(%{session: session}), do: session != nil
  # (another node's trace before its agent started the tracer there, or when it could not)
  def tracing?(nil), do: false

  @doc "Runs `:trace.fun(session, args...)` on the trace's session; raises as `:trace` does."
  @spec trace(t(), atom(), list()) :: term()
  def trace(%module{} = backend, fun, args), do: module.trace(backend, fun, args)

  @doc """
  Runs each `{fun, args}` (as `trace/3` takes them) on the trace's session and returns
  each one's result, `{:ok, result}` or `{:error, {kind, reason}}` when it raised: on
  another node in one round trip.
  """
  @spec trace_many(t(), [{atom(), list()}]) :: [result()]
  def trace_many(%module{} = backend, calls), do: module.trace_many(backend, calls)

  @doc "Runs `ops` (`{fun, args}` as `trace/3` takes them) in order, then `after` in any case."
  @spec run(t(), [{atom(), list()}], [{atom(), list()}]) :: :ok
  def run(%module{} = backend, ops, after_ops \\ []), do: module.run(backend, ops, after_ops)

  @doc """
  Takes up to `max` events, decoded (this node's native tracer's in the NIF, the others'
  here): `{events, more, backend}` (`more` as `t:KinoTrace.Tracer.more/0`).
  """
  @spec drain(t(), pos_integer()) :: {[Event.t()], Tracer.more(), t()}
  def drain(%module{} = backend, max), do: module.drain(backend, max)

  @doc """
  A recorder's ring kept on another node by its agent's worker (what its tracer queued
  goes in first): `{events, figures}`, decoded, oldest first, with the ring's `kept`,
  `kept_bytes` and `overwritten`.
  """
  @spec ring(Remote.t()) :: {[Event.t()], map()}
  def ring(%Remote{} = backend), do: Remote.ring(backend)

  @doc """
  The trace's node and, for another node's, that node's agent worker (where the `to:`
  option's files of its events are written: `KinoTrace.File.Writer`); `nil` for this node.
  """
  @spec workers(struct() | nil) :: %{node() => pid() | nil}
  def workers(%Remote{node: node, worker: worker}), do: %{node => worker}
  def workers(_backend), do: %{node() => nil}

  @doc """
  The snapshots a recorder's triggers took on another node (its agent's worker keeps them
  until taken), taken now, oldest first: `{meta, events}` each, decoded; `meta` has the
  `:trigger`, the triggering event's `:pid` and `:time` (monotonic, on that node) and
  `:taken_at`.
  """
  @spec take_snapshots(Remote.t()) :: [{map(), [Event.t()]}]
  def take_snapshots(%Remote{} = backend), do: Remote.take_snapshots(backend)

  @doc "The tracer's counters (see `KinoTrace.Tracer.counters/1`); the last known ones once the agent is gone."
  @spec counters(t()) :: map()
  def counters(%module{} = backend), do: module.counters(backend)

  @doc "Closes the tracer's session: nothing more is accepted, what is queued is freed."
  @spec close(t()) :: :ok
  def close(%module{} = backend), do: module.close(backend)

  @doc """
  Destroys the trace's OTP session (here through `KinoTrace.Backend.BifWorkaround.destroy/2`, with the given
  function patterns, see there). What the tracer queued before stays to be drained.
  """
  @spec destroy(t(), list()) :: t()
  def destroy(%{session: nil} = backend, _functions), do: backend
  def destroy(%module{} = backend, functions), do: module.destroy(backend, functions)

  @doc """
  Ends the trace's agent worker on another node and waits until that node is as it was
  (`KinoTrace.Agent.stop/1`: `:removed`, `:kept` or `:lost`); `nil` for this node's.
  Call it after `close/1` and `destroy/2`.
  """
  @spec release(t()) :: KinoTrace.Agent.release() | nil
  def release(%module{} = backend), do: module.release(backend)

  @doc "The tracer it runs (and why the fallback), as `Kino.Trace.info/1` tells it."
  @spec mode(t()) :: mode()
  def mode(%module{} = backend), do: module.mode(backend)

  @doc """
  Whether this node's safeguards run for it (`KinoTrace.Session.Safeguards`): it traces
  this node (another node's agent runs its own there).
  """
  @spec safeguards?(t()) :: boolean()
  def safeguards?(%module{} = backend), do: module.safeguards?(backend)

  @doc """
  Whether events traced before now may still be on their way to the tracer (this node's
  fallback tracer is a process: a request first waits for the VM to deliver them).
  """
  @spec in_flight?(t()) :: boolean()
  def in_flight?(%module{} = backend), do: module.in_flight?(backend)

  @doc "The id a trace on it takes (the native tracer's ids are the traces'); nil: one of `KinoTrace.Server.new_id/0`."
  @spec trace_id(t() | nil) :: pos_integer() | nil
  def trace_id(nil), do: nil
  def trace_id(%module{} = backend), do: module.trace_id(backend)

  @doc "What `:trace.session_create/3` and `:trace.info(_, _, :tracer)` name as the tracer (nil: another node's)."
  @spec tracer_spec(t()) :: term()
  def tracer_spec(%module{} = backend), do: module.tracer_spec(backend)

  # --- decoding, for the stack guard ------------------------------------------------------

  @doc "Functions traced without their returns (`KinoTrace.Tracer.Decoder.no_returns/2`)."
  @spec no_returns(t(), MapSet.t(mfa())) :: t()
  def no_returns(%{decoder: %decoder{} = state} = backend, mfas),
    do: %{backend | decoder: decoder.no_returns(state, mfas)}

  @doc "Forgets `pid`'s open calls (`KinoTrace.Tracer.Decoder.unpair/2`)."
  @spec unpair(t(), pid()) :: t()
  def unpair(%{decoder: %decoder{} = state} = backend, pid),
    do: %{backend | decoder: decoder.unpair(state, pid)}

  @doc "The processes with open calls since the last time (`KinoTrace.Tracer.Decoder.take_callers/1`)."
  @spec take_callers(t()) :: {[pid()], t()}
  def take_callers(%{decoder: %decoder{} = state} = backend) do
    {callers, state} = decoder.take_callers(state)
    {callers, %{backend | decoder: state}}
  end

  # --- this node's tracer -------------------------------------------------------------------

  @doc """
  The process flags to set for `flags` in a session of this node's tracer (for the
  fallback, with `:call`, its call match specs must come from `trace/3` or `run/3`).
  """
  @spec flags(local(), [atom()]) :: [atom()]
  def flags(%module{} = backend, flags), do: module.flags(backend, flags)

  @doc "A new OTP trace session with this node's tracer (the stack guard's)."
  @spec session_create(local()) :: term()
  def session_create(backend), do: :trace.session_create(:kino_trace, tracer_spec(backend), [])

  @doc """
  Has the tracer count, in the traced processes' own trace callbacks (native) or as its
  process receives their messages (fallback), each process's open calls of `modules`
  (`[]`: off): a process with too many is held (the native tracer discards its calls, so
  no return-trace frame is pushed; the fallback switches its call flag off in the
  attached session) and the owner gets `{:kino_trace, id, {:loop, pid, mfa}}`
  (`KinoTrace.Session.StackGuard`).
  """
  @spec set_loop_modules(local(), [module()]) :: :ok
  def set_loop_modules(%module{} = backend, modules),
    do: module.set_loop_modules(backend, modules)

  @doc "A held process counts from 0 again (`exempt` false), or never again (true)."
  @spec loop_release(local(), pid(), boolean()) :: :ok
  def loop_release(%module{} = backend, pid, exempt),
    do: module.loop_release(backend, pid, exempt)

  @doc """
  A held process goes on as it was, traced with `call_flags` in `session` (the fallback
  switched its call flag off there), counting from 0 again.
  """
  @spec loop_resume(local(), term(), pid(), [atom()]) :: :ok
  def loop_resume(%module{} = backend, session, pid, call_flags),
    do: module.loop_resume(backend, session, pid, call_flags)
end
