defmodule KinoTrace.Session.Setup do
  @moduledoc false
  # What a session sets in its OTP trace session, and sets again or removes later: the
  # tracer of another node (started there by kino_trace's agent), the plan's process
  # flags (and message specs) and its match specs, one per target, broadest first
  # (KinoTrace.Plan.Functions). Patterns are set again on resume, on set_patterns/2 and
  # after a reload; process flags after the fallback's restore. The local safeguards
  # that come with them are KinoTrace.Session.Safeguards'.
  #
  # Works on the session's state: its `backend` and `plan` fields (and
  # `worker_ref` and `agent` for another node's trace).

  alias Kino.Trace.Plan
  alias KinoTrace.Pattern
  alias KinoTrace.Plan.Functions
  alias KinoTrace.Backend
  alias KinoTrace.Backend.BifWorkaround
  alias KinoTrace.Session.{Safeguards, StackGuard, Subscribers}

  @doc """
  Sets the trace up: another node's tracer first (raises `ArgumentError` when it cannot
  be started), then the plan's process flags and match specs.
  """
  @spec start(map()) :: map()
  def start(state) do
    state = start_remote(state)
    set_process_flags(state)
    # after the process flags, which may cover every process (another node's agent keeps
    # its own processes out of its traces)
    Safeguards.started(state)
    install(state, state.plan)
  end

  # The tracer of a trace of another node, started there by kino_trace's agent.
  defp start_remote(%{backend: nil, plan: %Plan{nodes: [node]} = plan} = state) do
    # (a recorder's ring stays on that node: its agent's worker keeps it, and runs its
    # triggers)
    ring = plan.record && Backend.Remote.ring_config(plan.record)
    opts = [agent: plan.options[:agent], ring: ring, pairing: plan.options[:return]]

    case Backend.start_remote(self(), state.id, plan.limits, node, opts) do
      {:ok, backend} ->
        %{state | backend: backend, worker_ref: Process.monitor(backend.worker), agent: :running}

      {:error, message} ->
        raise ArgumentError, message
    end
  end

  defp start_remote(state), do: state

  defp set_process_flags(%{backend: backend, plan: plan} = state) do
    # the message specs first: until they are set every message of a traced process is
    # recorded (local ones in a trace of messages(:distributed); issue 23 item 3)
    if messages = plan.messages do
      Backend.trace(backend, :send, [messages.specs.send, []])
      Backend.trace(backend, :recv, [messages.specs.recv, []])
    end

    for {targets, flags} <- Plan.process_flags(plan), target <- targets do
      if target in [:all, :existing] and Backend.safeguards?(backend) and calls_only?(flags),
        do: Backend.trace(backend, :process, [target, true, flags]),
        else: trace_process!(state, target, flags)
    end
  end

  # Flags that record nothing while no call pattern is set. At the start, before the
  # patterns, :all and :existing take one `:trace` call instead of one per process
  # (each waits for the whole VM: with hot traced functions on a loaded machine,
  # calls/2 took seconds to start, issue 36 item 2): kino_trace's own processes, traced
  # for that moment, record nothing, and KinoTrace.Internal takes them out again before
  # the patterns are set (Safeguards.started/1).
  @calls_only [
                :call,
                :return_to,
                :arity,
                :scheduler_id,
                :timestamp,
                :strict_monotonic_timestamp,
                :monotonic_timestamp
              ] ++
                [:set_on_spawn, :set_on_first_spawn, :set_on_link, :set_on_first_link, :silent]
  defp calls_only?(flags), do: Enum.all?(flags, &(&1 in @calls_only))

  @doc """
  Sets the plan's process flags again (a target gone since is skipped), then keeps out
  what is kept out: this process, kino_trace's own, the held and excluded ones, and the
  stack guard's (moved off this session). Processes that only inherited their flags
  (children) are not traced again. After this node's fallback's restore.
  """
  @spec restore(map()) :: :ok
  def restore(%{backend: backend, plan: plan} = state) do
    # not the stack guard's: switched on for a moment, a loop would push frames until
    # switched off again, which waits for the running process's locks (issue 36.5)
    moved = StackGuard.moved(state.guard)

    for {targets, flags} <- Plan.process_flags(plan),
        target <- targets,
        not is_map_key(moved, target) do
      unless_gone(fn -> trace_process!(state, target, flags, moved) end)
    end

    for pid <- [self() | Subscribers.kept_out(state)] do
      unless_gone(fn -> Backend.trace(backend, :process, [pid, false, [:all]]) end)
    end

    Safeguards.restored(state)
  end

  # `:all` and `:existing` on this node: every process but kino_trace's own, one by one,
  # so that none of those is traced even for a moment (KinoTrace.Internal keeps them
  # out of the session once it is added, but what they did meanwhile would be recorded:
  # issue 23 item 3); `:new` ones are kept out as they register. (`:all` sets processes'
  # flags, not ports', either way.)
  defp trace_process!(state, target, flags, skip \\ %{})

  defp trace_process!(%{backend: backend}, target, flags, skip)
       when target in [:all, :existing] do
    if Backend.safeguards?(backend),
      do: trace_each!(backend, target, flags, skip),
      else: Backend.trace(backend, :process, [target, true, flags])
  end

  # A pid that exited since the options were checked is a bad target, not a crash.
  defp trace_process!(%{backend: backend}, target, flags, _skip) when is_pid(target) do
    Backend.trace(backend, :process, [target, true, flags])
  rescue
    ArgumentError ->
      raise ArgumentError, "cannot trace #{inspect(target)}: the process is not alive"
  end

  defp trace_process!(%{backend: backend}, target, flags, _skip),
    do: Backend.trace(backend, :process, [target, true, flags])

  defp trace_each!(backend, target, flags, skip) do
    if target == :all, do: Backend.trace(backend, :process, [:new, true, flags])
    own = MapSet.new([self() | KinoTrace.Internal.pids()] ++ Map.keys(skip))

    for pid <- Process.list(), not MapSet.member?(own, pid) do
      unless_gone(fn -> Backend.trace(backend, :process, [pid, true, flags]) end)
    end

    :ok
  end

  # Runs `fun`, which sets a process's flags; a process that exited meanwhile (`:trace`
  # raises ArgumentError) is skipped.
  defp unless_gone(fun) do
    fun.()
  rescue
    ArgumentError -> :ok
  end

  @doc "The plan's call patterns."
  @spec patterns(map()) :: [Pattern.t()]
  def patterns(%{plan: %Plan{calls: nil}}), do: []
  def patterns(%{plan: %Plan{calls: calls}}), do: calls.patterns

  # Sets the plan's match specs: one per target, broadest first (see
  # KinoTrace.Plan.Functions), linear in the number of patterns.
  defp install(state, %Plan{calls: nil} = plan), do: %{state | plan: plan}

  defp install(state, %Plan{calls: calls} = plan) do
    functions = calls.functions
    # the BIF work-around (erlang/otp#10349) and the stack guard are this node's
    state = Safeguards.prepare(state, functions, calls.returns != [])
    {ops, after_ops} = Functions.install_ops(functions, calls.match_flags)
    Backend.run(state.backend, ops, after_ops)
    backend = Backend.no_returns(state.backend, functions.no_returns)
    Safeguards.installed(%{state | plan: plan, backend: backend}, functions, calls.patterns)
  end

  @doc "Sets `patterns` (in place of the plan's) in the trace."
  @spec apply_patterns(map(), [Pattern.t()]) :: map()
  def apply_patterns(state, patterns), do: install(state, Plan.put_patterns(state.plan, patterns))

  @doc "Removes the plan's match specs from the trace (they stay in the plan: pause/1)."
  @spec remove_patterns(map()) :: map()
  def remove_patterns(state) do
    targets = Functions.targets(patterns(state))
    # a BIF's pattern is never cleared: that switches it off in every session (erlang/otp#10349)
    Backend.run(state.backend, BifWorkaround.untrace_ops(targets, state.plan.calls.match_flags))
    Safeguards.removed(state, targets)
  end

  @doc """
  Parses `inputs` and puts the good ones in place of the plan's patterns: set in the
  trace while it runs, kept for resume while it is paused. Returns what each input gave.
  """
  @spec set_patterns(map(), [String.t()] | String.t()) ::
          {[{String.t(), :ok | {:ok, [String.t()]} | {:error, String.t()}}], map()}
  def set_patterns(state, inputs) do
    results = Pattern.parse_each(inputs, Plan.pattern_opts(state.plan))
    good = for {_input, {:ok, pattern, _warnings}} <- results, do: pattern

    state =
      cond do
        not Backend.tracing?(state.backend) ->
          %{state | plan: Plan.put_patterns(state.plan, good)}

        state.status == :paused ->
          %{remove_patterns(state) | plan: Plan.put_patterns(state.plan, good)}

        true ->
          state |> remove_patterns() |> apply_patterns(good)
      end

    reply =
      Enum.map(results, fn
        {input, {:ok, _pattern, []}} -> {input, :ok}
        {input, {:ok, _pattern, warnings}} -> {input, {:ok, warnings}}
        {input, {:error, message}} -> {input, {:error, message}}
      end)

    {reply, state}
  end

  @doc """
  Loading a new version of a module drops its trace patterns: when a traced module was
  reloaded (KinoTrace.Session.Safeguards.reloaded?/1), every pattern is set again, and
  counted.
  """
  @spec reapply_if_reloaded(map()) :: map()
  def reapply_if_reloaded(state) do
    if Safeguards.reloaded?(state) do
      state = apply_patterns(state, patterns(state))
      %{state | reapplied: state.reapplied + 1}
    else
      state
    end
  end
end
