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
  """
  @spec start_session(module(), term()) :: {:ok, pid(), term()} | {:error, term()}
  def start_session(module, arg) do
    spec = %{id: module, start: {GenServer, :start_link, [module, arg]}, restart: :temporary}
    ensure_started!()

    case DynamicSupervisor.start_child(KinoTrace.SessionSupervisor, spec) do
      {:ok, pid} -> await_setup(pid)
      # raised in init/1
      {:error, {%ArgumentError{} = e, _stacktrace}} -> raise e
      {:error, reason} -> {:error, reason}
    end
  end

  defp await_setup(pid) do
    case GenServer.call(pid, :await_setup, :infinity) do
      {:ok, id} -> {:ok, pid, id}
      {:error, %ArgumentError{} = e} -> raise e
      {:error, reason} -> {:error, reason}
    end
  end
end
