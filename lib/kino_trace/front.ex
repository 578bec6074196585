defmodule KinoTrace.Front do
  @moduledoc false
  # Where the API's work runs: in kino_trace's own processes, never in the caller's.
  #
  # Checking options, parsing patterns, starting a session, completing a pattern line,
  # formatting... call Enum, Map, Keyword, String and Inspect. Done in the process that
  # calls the API (in Livebook, the cell's evaluator), every trace of those modules
  # recorded them as that process's calls, among the user's own (issue 23). So the caller
  # only sends a request to one of kino_trace's processes and waits for the reply, and
  # does that with BIFs of :erlang only:
  #
  #   * `run/1` runs a function in one of the front's workers, with the caller's group
  #     leader (what it prints goes where the caller's output goes), and returns what
  #     it returns; what it raises is raised in the caller. The workers are kino_trace's
  #     own (KinoTrace.Internal), registered before they take any work;
  #   * `call/3` makes a GenServer request to one of kino_trace's servers (a session, a
  #     stats server) as GenServer.call does, without Elixir's or OTP's library code.
  #
  # So a trace of the caller sees, of an API call: the call of the API function itself
  # (kino_trace's module: traced only with `force: true`), and, when `:erlang` itself is
  # traced, the BIFs below (`monitor/2,3`, `demonitor/2`, `whereis/1`, `group_leader/0`;
  # `process_info/2` and `raise/3` when it raises, `process_info/2` on `stop/1`). A trace
  # of the caller's messages sees the request and the reply. Nothing of Elixir's or OTP's
  # library modules.
  #
  # A pool: workers are started with the front, at the application's start, before any
  # trace; another is started only when all are busy (and leaves when done if @max_idle
  # already wait), so a long job (thousands of patterns) holds up no other.

  use GenServer

  # (8: with fewer, 8 processes starting and stopping traces made the front start new
  # workers all the time, each untracing itself in every live session before its first
  # job, which took seconds with the traced functions hot: issue 36 item 2)
  @max_idle 8
  # in a worker's process dictionary
  @worker :"$kino_trace_front_worker"

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @doc """
  Runs `fun` in one of kino_trace's processes, with the caller's group leader; returns
  its result or raises (exits, throws) what it raised, the caller's stack trace added.
  """
  @spec run((-> result)) :: result when result: term()
  def run(fun) when is_function(fun, 0) do
    # (a job that uses the API runs it where it is)
    if :erlang.get(@worker) == true, do: fun.(), else: request(fun)
  end

  defp request(fun) do
    front = front()
    ref = :erlang.monitor(:process, front)
    send(front, {:run, {self(), ref}, fun, :erlang.group_leader()})

    receive do
      {^ref, result} ->
        :erlang.demonitor(ref, [:flush])
        unwrap(result)

      {:DOWN, ^ref, :process, _, reason} ->
        :erlang.exit({reason, {__MODULE__, :run, [fun]}})
    end
  end

  # Only when kino_trace is not running (no trace of it is): it is started then.
  defp front do
    case :erlang.whereis(__MODULE__) do
      :undefined ->
        KinoTrace.Starter.ensure_started!()
        :erlang.whereis(__MODULE__)

      pid ->
        pid
    end
  end

  defp unwrap({:ok, value}), do: value

  # A bad argument of the caller's (see user_error?/3): raised with the caller's stack
  # trace only, kino_trace's frames left out, so the top frame is the user's call
  # (issue 39 item 11), as Ecto and Phoenix raise errors of their users.
  defp unwrap({:raise, kind, reason, :user}) do
    {:current_stacktrace, caller} = :erlang.process_info(self(), :current_stacktrace)
    :erlang.raise(kind, reason, drop_own_frames(caller))
  end

  defp unwrap({:raise, kind, reason, stacktrace}) do
    {:current_stacktrace, [_this | caller]} = :erlang.process_info(self(), :current_stacktrace)
    :erlang.raise(kind, reason, stacktrace ++ caller)
  end

  # (BIFs and pattern matching only: this runs in the caller)
  defp drop_own_frames([{module, _, _, _} | rest] = frames) do
    if own_module?(module), do: drop_own_frames(rest), else: frames
  end

  defp drop_own_frames(frames), do: frames

  @doc """
  Whether `module` is one of kino_trace's (`Kino.Trace`, `Kino.Trace.*`, `KinoTrace.*`).

      iex> KinoTrace.Front.own_module?(Kino.Trace.Mermaid)
      true
      iex> KinoTrace.Front.own_module?(Kino.TraceLike)
      false
  """
  @spec own_module?(module()) :: boolean()
  def own_module?(module) when is_atom(module) do
    case :erlang.atom_to_binary(module, :utf8) do
      "Elixir.Kino.Trace" -> true
      "Elixir.Kino.Trace." <> _ -> true
      "Elixir.KinoTrace." <> _ -> true
      _ -> false
    end
  end

  # An ArgumentError kino_trace raised itself (its top frame is kino_trace's): the
  # caller's input was bad. Any other error is kino_trace's bug, and keeps every frame.
  defp user_error?(:error, %ArgumentError{}, [{module, _, _, _} | _]), do: own_module?(module)
  defp user_error?(_kind, _reason, _stacktrace), do: false

  @doc """
  A GenServer request to `server` (a pid): `{:ok, reply}`, or `{:exit, reason}` when the
  server is gone (`:noproc`...) or ends without answering, or `{:exit, :timeout}`.
  """
  @spec call(pid(), term(), timeout()) :: {:ok, term()} | {:exit, term()}
  def call(server, request, timeout) do
    # the monitor is also the reply's alias: a late reply (after a timeout) is dropped
    ref = :erlang.monitor(:process, server, [{:alias, :demonitor}])
    tag = [:alias | ref]
    send(server, {:"$gen_call", {self(), tag}, request})

    receive do
      {^tag, reply} ->
        :erlang.demonitor(ref, [:flush])
        {:ok, reply}

      {:DOWN, ^ref, :process, _, reason} ->
        {:exit, reason}
    after
      timeout ->
        :erlang.demonitor(ref, [:flush])

        receive do
          {^tag, reply} -> {:ok, reply}
        after
          0 -> {:exit, :timeout}
        end
    end
  end

  # --- the front: hands jobs to its workers -------------------------------------------

  @impl true
  def init([]) do
    # (registered in KinoTrace.Internal by its supervisor, see KinoTrace.Application)
    Process.flag(:trap_exit, true)
    {:ok, %{idle: for(_ <- 1..@max_idle, do: start_worker()), busy: %{}}}
  end

  # A worker is registered before it takes its first job: no trace ever records it. It
  # untraces itself in the live sessions, not the front: each untracing waits for the
  # VM, and the front would hold up every other job meanwhile (issue 36 item 2).
  defp start_worker do
    front = self()

    pid =
      spawn_link(fn ->
        :erlang.put(@worker, true)
        receive(do: (:marked -> KinoTrace.Internal.untrace_everywhere(self())))
        worker(front, :erlang.group_leader())
      end)

    KinoTrace.Internal.mark(pid)
    send(pid, :marked)
    pid
  end

  @impl true
  def handle_info({:run, from, fun, group_leader}, state) do
    {worker, idle} =
      case state.idle do
        [worker | idle] -> {worker, idle}
        [] -> {start_worker(), []}
      end

    send(worker, {:job, from, fun, group_leader})
    {:noreply, %{state | idle: idle, busy: Map.put(state.busy, worker, from)}}
  end

  def handle_info({:idle, worker}, state) do
    state = %{state | busy: Map.delete(state.busy, worker)}

    if length(state.idle) < @max_idle do
      {:noreply, %{state | idle: [worker | state.idle]}}
    else
      send(worker, :leave)
      {:noreply, state}
    end
  end

  # A worker killed during a job: its caller exits as from a GenServer.call.
  def handle_info({:EXIT, worker, reason}, state) do
    case Map.pop(state.busy, worker) do
      {{caller, ref}, busy} ->
        send(caller, {ref, {:raise, :exit, reason, []}})
        {:noreply, %{state | busy: busy}}

      {nil, _busy} ->
        {:noreply, %{state | idle: List.delete(state.idle, worker)}}
    end
  end

  defp worker(front, home) do
    receive do
      {:job, {caller, ref}, fun, group_leader} ->
        :erlang.group_leader(group_leader, self())

        result =
          try do
            {:ok, fun.()}
          catch
            # (the worker's own frame left out: the caller's come in its place)
            kind, reason ->
              if user_error?(kind, reason, __STACKTRACE__),
                do: {:raise, kind, reason, :user},
                else:
                  {:raise, kind, reason,
                   Enum.reject(__STACKTRACE__, &(elem(&1, 0) == __MODULE__))}
          end

        send(caller, {ref, result})
        :erlang.group_leader(home, self())
        # what the job left (a plan, a snapshot) is not kept until the next one
        :erlang.garbage_collect()
        send(front, {:idle, self()})
        worker(front, home)

      :leave ->
        :ok
    end
  end
end
