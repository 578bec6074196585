defmodule Kino.Trace.Reaper do
  @moduledoc """
  Destroys the OTP trace sessions of ended traces, without breaking the traces of BIFs
  that are still running.

  On OTP 27.3 (erlang/otp#10349, fixed upstream), destroying *any* trace session, or
  clearing a BIF's trace pattern in one session, switches off the tracing of every BIF
  (such as `:ets.insert/2`) in every other session, while `:trace.info/3` still says it
  is traced. Setting a BIF pattern again switches it back on.

  So kino_trace never destroys a session while one of its traces of a BIF is running:

    * a trace checks in (`bif_trace/1`) before it sets a BIF pattern;
    * an ended trace hands its OTP session here (`destroy/1`). With no BIF trace
      running it is destroyed at once; otherwise it is parked, with no process traced
      and its other patterns removed (so it costs nothing and records nothing), and
      destroyed when the last BIF trace ends.

  Both go through this one process, so no session is destroyed between a trace's
  check-in and its patterns. At most #{1_000} sessions are parked: past that they are
  destroyed all the same and the traces of BIFs set their patterns again at once. What other tools do is out of reach: a BIF trace also sets
  its BIF patterns again once a second (see `Kino.Trace.Session`).

      iex> session = :trace.session_create(:reaper_doc, self(), [])
      iex> Kino.Trace.Reaper.destroy(session)
      :ok
      iex> elem(session, 1) in :trace.session_info(:all)
      false
  """

  use GenServer

  @max_parked 1_000

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @doc """
  Checks in the calling process as running a trace of BIFs, until it calls
  `bif_trace_ended/0` or exits. Call it before setting a BIF pattern.
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

  @doc """
  Tells every running trace of BIFs to set its BIF patterns again at once: the calling
  trace has just cleared some, which switched them off everywhere.
  """
  @spec bifs_cleared() :: :ok
  def bifs_cleared, do: call({:bifs_cleared, self()}, :ok)

  @doc "The sessions parked until no trace of BIFs runs."
  @spec parked() :: non_neg_integer()
  def parked, do: call(:parked, 0)

  # Without the reaper (kino_trace stopped), act at once.
  defp call(request, fallback) do
    GenServer.call(__MODULE__, request, :infinity)
  catch
    :exit, {:noproc, _} -> if is_function(fallback), do: (fallback.(); :ok), else: fallback
  end

  # --- the reaper ---------------------------------------------------------------------

  @impl true
  def init([]), do: {:ok, %{bif_traces: %{}, parked: []}}

  @impl true
  def handle_call({:bif_trace, pid}, _from, state) do
    refs = Map.put_new_lazy(state.bif_traces, pid, fn -> Process.monitor(pid) end)
    {:reply, :ok, %{state | bif_traces: refs}}
  end

  def handle_call({:bif_trace_ended, pid}, _from, state) do
    {:reply, :ok, ended(state, pid)}
  end

  def handle_call({:destroy, session, functions}, _from, state) do
    cond do
      state.bif_traces == %{} ->
        :trace.session_destroy(session)
        {:reply, :ok, state}

      # Bounded: past @max_parked the parked sessions go after all, and the traces of
      # BIFs set their patterns again at once.
      length(state.parked) >= @max_parked ->
        Enum.each([session | state.parked], &:trace.session_destroy/1)
        for pid <- Map.keys(state.bif_traces), do: send(pid, :reassert_bifs)
        {:reply, :ok, %{state | parked: []}}

      true ->
        quiet(session, functions)
        {:reply, :ok, %{state | parked: [session | state.parked]}}
    end
  end

  def handle_call({:bifs_cleared, from}, _from, state) do
    for pid <- Map.keys(state.bif_traces), pid != from, do: send(pid, :reassert_bifs)
    {:reply, :ok, state}
  end

  def handle_call(:parked, _from, state), do: {:reply, length(state.parked), state}

  @impl true
  def handle_info({:DOWN, _ref, :process, pid, _reason}, state), do: {:noreply, ended(state, pid)}

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

      iex> Kino.Trace.Reaper.bif?(:ets, :insert, 2)
      true
      iex> Kino.Trace.Reaper.bif?(:ets, :_, :_)
      true
      iex> Kino.Trace.Reaper.bif?(Enum, :map, 2)
      false
  """
  @spec bif?(atom(), atom(), atom() | arity()) :: boolean()
  def bif?(:_, _f, _a), do: true
  def bif?(m, f, a), do: bifs({m, f, a}) != []

  @doc """
  The BIFs that `{m, f, a}` (`:_` as wildcards, but in the module) names or covers.

      iex> Kino.Trace.Reaper.bifs({:ets, :insert, :_})
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
