defmodule KinoTrace.Backend.Reaper do
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
  # check-in and its patterns.
  #
  # At most 1 000 sessions are parked. Past that the reaper waits for a moment when no
  # trace of BIFs runs: new traces of BIFs wait to check in (up to half a second) while
  # the running ones end, then the parked sessions are destroyed and the waiting traces
  # go on. Traces that each last a moment (captures, a test's traces) never lose a call
  # to it (issue 36 item 4: 600 captures beside a churn of traces made more than 1 000
  # sessions, and destroying them all at once switched off the captures that ran). Only
  # a trace of BIFs still running after that (a long-lived one) sees them
  # destroyed all the same: it sets its BIF patterns again at once, and the canary
  # counts it. What other tools do is out of reach: a BIF trace also sets its BIF
  # patterns again once a second (see `KinoTrace.Session`).
  #
  # kino_trace never clears a BIF's pattern either: a trace that stops tracing a BIF sets
  # a match spec that matches nothing on it instead (`untrace_ops/2`).
  #
  # On a VM without the bug (probed once, when the reaper starts: `bif_bug?/0`), nothing
  # is parked: every session is destroyed as it comes, and no trace checks in.
  #
  # ## Off the caller's path
  #
  # Every `:trace` call that changes patterns or ends a session waits for the whole VM
  # (the code modification permission, one at a time VM-wide, and code barriers): with
  # hot traced functions on a loaded machine, hundreds of milliseconds each (issue 36
  # item 2: a stop/1 that waited for it took up to 5 s). So `destroy/2` and
  # `bif_trace_ended/1` only hand their work here and return; the reaper destroys (or
  # quiets and parks) one session per turn, in order, and answers check-ins between
  # turns, so a trace that starts waits for at most the one in progress. `sync/0`
  # returns once everything handed before it is done.
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
  # the session of a `Kino.Trace.capture/3` does) knows from the two counts whether it may have lost some.
  # With no one watching there is no canary: no session, no process (its session goes as
  # any other, parked while a trace of BIFs runs).

  use GenServer

  @max_parked 1_000
  # how long new traces of BIFs wait to check in while the parked sessions wait for a
  # moment with no trace of BIFs running (see above); the application's
  # :reaper_gate_ms when set (tests)
  @gate_ms 500
  alias KinoTrace.Backend.Reaper.Canary

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @doc """
  Checks in the calling process as running a trace of BIFs, until it calls
  `bif_trace_ended/0` or exits. Call it before setting a BIF pattern. (Past the bound
  on parked sessions it may wait, see above.)

  ## Examples

      iex> session = :trace.session_create(:reaper_doc, self(), [])
      iex> KinoTrace.Backend.Reaper.destroy(session)
      :ok
      iex> KinoTrace.Backend.Reaper.sync()
      :ok
      iex> elem(session, 1) in :trace.session_info(:all)
      false
  """
  @spec bif_trace(pid()) :: :ok
  def bif_trace(pid \\ self()), do: call({:bif_trace, pid}, :ok)

  @doc "The calling process no longer runs a trace of BIFs (handed over, see `sync/0`)."
  @spec bif_trace_ended(pid()) :: :ok
  def bif_trace_ended(pid \\ self()), do: cast({:bif_trace_ended, pid}, fn -> :ok end)

  @doc """
  Destroys `session` (a handle from `:trace.session_create/3`), now or, while a trace
  of BIFs runs, once none does. Untraces every process and removes the given non-BIF
  function patterns first. Returns at once: the reaper does it in turn (see `sync/0`).
  """
  @spec destroy(term(), [mfa_pattern]) :: :ok when mfa_pattern: {atom(), atom(), atom() | arity()}
  def destroy(session, functions \\ []) do
    cast({:destroy, session, functions}, fn -> :trace.session_destroy(session) end)
  end

  @doc "Returns once every session and check-out handed to the reaper before it is dealt with."
  @spec sync() :: :ok
  def sync, do: call(:sync, :ok)

  @doc "The sessions parked until no trace of BIFs runs (once what was handed before is dealt with)."
  @spec parked() :: non_neg_integer()
  def parked, do: call(:parked, 0)

  @doc """
  Whether this VM switches off BIF tracing in every session when one ends
  (erlang/otp#10349: OTP 27.3), as probed when kino_trace started.
  """
  @spec bif_bug?() :: boolean()
  def bif_bug?, do: :persistent_term.get({__MODULE__, :bif_bug}, true)

  @doc """
  Starts watching for BIF tracing being switched off (see the canary above), until
  `unwatch/1` or until `owner` exits. Returns the watch and how many times a switch-off
  was found so far. The same count from `unwatch/1`, called once a trace's calls were
  delivered, means none of them was lost to a switch-off.

      iex> {watch, n} = KinoTrace.Backend.Reaper.watch(self())
      iex> KinoTrace.Backend.Reaper.unwatch(watch) == n
      true
  """
  @spec watch(pid()) :: {reference() | nil, non_neg_integer()}
  def watch(owner) when is_pid(owner), do: call({:watch, owner}, {nil, 0})

  @doc "Checks once more and returns the count, the watch going on (see `watch/1`)."
  @spec switch_offs(reference() | nil) :: non_neg_integer()
  def switch_offs(nil), do: 0
  def switch_offs(watch) when is_reference(watch), do: call({:switch_offs, watch}, 0)

  @doc "Checks once more, ends the watch and returns the count (see `watch/1`)."
  @spec unwatch(reference() | nil) :: non_neg_integer()
  def unwatch(nil), do: 0
  def unwatch(watch) when is_reference(watch), do: call({:unwatch, watch}, 0)

  @doc """
  The `:trace.function/4` calls (as `{:function, args}`, see `KinoTrace.Backend.run/3`)
  that stop tracing `targets` (`{m, f, a}` with `:_` as wildcards), traced with `flags`
  (`[:local]` or `[:global]`), without switching off BIF tracing elsewhere: clearing a
  BIF's pattern switches its tracing off in every session (erlang/otp#10349), so a
  target that covers BIFs gets a match spec that matches nothing instead (it goes with
  the session); the others are cleared. Only a target on every module is cleared all
  the same (the canary sees that).

      iex> KinoTrace.Backend.Reaper.untrace_ops([{:ets, :insert, 2}, {Enum, :map, 2}], [:local])
      [{:function, [{:ets, :insert, 2}, [{:_, [false], []}], [:local]]},
       {:function, [{Enum, :map, 2}, false, [:local]]},
       {:function, [{Enum, :map, 2}, false, [:global]]}]
  """
  @spec untrace_ops([{atom(), atom(), atom() | arity()}], [:local | :global]) :: [
          {:function, list()}
        ]
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
    :exit, {:noproc, _} ->
      if is_function(fallback),
        do:
          (
            fallback.()
            :ok
          ),
        else: fallback
  end

  defp cast(request, fallback) do
    if Process.whereis(__MODULE__), do: GenServer.cast(__MODULE__, request), else: fallback.()
    :ok
  end

  # --- the reaper ---------------------------------------------------------------------

  @impl true
  def init([]) do
    # none of kino_trace's traces records the reaper
    KinoTrace.Internal.register(self())
    # its turns are bounded, and traces wait for them: not behind the traced processes
    Process.flag(:priority, :high)
    bug? = Canary.probe()
    :persistent_term.put({__MODULE__, :bif_bug}, bug?)

    {:ok,
     %{
       bug?: bug?,
       bif_traces: %{},
       parked: [],
       # sessions handed over and not dealt with yet, in order: {session, functions,
       # how} (`:new`; `:quiet`: parked before; `:force`: past the gate's time)
       pending: :queue.new(),
       # the callers of sync/0 and parked/0, answered once `pending` is empty
       syncs: [],
       canary: nil,
       caller: nil,
       watchers: %{},
       switch_offs: 0,
       # past @max_parked: the timer that ends the wait (nil: none), and the traces of
       # BIFs waiting to check in ({from, pid})
       gate: nil,
       waiting: []
     }}
  end

  @impl true
  def handle_call({:bif_trace, _pid}, _from, %{bug?: false} = state), do: {:reply, :ok, state}

  def handle_call({:bif_trace, pid}, _from, %{bif_traces: traces} = state)
      when is_map_key(traces, pid),
      do: {:reply, :ok, state}

  # the parked sessions wait for a moment with no trace of BIFs: a new one waits too
  def handle_call({:bif_trace, pid}, from, %{gate: gate} = state) when gate != nil,
    do: {:noreply, %{state | waiting: [{from, pid} | state.waiting]}}

  def handle_call({:bif_trace, pid}, _from, state), do: {:reply, :ok, check_in(state, pid)}

  def handle_call(request, from, state) when request in [:sync, :parked] do
    if :queue.is_empty(state.pending),
      do: {:reply, answer(request, state), state},
      else: {:noreply, %{state | syncs: [{from, request} | state.syncs]}}
  end

  def handle_call({:watch, owner}, _from, state) do
    state = state |> Canary.ensure() |> Canary.check()
    watch = Process.monitor(owner)

    {:reply, {watch, state.switch_offs},
     %{state | watchers: Map.put(state.watchers, watch, owner)}}
  end

  def handle_call({:unwatch, watch}, _from, %{watchers: watchers} = state)
      when is_map_key(watchers, watch) do
    state = Canary.check(state)
    Process.demonitor(watch, [:flush])
    {:reply, state.switch_offs, unwatched(state, watch)}
  end

  def handle_call({:unwatch, _ended}, _from, state), do: {:reply, state.switch_offs, state}

  def handle_call({:switch_offs, watch}, _from, %{watchers: watchers} = state)
      when is_map_key(watchers, watch) do
    state = Canary.check(state)
    {:reply, state.switch_offs, state}
  end

  def handle_call({:switch_offs, _ended}, _from, state), do: {:reply, state.switch_offs, state}

  @impl true
  def handle_cast({:bif_trace_ended, pid}, state), do: {:noreply, ended(state, pid)}

  def handle_cast({:destroy, session, functions}, state),
    do: {:noreply, hand(state, {session, functions, :new})}

  @impl true
  def handle_info(:turn, state), do: {:noreply, turn(state)}

  def handle_info({:DOWN, ref, :process, pid, _reason}, state) do
    state =
      if Map.has_key?(state.watchers, ref), do: unwatched(state, ref), else: ended(state, pid)

    {:noreply, state}
  end

  # No moment without a trace of BIFs came in time: the parked sessions go all the same
  # (the traces of BIFs still running then set their patterns again at once).
  def handle_info({:gate, ref}, %{gate: ref} = state) do
    forced = for session <- state.parked, do: {session, [], :force}
    pending = :queue.join(:queue.from_list(forced), state.pending)
    {:noreply, start_turns(%{state | parked: [], pending: pending, gate: :forcing})}
  end

  def handle_info({:gate, _stale}, state), do: {:noreply, state}

  # (the canary's, none expected outside check_canary/1)
  def handle_info({:trace, _pid, :call, _mfa}, state), do: {:noreply, state}

  defp answer(:sync, _state), do: :ok
  defp answer(:parked, state), do: length(state.parked)

  defp check_in(state, pid) do
    %{state | bif_traces: Map.put_new_lazy(state.bif_traces, pid, fn -> Process.monitor(pid) end)}
  end

  defp hand(state, item), do: start_turns(%{state | pending: :queue.in(item, state.pending)})

  # One :turn message in the mailbox while something is pending.
  defp start_turns(state) do
    if :queue.len(state.pending) == 1 or state.gate == :forcing, do: send(self(), :turn)
    state
  end

  # Deals with the oldest session handed over, then lets requests in before the next.
  defp turn(state) do
    case :queue.out(state.pending) do
      {:empty, _} ->
        state

      {{:value, item}, pending} ->
        state = deal(%{state | pending: pending}, item)

        if :queue.is_empty(state.pending),
          do: done(state),
          else:
            (
              send(self(), :turn)
              state
            )
    end
  end

  # Destroys a session now, or parks it while a trace of BIFs runs.
  defp deal(state, {session, _functions, :force}) do
    :trace.session_destroy(session)
    state
  end

  defp deal(%{bug?: bug?, bif_traces: traces} = state, {session, _functions, _how})
       when not bug? or traces == %{} do
    destroy_now(state, session)
  end

  defp deal(state, {session, functions, how}) do
    if how == :new, do: quiet(session, functions)
    state = %{state | parked: [session | state.parked]}

    if state.gate == nil and length(state.parked) > @max_parked,
      do: close_gate(state),
      else: state
  end

  # Nothing is pending any more: the callers of sync/0 are answered, and a gate forced
  # open lets the traces of BIFs set their patterns again and the waiting ones in.
  defp done(state) do
    state =
      if state.gate == :forcing do
        for pid <- Map.keys(state.bif_traces), do: send(pid, :reassert_bifs)
        open_gate(state)
      else
        state
      end

    state = open_if_clear(state)
    for {from, request} <- state.syncs, do: GenServer.reply(from, answer(request, state))
    %{state | syncs: []}
  end

  # Past @max_parked: no new trace of BIFs checks in until the running ones have ended
  # (then the parked sessions go) or @gate_ms have passed.
  defp close_gate(state) do
    ref = make_ref()

    Process.send_after(
      self(),
      {:gate, ref},
      Application.get_env(:kino_trace, :reaper_gate_ms, @gate_ms)
    )

    %{state | gate: ref}
  end

  defp open_gate(state) do
    Enum.reduce(state.waiting, %{state | gate: nil, waiting: []}, fn {from, pid}, state ->
      GenServer.reply(from, :ok)
      check_in(state, pid)
    end)
  end

  # Destroying a session switches off the canary too (erlang/otp#10349): with no trace
  # of BIFs running that loses none of kino_trace's calls, so the canary is checked
  # first (a switch-off before this one counts) and set again after, uncounted: a
  # capture that watches but has not set its BIF patterns yet is not told it lost calls
  # it never traced.
  defp destroy_now(%{bug?: true, canary: canary} = state, session) when canary != nil do
    state = Canary.check(state)
    :trace.session_destroy(session)
    Canary.arm(canary)
    state
  end

  defp destroy_now(state, session) do
    :trace.session_destroy(session)
    state
  end

  # The last watch gone, so is the canary (its session as any other: parked while a
  # trace of BIFs runs, since destroying it would switch their BIFs off).
  defp unwatched(state, watch) do
    state = %{state | watchers: Map.delete(state.watchers, watch)}

    if state.watchers == %{} and state.canary != nil do
      Process.unlink(state.caller)
      Process.exit(state.caller, :kill)
      hand(%{state | canary: nil, caller: nil}, {state.canary, [], :new})
    else
      state
    end
  end

  # The last trace of BIFs ended: the parked sessions go, in turn (a trace of BIFs that
  # checks in meanwhile parks the rest again), and a closed gate opens once they are gone.
  defp ended(state, pid) do
    {ref, refs} = Map.pop(state.bif_traces, pid)
    if ref, do: Process.demonitor(ref, [:flush])
    state = %{state | bif_traces: refs}

    cond do
      refs != %{} or state.parked == [] ->
        open_if_clear(state)

      true ->
        quiet = for session <- Enum.reverse(state.parked), do: {session, [], :quiet}

        state = %{
          state
          | parked: [],
            pending: :queue.join(state.pending, :queue.from_list(quiet))
        }

        send(self(), :turn)
        state
    end
  end

  defp open_if_clear(%{gate: ref, bif_traces: traces, parked: []} = state)
       when is_reference(ref) and traces == %{},
       do: open_gate(state)

  defp open_if_clear(state), do: state

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

  defp bif?(m, f, a), do: KinoTrace.Base.Bifs.bif?(m, f, a)
end
