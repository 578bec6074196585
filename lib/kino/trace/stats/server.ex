defmodule Kino.Trace.Stats.Server do
  @moduledoc """
  The process behind one stats session: it owns one OTP `:trace` session with the VM's
  call counters (`call_time`, `call_memory`, or `call_count`) on the session's functions.

  It starts under `Kino.Trace.SessionSupervisor` and monitors its owner. No trace
  messages are produced (no function has call tracing in this session, only counters),
  so the session's tracer is the server itself and never receives anything. The server
  is never traced by its own session. When the owner exits or on `Kino.Trace.Stats.stop/1`
  the session is destroyed, which removes its counters from the VM.
  """

  use GenServer

  alias Kino.Trace.Stats.{Options, Snapshot}

  defstruct [:id, :owner_ref, :session, :mfas, :patterns, :opts, :counters, :reset_at]

  @doc false
  @spec start(pid(), [Kino.Trace.Pattern.t()], [mfa()], keyword()) ::
          {:ok, pid(), pos_integer()} | {:error, term()}
  def start(owner, patterns, mfas, opts) do
    Kino.Trace.Application.start_session(__MODULE__, {owner, patterns, mfas, opts})
  end

  @impl true
  def init({owner, patterns, mfas, opts}) do
    Process.flag(:trap_exit, true)
    Kino.Trace.Internal.register(self())
    session = :trace.session_create(:kino_trace_stats, self(), [])

    state = %__MODULE__{
      id: System.unique_integer([:positive, :monotonic]),
      owner_ref: Process.monitor(owner),
      session: session,
      mfas: mfas,
      patterns: Enum.map(patterns, &Kino.Trace.Pattern.to_string/1),
      opts: opts,
      counters: Options.counters(opts),
      reset_at: now()
    }

    set_process_flags(state)
    if Enum.any?(mfas, fn {m, f, a} -> Kino.Trace.Reaper.bif?(m, f, a) end), do: Kino.Trace.Reaper.bif_trace()
    set_counters(state, true)
    {:ok, state}
  end

  # call_time and call_memory count only in processes with the `call` flag in this
  # session (call_count counts everywhere). With no call tracing on any function of this
  # session, the flag produces no trace messages.
  defp set_process_flags(%{session: session, opts: opts}) do
    flags = [:call] ++ if(opts[:children], do: [:set_on_spawn], else: [])

    for target <- Kino.Trace.Options.resolve_pids(opts[:pids]) do
      try do
        :trace.process(session, target, true, flags)
      rescue
        # a process that has exited since the options were checked
        ArgumentError ->
          Kino.Trace.Reaper.destroy(session)
          raise ArgumentError, "cannot trace #{inspect(target)}: the process is not alive"
      end
    end

    :trace.process(session, self(), false, [:all])
  end

  defp set_counters(%{session: session, mfas: mfas, counters: counters}, action) do
    for mfa <- mfas, do: :trace.function(session, mfa, action, counters)
    :ok
  end

  @impl true
  def handle_call(:await_setup, _from, state), do: {:reply, {:ok, state.id}, state}

  def handle_call(:snapshot, _from, state), do: {:reply, snapshot(state), state}

  def handle_call(:reset, _from, state) do
    set_counters(state, :restart)
    {:reply, :ok, %{state | reset_at: now()}}
  end

  def handle_call(:info, _from, state) do
    {:reply,
     %{
       id: state.id,
       patterns: state.patterns,
       functions: length(state.mfas),
       counters: state.counters,
       opts: state.opts,
       session: elem(state.session, 1)
     }, state}
  end

  def handle_call(:stop, _from, state), do: {:stop, :normal, :ok, destroy(state)}

  @impl true
  def handle_info({:DOWN, ref, :process, _pid, _reason}, %{owner_ref: ref} = state) do
    {:stop, :normal, destroy(state)}
  end

  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, destroy(state)}
  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state) do
    destroy(state)
    :ok
  end

  defp destroy(%{session: nil} = state), do: state

  defp destroy(state) do
    Kino.Trace.Reaper.bif_trace_ended()
    Kino.Trace.Reaper.destroy(state.session, state.mfas)
    %{state | session: nil}
  end

  defp snapshot(state) do
    raw =
      for mfa <- state.mfas do
        {mfa, Map.new(state.counters, fn item -> :trace.info(state.session, mfa, item) end)}
      end

    now = now()

    Snapshot.build(raw,
      id: state.id,
      patterns: state.patterns,
      time?: state.opts[:time],
      memory?: state.opts[:memory],
      taken_at: System.os_time(:microsecond),
      elapsed_us: System.convert_time_unit(now - state.reset_at, :native, :microsecond)
    )
  end

  defp now, do: System.monotonic_time()
end
