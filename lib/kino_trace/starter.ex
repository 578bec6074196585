defmodule KinoTrace.Starter do
  @moduledoc false
  # Starts kino_trace when it is not running, and sessions under its session
  # supervisor. Kept out of KinoTrace.Application, which names Front, Session's
  # supervisor and the other processes as its children: Front starts kino_trace through
  # here, so the two would depend on each other.

  @doc """
  Starts kino_trace's supervisor (with the :kino_trace application) when it is not
  running, e.g. in `bin/app eval` of a release, where applications are loaded but not
  started. Raises `RuntimeError` saying what to do when it cannot.
  """
  @spec ensure_started!() :: :ok
  def ensure_started! do
    if Process.whereis(KinoTrace.SessionSupervisor) do
      :ok
    else
      case Application.ensure_all_started(:kino_trace) do
        {:ok, _} ->
          :ok

        {:error, reason} ->
          raise RuntimeError,
                "kino_trace is not running and could not be started (#{inspect(reason)}); " <>
                  "start it with Application.ensure_all_started(:kino_trace)"
      end
    end
  end

  @doc """
  Starts `module` (a GenServer taking `arg`) under kino_trace's session supervisor and
  waits until it has set itself up: it answers `:await_setup` with `{:ok, id}` or
  `{:error, exception_or_reason}`. An `ArgumentError` from its setup is raised here.

  With a finite `await` (milliseconds), waits at most that long: a server still setting
  up then is returned as it is and goes on setting up (its requests wait for that). Such
  a server tells its id from its `init/1` with `started/2`. Setting up waits for the VM
  (each `:trace` call for its code modification permission, one at a time VM-wide): with
  traced functions hot on a loaded machine, and other traces starting and ending, that
  took seconds (issue 36 item 2).
  """
  @spec start_session(module(), term(), timeout()) :: {:ok, pid(), term()} | {:error, term()}
  def start_session(module, arg, await \\ :infinity) do
    spec = %{id: module, start: {GenServer, :start_link, [module, arg]}, restart: :temporary}
    ensure_started!()

    case DynamicSupervisor.start_child(KinoTrace.SessionSupervisor, spec) do
      {:ok, pid} -> await_setup(pid, await)
      # raised in init/1
      {:error, {%ArgumentError{} = e, _stacktrace}} -> raise e
      {:error, reason} -> {:error, reason}
    end
  end

  @doc "Tells `starter` (the caller of `start_session/3`) the calling server's id, from its `init/1`."
  @spec started(pid(), term()) :: :ok
  def started(starter, id) do
    send(starter, {__MODULE__, self(), id})
    :ok
  end

  defp await_setup(pid, await) do
    reply =
      try do
        GenServer.call(pid, :await_setup, await)
      catch
        :exit, {:timeout, _} -> :setting_up
      end

    # (sent from init/1, so here by now; none from a server that does not tell it)
    told = receive(do: ({__MODULE__, ^pid, id} -> {:ok, id}), after: (0 -> nil))

    case reply do
      {:ok, id} -> {:ok, pid, id}
      :setting_up when told != nil -> {:ok, pid, elem(told, 1)}
      {:error, %ArgumentError{} = e} -> raise e
      {:error, reason} -> {:error, reason}
    end
  end
end
