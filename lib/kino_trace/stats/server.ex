defmodule KinoTrace.Stats.Server do
  @moduledoc false
  # The process behind one stats session: it runs, on this node, one OTP `:trace` session
  # with the VM's call counters (`call_time`, `call_memory`) on the
  # session's functions for each node counted (`KinoTrace.Backend.start_counters/2`):
  # this node's directly, another node's through a worker of kino_trace's agent there,
  # so that node needs no kino_trace.
  #
  # One server handles every node: it sets each node's counters (one round trip per
  # node, whatever the number of functions), reads them all for a snapshot (likewise) and
  # hands them to `Kino.Trace.Stats.Snapshot.build/2`, which adds up a function's
  # counters of every node (a row per function; its processes keep their pids, and so
  # their node). A node that goes away (the connection dropped) is marked `:gone` in
  # `info/1` and its figures leave the snapshots; one that does not answer a read in time
  # is `:unresponsive` and left out of that snapshot.
  #
  # It starts under `KinoTrace.SessionSupervisor` and monitors its owner. No trace
  # messages are produced (no function has call tracing in these sessions, only
  # counters), so this node's session's tracer is the server itself and never receives
  # anything. The server is never traced by its own session, nor an agent's processes by
  # theirs. When the owner exits or on `Kino.Trace.Stats.stop/1` every session is
  # destroyed, which removes its counters from the VM; an agent's worker also ends its
  # session when this server ends or its connection drops, and the agent then leaves
  # nothing on that node.

  use GenServer

  alias Kino.Trace.Stats.Snapshot
  alias KinoTrace.Backend
  alias KinoTrace.Backend.BifWorkaround
  alias KinoTrace.Latency
  alias KinoTrace.Stats.Options

  # `session`: this node's OTP session (nil when this node is not counted, or ended).
  # `parts`: one per node, %{node, backend, mfas, targets, ref, status}.
  # `latency_plan`, `latency_trace`: with `latency: true`, the trace (a `Kino.Trace`
  # session owned by this server) whose distributions the snapshots carry.
  defstruct [
    :id,
    :owner_ref,
    :session,
    :patterns,
    :opts,
    :counters,
    :reset_at,
    :latency_plan,
    :latency_trace,
    :setup_error,
    parts: []
  ]

  @typedoc "One node's functions and the processes whose calls count there, as the Plan built them."
  @type part :: Kino.Trace.Plan.counters_part()

  @doc false
  @spec start(pid(), [KinoTrace.Pattern.t()], [part()], keyword(), Kino.Trace.Plan.t() | nil) ::
          {:ok, pid(), pos_integer()} | {:error, term()}
  def start(owner, patterns, parts, opts, latency_plan \\ nil) do
    KinoTrace.Starter.start_session(__MODULE__, {owner, patterns, parts, opts, latency_plan})
  end

  @impl true
  def init({owner, patterns, parts, opts, latency_plan}) do
    Process.flag(:trap_exit, true)
    KinoTrace.Internal.register(self())

    state = %__MODULE__{
      id: System.unique_integer([:positive, :monotonic]),
      owner_ref: Process.monitor(owner),
      patterns: Enum.map(patterns, &KinoTrace.Pattern.to_string/1),
      opts: opts,
      counters: Options.counters(opts),
      reset_at: now(),
      latency_plan: latency_plan
    }

    case start_parts(state, parts) do
      {:ok, state} ->
        try do
          Enum.each(state.parts, &set_process_flags(&1, opts))
          local = local_part(state)
          # after the process flags (which may cover every process), before the counters:
          # kino_trace's own processes (sessions, printers, widgets) are never counted
          if local, do: KinoTrace.Internal.add_session(local.backend.session)

          if local, do: BifWorkaround.check_in(local.mfas)

          Enum.each(state.parts, &set_counters(&1, true, state.counters))
          # the trace of durations starts once this server is up (KinoTrace.Starter
          # starts it under the supervisor that is starting this one)
          if latency_plan, do: {:ok, state, {:continue, :latency}}, else: {:ok, state}
        catch
          kind, reason ->
            destroy(state)
            :erlang.raise(kind, reason, __STACKTRACE__)
        end

      {:error, node, message} ->
        {:stop, {:node, node, message}}
    end
  end

  # Each node's counters session; a node whose agent does not start ends the others.
  defp start_parts(state, parts) do
    Enum.reduce_while(parts, {:ok, state}, fn {node, _patterns, mfas, targets}, {:ok, state} ->
      case Backend.start_counters(node, state.id) do
        {:ok, backend} ->
          # (this node's counters are safeguarded here, another node's by its agent)
          local? = Backend.safeguards?(backend)
          ref = if local?, do: nil, else: Process.monitor(backend.worker)

          part = %{
            node: node,
            backend: backend,
            mfas: mfas,
            targets: targets,
            ref: ref,
            status: :running
          }

          session = if local?, do: backend.session, else: state.session
          {:cont, {:ok, %{state | parts: state.parts ++ [part], session: session}}}

        {:error, message} ->
          destroy(state)
          {:halt, {:error, node, message}}
      end
    end)
  end

  defp local_part(state), do: Enum.find(state.parts, &Backend.safeguards?(&1.backend))

  # call_time and call_memory count only in processes with the `call` flag in this
  # session (which is why call_count, which counts everywhere, is never used). With no
  # call tracing on any function of this session, the flag produces no trace messages.
  # The server untraces itself here, and kino_trace's other processes are untraced by
  # KinoTrace.Internal; an agent keeps its own processes out of its sessions.
  defp set_process_flags(%{backend: backend, targets: targets}, opts) do
    flags = [:call] ++ if(opts[:children], do: [:set_on_spawn], else: [])
    ops = for target <- targets, do: {:process, [target, true, flags]}
    own = if Backend.safeguards?(backend), do: [{:process, [self(), false, [:all]]}], else: []
    results = Backend.trace_many(backend, ops ++ own)

    # a process that has exited since the options were checked
    for {target, {:error, _}} <- Enum.zip(targets, results) do
      raise ArgumentError, "cannot trace #{inspect(target)}: the process is not alive"
    end

    :ok
  end

  # One round trip for every function of a node.
  defp set_counters(%{backend: backend, mfas: mfas}, action, counters) do
    Backend.run(backend, for(mfa <- mfas, do: {:function, [mfa, action, counters]}))
  end

  # A trace that cannot start (a process of `:pids` gone meanwhile) ends this server, and
  # the stats session's start raises its error.
  @impl true
  def handle_continue(:latency, state) do
    {:noreply, start_latency(state)}
  rescue
    e -> {:noreply, %{state | setup_error: e}}
  end

  defp start_latency(%{latency_plan: nil} = state), do: state

  defp start_latency(state) do
    %{id: id, session: pid} = KinoTrace.Launcher.start!(state.latency_plan, self())
    %{state | latency_trace: %{id: id, session: pid}}
  end

  defp stop_latency(%{latency_trace: nil} = state), do: state

  defp stop_latency(state) do
    KinoTrace.Client.stop(state.latency_trace)
    %{state | latency_trace: nil}
  end

  @impl true
  def handle_call(:await_setup, _from, %{setup_error: nil} = state),
    do: {:reply, {:ok, state.id}, state}

  def handle_call(:await_setup, _from, state),
    do: {:stop, :normal, {:error, state.setup_error}, destroy(state)}

  def handle_call(:snapshot, _from, state) do
    {raw, state} = read_counters(state)
    {:reply, snapshot(state, raw), state}
  end

  def handle_call(:reset, _from, state) do
    {parts, _} = each_running(state, &set_counters(&1, :restart, state.counters))
    state = state |> stop_latency() |> start_latency()
    {:reply, :ok, %{state | parts: parts, reset_at: now()}}
  end

  def handle_call(:info, _from, state) do
    {:reply,
     %{
       id: state.id,
       patterns: state.patterns,
       functions: Enum.reduce(state.parts, 0, &(length(&1.mfas) + &2)),
       counters: state.counters,
       opts: state.opts,
       session: state.session && elem(state.session, 1),
       nodes: Map.new(state.parts, &{&1.node, %{status: &1.status, functions: length(&1.mfas)}})
     }, state}
  end

  # What tests and debugging read of the server (KinoTrace.Client.internals/1): this
  # node's OTP session, each node's part with the agent's worker there, and the trace
  # of durations (`latency: true`).
  def handle_call(:internals, _from, state) do
    parts =
      for part <- state.parts,
          do: %{node: part.node, worker: part.backend && Map.get(part.backend, :worker)}

    {:reply, %{otp_session: state.session, parts: parts, latency_trace: state.latency_trace},
     state}
  end

  def handle_call(:stop, _from, state), do: {:stop, :normal, :ok, destroy(state)}

  @impl true
  def handle_info({:DOWN, ref, :process, _pid, _reason}, %{owner_ref: ref} = state) do
    {:stop, :normal, destroy(state)}
  end

  # A node's agent worker is gone (the connection dropped): so are its counters.
  def handle_info({:DOWN, ref, :process, _pid, _reason}, state) do
    parts =
      Enum.map(state.parts, fn
        %{ref: ^ref, backend: backend} = part ->
          %{part | status: :gone, backend: %{backend | session: nil}}

        part ->
          part
      end)

    {:noreply, %{state | parts: parts}}
  end

  def handle_info({:EXIT, _pid, reason}, state), do: {:stop, reason, destroy(state)}
  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, state) do
    destroy(state)
    :ok
  end

  defp destroy(%{session: nil, parts: [], latency_trace: nil} = state), do: state

  defp destroy(state) do
    state = stop_latency(state)

    if state.session do
      KinoTrace.Internal.remove_session(state.session)
      BifWorkaround.check_out()
    end

    # (An agent that did not answer is not waited for again: its worker ends with this
    # server, or its keeper ends it.)
    parts =
      for part <- state.parts do
        backend =
          if part.status == :running,
            do: Backend.destroy(part.backend, part.mfas),
            else: %{part.backend | session: nil}

        %{part | backend: backend}
      end

    %{state | session: nil, parts: parts}
  end

  # Runs `fun` on every running part: the parts and what `fun` returned for those that
  # answered. A part whose agent does not answer (its node gone or hung) is marked
  # :unresponsive, one that answers again :running.
  defp each_running(state, fun) do
    state.parts
    |> Enum.map(fn part ->
      if part.status == :gone or not Backend.tracing?(part.backend) do
        {part, []}
      else
        try do
          {%{part | status: :running}, [fun.(part)]}
        catch
          :exit, {:agent_down, _} -> {%{part | status: :unresponsive}, []}
        end
      end
    end)
    |> Enum.unzip()
    |> then(fn {parts, results} -> {parts, Enum.concat(results)} end)
  end

  # The counters of every function of every node: one round trip per node.
  defp read_counters(state) do
    items = state.counters

    {parts, raw} =
      each_running(state, fn part ->
        calls = for mfa <- part.mfas, item <- items, do: {:info, [mfa, item]}
        answers = part.backend |> Backend.trace_many(calls) |> Enum.chunk_every(length(items))

        for {mfa, answers} <- Enum.zip(part.mfas, answers) do
          {mfa, Map.new(for {:ok, {item, value}} <- answers, do: {item, value})}
        end
      end)

    {Enum.concat(raw), %{state | parts: parts}}
  end

  defp snapshot(state, raw) do
    now = now()

    # (a trace of durations that ended, its process gone, has none: the rows have nil)
    latency = state.latency_trace && kept_latency(state.latency_trace, :try_latency)

    processes =
      state.latency_trace && kept_latency(state.latency_trace, :try_latency_processes)

    Snapshot.build(raw,
      latency: latency,
      latency_processes: processes,
      id: state.id,
      patterns: state.patterns,
      time?: state.opts[:time],
      memory?: state.opts[:memory],
      taken_at: System.os_time(:microsecond),
      elapsed_us: System.convert_time_unit(now - state.reset_at, :native, :microsecond)
    )
  end

  # A report of what the trace of durations keeps (by function, or by function and
  # process), %{} once it has ended.
  defp kept_latency(trace, ask) do
    case apply(KinoTrace.Client, ask, [trace]) do
      {:ok, %Latency{} = kept} -> Latency.report(kept)
      _ended -> %{}
    end
  end

  defp now, do: System.monotonic_time()
end
