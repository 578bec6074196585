defmodule KinoTrace.Session.Safeguards do
  @moduledoc false
  # What a trace of this node does that one of another node does not (that node's
  # agent does its own there): each function here does nothing for a backend that does
  # not support them (`KinoTrace.Backend.safeguards?/1`). It owns
  #
  #   * keeping this session and kino_trace's own processes out of the trace
  #     (KinoTrace.Internal);
  #   * the BIF re-assert (OTP 27.3, erlang/otp#10349, see KinoTrace.Backend.BifWorkaround):
  #     the trace's BIF patterns, set again in turn on every tick;
  #   * the reload re-apply: one probe per traced module, which tells when a reload
  #     dropped the module's patterns;
  #   * the stack guard (KinoTrace.Session.StackGuard): started with the patterns, sampling on
  #     its own timer, taking tail-call loops off return tracing as they show.
  #
  #   * the BIF watch of a plan that asks for it (`Kino.Trace.Plan.watch_bifs/1`, a
  #     capture's): whether BIF tracing was switched off since before its BIF patterns
  #     were set, which the info tells (`untraced_bifs/1`).
  #
  # Works on the session's state: its `bifs`, `bif_cursor`, `bif_watch`, `probes` and
  # `guard` fields.

  alias KinoTrace.Pattern
  alias KinoTrace.Plan.Functions
  alias KinoTrace.Backend
  alias KinoTrace.Backend.BifWorkaround
  alias KinoTrace.Session.StackGuard

  # Another tool ending its trace session switches BIF tracing off without a trace of
  # it (:trace.info/3 still says traced), so a trace of BIFs sets its BIF patterns
  # again: every tick, at most @bifs_per_tick of them in turn (each call costs the VM a
  # code barrier). They stay set in the session; this switches them back on.
  @bifs_per_tick 32

  @doc """
  Keeps this session out of its trace (it calls plenty of functions a user may trace),
  and kino_trace's own processes, once the plan's process flags are set.
  """
  @spec started(map()) :: :ok
  def started(%{backend: backend}) do
    if Backend.safeguards?(backend) do
      Backend.trace(backend, :process, [self(), false, [:all]])
      KinoTrace.Internal.add_session(backend.session)
    end

    :ok
  end

  @doc "After the fallback's restore: kino_trace's own processes and the stack guard's out again."
  @spec restored(map()) :: :ok
  def restored(state) do
    if Backend.safeguards?(state.backend) do
      KinoTrace.Internal.add_session(state.backend.session)
      StackGuard.restore(state.guard)
    end

    :ok
  end

  @doc """
  Before the match specs of `functions` are set: the BIF patterns to re-assert, checked
  in before any BIF pattern is set (`KinoTrace.Backend.BifWorkaround.check_in/1`), and the tracer's loop guard watching the modules with no object file when the
  trace has return actions (`returns?`, see `KinoTrace.Session.StackGuard.watch/3`).
  """
  @spec prepare(map(), Functions.t(), boolean()) :: map()
  def prepare(state, functions, returns?) do
    if Backend.safeguards?(state.backend),
      do: do_prepare(state, functions, returns?),
      else: %{state | bifs: []}
  end

  defp do_prepare(state, functions, returns?) do
    StackGuard.watch(state.backend, functions, returns?)
    state = watch_bifs(state, functions)
    %{state | bifs: BifWorkaround.check_in(functions)}
  end

  # Watched from before the BIF patterns are set (a plan's patterns set again keep the
  # first watch, and cover the BIFs of the new ones).
  defp watch_bifs(%{plan: %{watch_bifs: true}} = state, functions) do
    case {BifWorkaround.covered(functions), state.bif_watch} do
      {[], nil} ->
        state

      {covered, nil} ->
        {watch, count} = BifWorkaround.watch(self())
        %{state | bif_watch: {watch, count, covered}}

      {covered, {watch, count, _}} ->
        %{state | bif_watch: {watch, count, covered}}
    end
  end

  defp watch_bifs(state, _functions), do: state

  @doc """
  The BIFs whose calls may have gone untraced since the watch began (BIF tracing was
  switched off meanwhile: all the BIFs the trace covers), `[]` when none; `nil` when
  the session does not watch.
  """
  @spec untraced_bifs(map()) :: [mfa()] | nil
  def untraced_bifs(%{bif_watch: nil}), do: nil

  def untraced_bifs(%{bif_watch: {watch, count, covered}}),
    do: if(BifWorkaround.switch_offs(watch) != count, do: covered, else: [])

  @doc "Once the match specs of `functions` (for `patterns`) are set: the stack guard and the probes."
  @spec installed(map(), Functions.t(), [Pattern.t()]) :: map()
  def installed(state, functions, patterns) do
    if Backend.safeguards?(state.backend) do
      guard = StackGuard.set_plan(state.guard || start_guard(state), functions)
      %{state | guard: guard, probes: probes(patterns)}
    else
      %{state | guard: nil, probes: %{}}
    end
  end

  @doc "The match specs of `targets` were removed: nothing of them to guard or re-assert."
  @spec removed(map(), list()) :: map()
  def removed(state, targets),
    do: %{state | guard: StackGuard.clear(state.guard, targets), bifs: []}

  @doc "Tracing ends: this session out of KinoTrace.Internal, checked out of the BIF work-around (before the OTP session is destroyed)."
  @spec ending(map()) :: :ok
  def ending(state) do
    if Backend.safeguards?(state.backend) do
      KinoTrace.Internal.remove_session(state.backend.session)
      if state.bif_watch, do: BifWorkaround.unwatch(elem(state.bif_watch, 0))
      # destroying a session must not switch off other traces of BIFs
      BifWorkaround.check_out()
    end

    :ok
  end

  # --- BIFs (OTP 27.3, erlang/otp#10349: see KinoTrace.Backend.BifWorkaround) ---------------

  @doc "Sets `count` of the BIF patterns again, in turn (#{@bifs_per_tick} on a tick)."
  @spec reassert_bifs(map(), non_neg_integer()) :: map()
  def reassert_bifs(state, count \\ @bifs_per_tick)

  def reassert_bifs(%{status: :running, bifs: [_ | _] = bifs} = state, count) do
    case BifWorkaround.reassert_batch(bifs, state.bif_cursor, count) do
      nil ->
        state

      {batch, cursor} ->
        flags = state.plan.calls.match_flags

        if tracing?(state),
          do:
            Backend.run(
              state.backend,
              for({mfa, spec} <- batch, do: {:function, [mfa, spec, flags]})
            )

        %{state | bif_cursor: cursor}
    end
  end

  def reassert_bifs(state, _count), do: state

  @doc "Sets every BIF pattern again (another kino_trace session cleared one)."
  @spec reassert_all_bifs(map()) :: map()
  def reassert_all_bifs(state), do: reassert_bifs(state, length(state.bifs))

  # --- modules reloaded while traced ------------------------------------------------------

  @doc """
  Whether a traced module was reloaded (loading a new version of a module drops its
  trace patterns): its probe, one of its traced functions, is no longer traced.
  """
  @spec reloaded?(map()) :: boolean()
  def reloaded?(%{status: :running} = state) do
    tracing?(state) and
      Enum.any?(state.probes, fn {m, mfa} ->
        :erlang.module_loaded(m) and
          Backend.trace(state.backend, :info, [mfa, :traced]) == {:traced, false}
      end)
  end

  def reloaded?(_state), do: false

  defp probes(patterns) do
    for %Pattern{module: m} = pattern <- patterns, m != :_, reduce: %{} do
      probes ->
        case not Map.has_key?(probes, m) && probe(pattern) do
          mfa when is_tuple(mfa) -> Map.put(probes, m, mfa)
          _ -> probes
        end
    end
  end

  defp probe(%Pattern{module: m, function: f, arity: a}) when is_integer(a), do: {m, f, a}

  defp probe(%Pattern{module: m, function: f}) do
    functions = m.module_info(:functions)

    # a module pattern leaves the compiler-generated functions untraced
    traced =
      for {name, arity} = fa <- functions,
          f == name or (f == :_ and not KinoTrace.Pattern.Generated.generated?(name, arity)),
          do: fa

    case traced do
      [{f, a} | _] -> {m, f, a}
      [] -> nil
    end
  rescue
    _ -> nil
  end

  # --- the stack guard ----------------------------------------------------------------------

  @doc "Stops the stack guard (once the OTP session is destroyed)."
  @spec stop_guard(map()) :: map()
  def stop_guard(state), do: %{state | guard: StackGuard.stop(state.guard)}

  # The stack guard samples on its own timer (a :stack_guard message to the session).
  defp start_guard(state) do
    guard = StackGuard.new(state.backend, state.plan)
    if guard, do: Process.send_after(self(), :stack_guard, StackGuard.interval())
    guard
  end

  @doc "The stack guard's sample (on its timer): callers too deep are taken off return tracing."
  @spec check_stacks(map()) :: map()
  def check_stacks(state) do
    if tracing?(state) do
      {callers, backend} = Backend.take_callers(state.backend)
      {guard, moved} = StackGuard.check(state.guard, callers)
      Process.send_after(self(), :stack_guard, StackGuard.interval())
      unpair(%{state | guard: guard, backend: backend}, moved)
    else
      state
    end
  end

  @doc """
  Tail-call loops the code did not show, taken off return tracing at once: sampling
  their stacks would be too late (KinoTrace.Session.StackGuard.loops/2). Not once tracing
  ended: what is delivered then must not make the guard a session.
  """
  @spec guard_loops(map(), [Kino.Trace.Event.t()]) :: map()
  def guard_loops(%{guard: guard, status: :running} = state, events) when guard != nil do
    if tracing?(state) do
      {guard, moved} = StackGuard.loops(guard, events)
      unpair(%{state | guard: guard}, moved)
    else
      state
    end
  end

  def guard_loops(state, _events), do: state

  @doc """
  The tracer holds a process that made too many calls of a module with no object file
  and no return (`KinoTrace.Session.StackGuard.held/3`): moved off return tracing when it
  loops through tail calls, else let go on.
  """
  @spec loop_held(map(), pid(), mfa()) :: map()
  def loop_held(%{guard: guard} = state, pid, mfa) when guard != nil do
    {guard, moved} = StackGuard.held(guard, pid, mfa)
    unpair(%{state | guard: guard}, moved)
  end

  # (no guard: nothing to move it to, it goes on)
  def loop_held(state, pid, _mfa) do
    if Backend.safeguards?(state.backend), do: Backend.loop_release(state.backend, pid, false)
    state
  end

  defp unpair(state, pids),
    do: %{state | backend: Enum.reduce(pids, state.backend, &Backend.unpair(&2, &1))}

  defp tracing?(state), do: Backend.tracing?(state.backend)
end
