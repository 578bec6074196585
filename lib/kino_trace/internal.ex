defmodule KinoTrace.Internal do
  @moduledoc false
  # kino_trace's own processes, which no trace ever records.
  #
  # A trace that records what kino_trace itself does feeds on itself: a session receiving
  # its wake-up is a message another `messages(:all)` trace records, which wakes that
  # session, which the first one records, and so on; a widget or stats server calling
  # `Enum` fills a trace of `Enum` with its own calls. So every process kino_trace runs
  # (sessions, printers, widget and stats processes) registers here, and every trace
  # session stops tracing every registered process, including those registered after the
  # session started:
  #
  #   * `register/2` a process: every live session stops tracing it at once;
  #   * `add_session/1` a session: it stops tracing every registered process at once.
  #
  # Whichever of the two comes second sees the other, so no pair is missed. An entry goes
  # when its process exits, or when the process holding it exits (`register(pid,
  # holder)`, e.g. a printer holding the console's I/O processes while it prints). The
  # API's own work runs in such processes too (see KinoTrace.Front), not in the process
  # that calls it.

  use GenServer

  @table __MODULE__

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @doc """
  Marks `pid` as one of kino_trace's processes until it exits, or until `holder` exits
  when given. Every trace session, current and future, stops tracing it.

  ## Examples

      iex> KinoTrace.Internal.register(self())
      :ok
      iex> self() in KinoTrace.Internal.pids()
      true
  """
  @spec register(pid(), pid() | nil) :: :ok
  def register(pid, holder \\ nil) when is_pid(pid) and (is_pid(holder) or is_nil(holder)) do
    mark(pid, holder)
    # Until `pid` is untraced in every session, only BIFs and this module's functions
    # (and :trace's): a process registering itself is traced meanwhile, and a trace of
    # Enum or a stats session must not see it do that (issue 23 item 2).
    untrace_everywhere(pid)
  end

  @doc """
  The first half of `register/2`: marks `pid` (sessions added from now on leave it out)
  without untracing it in the live sessions, which `untrace_everywhere/1` does. For a
  trace's session, whose `init/1` holds up kino_trace's supervisor, so every other
  trace's start: each untracing waits for the VM's code modification permission, one
  per live session, which under load took seconds (issue 36 item 2).
  """
  @spec mark(pid(), pid() | nil) :: :ok
  def mark(pid, holder \\ nil) when is_pid(pid) and (is_pid(holder) or is_nil(holder)) do
    if node(pid) == node() and table?() do
      :ets.insert(@table, {{:pid, pid, holder || pid}})
      GenServer.cast(__MODULE__, {:watch, holder || pid})
    end

    :ok
  end

  @doc "The second half of `register/2`: every live session stops tracing `pid`."
  @spec untrace_everywhere(pid()) :: :ok
  def untrace_everywhere(pid) when is_pid(pid) do
    if node(pid) == node() and table?(),
      do: untrace_in(:ets.select(@table, [{{{:session, :"$1", :_}}, [], [:"$1"]}]), pid)

    :ok
  end

  defp untrace_in([], _pid), do: :ok

  defp untrace_in([session | sessions], pid) do
    untrace(session, pid)
    untrace_in(sessions, pid)
  end

  @doc """
  Registers a trace session (its handle from `:trace.session_create/3`): it stops
  tracing every registered process now and every one registered later, until
  `remove_session/1` or until `holder` (the process the session lives for, by default
  the caller) exits. The entry holds the session's handle, so the holder must be the
  process whose exit ends the session: a longer-lived one would keep it for good.
  """
  @spec add_session(term(), pid()) :: :ok
  def add_session(session, holder \\ self()) when is_pid(holder) do
    if table?() do
      :ets.insert(@table, {{:session, session, holder}})
      GenServer.cast(__MODULE__, {:watch, holder})
      Enum.each(pids(), &untrace(session, &1))
    end

    :ok
  end

  @doc """
  The child spec of `child` (as a supervisor takes it) whose process is registered as
  one of kino_trace's own as soon as it has started, and again when it restarts.
  """
  @spec child_spec_of_own(Supervisor.child_spec() | {module(), term()} | module()) ::
          Supervisor.child_spec()
  def child_spec_of_own(child) do
    spec = Supervisor.child_spec(child, [])
    %{spec | start: {__MODULE__, :start_own, [spec.start]}}
  end

  @doc false
  def start_own({m, f, a}) do
    with {:ok, pid} = started when is_pid(pid) <- apply(m, f, a) do
      register(pid)
      started
    end
  end

  @doc "Unregisters a trace session (before it is destroyed)."
  @spec remove_session(term()) :: :ok
  def remove_session(session) do
    if table?(), do: :ets.match_delete(@table, {{:session, session, :_}})
    :ok
  end

  @doc "The registered processes."
  @spec pids() :: [pid()]
  def pids do
    if table?(),
      do: @table |> :ets.match({{:pid, :"$1", :_}}) |> List.flatten() |> Enum.uniq(),
      else: []
  end

  defp table?, do: :ets.whereis(@table) != :undefined

  # The session may just have been destroyed, or the process may have exited.
  defp untrace(session, pid) do
    :trace.process(session, pid, false, [:all])
  rescue
    ArgumentError -> :ok
  end

  # --- the table's owner: drops the entries of exited processes -----------------------

  @impl true
  def init([]) do
    :ets.new(@table, [:named_table, :public, :set, read_concurrency: true])
    register(self())
    Enum.each(vm_helpers(), &register/1)
    {:ok, %{}}
  end

  # Processes of the VM that tracing itself keeps busy, whose messages a trace of every
  # process's messages would record:
  #   * the handlers of signals to processes running on dirty schedulers: every time one
  #     of kino_trace's processes collects garbage on a dirty scheduler they receive a
  #     message about it;
  #   * the trace cleaner: after each trace session ends it signals every process and
  #     receives each one's ack, a message per process per session ended (93 627 events
  #     in 1 s of a trace of every message, during a full test run's session churn).
  @vm_helpers [{:erts_dirty_process_signal_handler, :start, 0}, {:erts_trace_cleaner, :start, 0}]
  defp vm_helpers do
    for pid <- Process.list(),
        {:initial_call, mfa} <- [Process.info(pid, :initial_call)],
        mfa in @vm_helpers,
        do: pid
  end

  @impl true
  def handle_cast({:watch, pid}, watched) do
    {:noreply, Map.put_new_lazy(watched, pid, fn -> Process.monitor(pid) end)}
  end

  @impl true
  def handle_info({:DOWN, _ref, :process, pid, _reason}, watched) do
    :ets.match_delete(@table, {{:pid, pid, :_}})
    :ets.match_delete(@table, {{:pid, :_, pid}})
    :ets.match_delete(@table, {{:session, :_, pid}})
    {:noreply, Map.delete(watched, pid)}
  end
end
