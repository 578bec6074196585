defmodule KinoTrace.Session.Reaper do
  @moduledoc false
  # Destroys the OTP trace sessions of ended traces, without breaking the traces of BIFs
  # that are still running.
  #
  # On OTP 27.3 (erlang/otp#10349, fixed upstream), destroying *any* trace session, or
  # clearing a BIF's trace pattern in one session, switches off the tracing of every BIF
  # (such as `:ets.insert/2`) in every other session, while `:trace.info/3` still says it
  # is traced. Setting a BIF pattern again switches it back on.
  #
  # So kino_trace never destroys a session while one of its traces of a BIF is running:
  #
  #   * a trace checks in (`bif_trace/1`) before it sets a BIF pattern;
  #   * an ended trace hands its OTP session here (`destroy/1`). With no BIF trace
  #     running it is destroyed at once; otherwise it is parked, with no process traced
  #     and its other patterns removed (so it costs nothing and records nothing), and
  #     destroyed when the last BIF trace ends.
  #
  # Both go through this one process, so no session is destroyed between a trace's
  # check-in and its patterns. At most 1 000 sessions are parked: past that they are
  # destroyed all the same and the traces of BIFs set their patterns again at once. What other tools do is out of reach: a BIF trace also sets
  # its BIF patterns again once a second (see `KinoTrace.Session`).
  #
  # kino_trace never clears a BIF's pattern either: a trace that stops tracing a BIF sets
  # a match spec that matches nothing on it instead (`untrace_ops/2`).
  #
  # ## The canary
  #
  # Whatever switched BIF tracing off (another tool, the bound above), it is seen while
  # someone watches: from `watch/1` to `unwatch/1` the reaper traces one BIF,
  # `:erlang.adler32_combine/3`, in a session of its own, for one process of its own that
  # only calls it when a check asks. When that call is not traced, BIF tracing was switched
  # off since the previous check: the count goes up, the canary is set again and the
  # running traces of BIFs set their patterns again at once. A trace that watches before
  # it sets its BIF patterns and unwatches once its calls were delivered (as
  # `Kino.Trace.capture/3` does) knows from the two counts whether it may have lost some.
  # With no one watching there is no canary: no session, no process (its session goes as
  # any other, parked while a trace of BIFs runs).

  use GenServer

  @max_parked 1_000
  # the canary: a BIF that only the reaper traces, in one process of its own
  @canary {:erlang, :adler32_combine, 3}

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @doc """
  Checks in the calling process as running a trace of BIFs, until it calls
  `bif_trace_ended/0` or exits. Call it before setting a BIF pattern.

  ## Examples

      iex> session = :trace.session_create(:reaper_doc, self(), [])
      iex> KinoTrace.Session.Reaper.destroy(session)
      :ok
      iex> elem(session, 1) in :trace.session_info(:all)
      false
  """
  @spec bif_trace(pid()) :: :ok
  def bif_trace(pid \\ self()), do: call({:bif_trace, pid}, :ok)

  @doc "The calling process no longer runs a trace of BIFs."
  @spec bif_trace_ended(pid()) :: :ok
  def bif_trace_ended(pid \\ self()), do: call({:bif_trace_ended, pid}, :ok)

  @doc """
  Destroys `session` (a handle from `:trace.session_create/3`), now or, while a trace
  of BIFs runs, once none does. Untraces every process and removes the given non-BIF
  function patterns first.
  """
  @spec destroy(term(), [mfa_pattern]) :: :ok when mfa_pattern: {atom(), atom(), atom() | arity()}
  def destroy(session, functions \\ []) do
    call({:destroy, session, functions}, fn -> :trace.session_destroy(session) end)
  end

  @doc "The sessions parked until no trace of BIFs runs."
  @spec parked() :: non_neg_integer()
  def parked, do: call(:parked, 0)

  @doc """
  Starts watching for BIF tracing being switched off (see the canary above), until
  `unwatch/1` or until `owner` exits. Returns the watch and how many times a switch-off
  was found so far. The same count from `unwatch/1`, called once a trace's calls were
  delivered, means none of them was lost to a switch-off.

      iex> {watch, n} = KinoTrace.Session.Reaper.watch(self())
      iex> KinoTrace.Session.Reaper.unwatch(watch) == n
      true
  """
  @spec watch(pid()) :: {reference() | nil, non_neg_integer()}
  def watch(owner) when is_pid(owner), do: call({:watch, owner}, {nil, 0})

  @doc "Checks once more, ends the watch and returns the count (see `watch/1`)."
  @spec unwatch(reference() | nil) :: non_neg_integer()
  def unwatch(nil), do: 0
  def unwatch(watch) when is_reference(watch), do: call({:unwatch, watch}, 0)

  @doc """
  The `:trace.function/4` calls (as `{:function, args}`, see `KinoTrace.Session.Backend.run/3`)
  that stop tracing `targets` (`{m, f, a}` with `:_` as wildcards), traced with `flags`
  (`[:local]` or `[:global]`), without switching off BIF tracing elsewhere: clearing a
  BIF's pattern switches its tracing off in every session (erlang/otp#10349), so a
  target that covers BIFs gets a match spec that matches nothing instead (it goes with
  the session); the others are cleared. Only a target on every module is cleared all
  the same (the canary sees that).

      iex> KinoTrace.Session.Reaper.untrace_ops([{:ets, :insert, 2}, {Enum, :map, 2}], [:local])
      [{:function, [{:ets, :insert, 2}, [{:_, [false], []}], [:local]]},
       {:function, [{Enum, :map, 2}, false, [:local]]},
       {:function, [{Enum, :map, 2}, false, [:global]]}]
  """
  @spec untrace_ops([{atom(), atom(), atom() | arity()}], [:local | :global]) :: [{:function, list()}]
  def untrace_ops(targets, flags) do
    Enum.flat_map(targets, fn {m, f, a} = target ->
      if m != :_ and bif?(m, f, a),
        do: [{:function, [target, [{:_, [false], []}], flags]}],
        else: for(flag <- [:local, :global], do: {:function, [target, false, [flag]]})
    end)
  end

  # Without the reaper (kino_trace stopped), act at once.
  defp call(request, fallback) do
    GenServer.call(__MODULE__, request, :infinity)
  catch
    :exit, {:noproc, _} -> if is_function(fallback), do: (fallback.(); :ok), else: fallback
  end

  # --- the reaper ---------------------------------------------------------------------

  @impl true
  def init([]) do
    # none of kino_trace's traces records the reaper
    KinoTrace.Internal.register(self())
    {:ok, %{bif_traces: %{}, parked: [], canary: nil, caller: nil, watchers: %{}, switch_offs: 0}}
  end

  @impl true
  def handle_call({:bif_trace, pid}, _from, state) do
    refs = Map.put_new_lazy(state.bif_traces, pid, fn -> Process.monitor(pid) end)
    {:reply, :ok, %{state | bif_traces: refs}}
  end

  def handle_call({:bif_trace_ended, pid}, _from, state) do
    {:reply, :ok, ended(state, pid)}
  end

  def handle_call({:destroy, session, functions}, _from, state) do
    {:reply, :ok, destroy(state, session, functions)}
  end

  def handle_call(:parked, _from, state), do: {:reply, length(state.parked), state}

  def handle_call({:watch, owner}, _from, state) do
    state = state |> ensure_canary() |> check_canary()
    watch = Process.monitor(owner)
    {:reply, {watch, state.switch_offs}, %{state | watchers: Map.put(state.watchers, watch, owner)}}
  end

  def handle_call({:unwatch, watch}, _from, %{watchers: watchers} = state) when is_map_key(watchers, watch) do
    state = check_canary(state)
    Process.demonitor(watch, [:flush])
    {:reply, state.switch_offs, unwatched(state, watch)}
  end

  def handle_call({:unwatch, _ended}, _from, state), do: {:reply, state.switch_offs, state}

  @impl true
  def handle_info({:DOWN, ref, :process, pid, _reason}, state) do
    state = if Map.has_key?(state.watchers, ref), do: unwatched(state, ref), else: ended(state, pid)
    {:noreply, state}
  end
  # (the canary's, none expected outside check_canary/1)
  def handle_info({:trace, _pid, :call, _mfa}, state), do: {:noreply, state}

  # Destroys a session now, or parks it while a trace of BIFs runs.
  defp destroy(state, session, functions) do
    cond do
      state.bif_traces == %{} ->
        :trace.session_destroy(session)
        state

      # Bounded: past @max_parked the parked sessions go after all, and the traces of
      # BIFs set their patterns again at once.
      length(state.parked) >= @max_parked ->
        Enum.each([session | state.parked], &:trace.session_destroy/1)
        for pid <- Map.keys(state.bif_traces), do: send(pid, :reassert_bifs)
        %{state | parked: []}

      true ->
        quiet(session, functions)
        %{state | parked: [session | state.parked]}
    end
  end

  # The canary while someone watches (a process cannot trace itself: the reaper traces
  # a process of its own that calls the canary; no trace of kino_trace's records it).
  defp ensure_canary(%{canary: nil} = state) do
    caller = spawn_link(&canary_caller/0)
    KinoTrace.Internal.register(caller)
    canary = :trace.session_create(:kino_trace_canary, self(), [])
    :trace.process(canary, caller, true, [:call])
    arm(canary)
    %{state | canary: canary, caller: caller}
  end

  defp ensure_canary(state), do: state

  # The last watch gone, so is the canary (its session as any other: parked while a
  # trace of BIFs runs, since destroying it would switch their BIFs off).
  defp unwatched(state, watch) do
    state = %{state | watchers: Map.delete(state.watchers, watch)}

    if state.watchers == %{} and state.canary != nil do
      Process.unlink(state.caller)
      Process.exit(state.caller, :kill)
      destroy(%{state | canary: nil, caller: nil}, state.canary, [])
    else
      state
    end
  end

  defp ended(state, pid) do
    {ref, refs} = Map.pop(state.bif_traces, pid)
    if ref, do: Process.demonitor(ref, [:flush])

    if refs == %{} do
      Enum.each(state.parked, &:trace.session_destroy/1)
      %{state | bif_traces: refs, parked: []}
    else
      %{state | bif_traces: refs}
    end
  end

  # Has the caller call the canary and waits for the trace message of that call: none
  # means BIF tracing was switched off.
  defp check_canary(%{caller: caller} = state) do
    ref = make_ref()
    send(caller, {:call, self(), ref})

    receive do
      {^ref, :called} -> :ok
    end

    delivered = :erlang.trace_delivered(caller)

    receive do
      {:trace_delivered, ^caller, ^delivered} -> :ok
    end

    receive do
      {:trace, ^caller, :call, {:erlang, :adler32_combine, _}} -> state
    after
      0 ->
        arm(state.canary)
        for pid <- Map.keys(state.bif_traces), do: send(pid, :reassert_bifs)
        %{state | switch_offs: state.switch_offs + 1}
    end
  end

  defp arm(canary), do: :trace.function(canary, @canary, true, [:global])

  # Calls the canary as code calls a BIF (not through apply/3), when asked.
  defp canary_caller do
    receive do
      {:call, from, ref} ->
        _ = :erlang.adler32_combine(1, 1, 1)
        send(from, {ref, :called})
        canary_caller()
    end
  end

  # A parked session records nothing: no process is traced. Its patterns of ordinary
  # functions go (clearing those is safe); its BIF patterns stay until it is destroyed.
  defp quiet(session, functions) do
    :trace.process(session, :all, false, [:all])
    :trace.send(session, false, [])
    :trace.recv(session, false, [])

    for {m, f, a} = mfa <- functions, not bif?(m, f, a), flags <- [[:local], [:global]] do
      :trace.function(session, mfa, false, flags)
    end
  rescue
    ArgumentError -> :ok
  end

  @doc """
  Whether `{m, f, a}` (`:_` as wildcards) names or covers a BIF.

      iex> KinoTrace.Session.Reaper.bif?(:ets, :insert, 2)
      true
      iex> KinoTrace.Session.Reaper.bif?(:ets, :_, :_)
      true
      iex> KinoTrace.Session.Reaper.bif?(Enum, :map, 2)
      false
  """
  @spec bif?(atom(), atom(), atom() | arity()) :: boolean()
  def bif?(:_, _f, _a), do: true
  def bif?(m, f, a), do: bifs({m, f, a}) != []

  @doc """
  The BIFs that `{m, f, a}` (`:_` as wildcards, but in the module) names or covers.

      iex> KinoTrace.Session.Reaper.bifs({:ets, :insert, :_})
      [{:ets, :insert, 2}]
  """
  @spec bifs({atom(), atom(), atom() | arity()}) :: [mfa()]
  def bifs({:_, _f, _a}), do: []

  def bifs({m, f, a}) do
    candidates = if is_integer(a), do: [{f, a}], else: exports(m)
    for {ef, ea} <- candidates, f in [:_, ef], a in [:_, ea], :erlang.is_builtin(m, ef, ea), do: {m, ef, ea}
  end

  defp exports(m) do
    if :erlang.module_loaded(m), do: m.module_info(:exports), else: []
  rescue
    _ -> []
  end
end
