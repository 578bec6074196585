defmodule Kino.Trace.Application do
  @moduledoc false
  use Application

  @doc """
  Starts kino_trace's supervisor (with the :kino_trace application) when it is not
  running, e.g. in `bin/app eval` of a release, where applications are loaded but not
  started. Raises `RuntimeError` saying what to do when it cannot.
  """
  @spec ensure_started!() :: :ok
  def ensure_started! do
    if Process.whereis(Kino.Trace.SessionSupervisor) do
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

    case DynamicSupervisor.start_child(Kino.Trace.SessionSupervisor, spec) do
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

  defp new_cache(table) do
    if :ets.whereis(table) == :undefined do
      :ets.new(table, [:named_table, :public, :set, read_concurrency: true])
    end
  end

  @impl true
  def start(_type, _args) do
    # the caches of the tail-call cycles and of the code path's modules: tables named
    # after their modules, which read them only when they exist
    Enum.each([Kino.Trace.TailCalls, Kino.Trace.Complete.Modules], &new_cache/1)

    # Kino.Trace.Internal first: the others are kino_trace's own processes, registered
    # there as they start (and restart), so no trace records them
    children = [
      Kino.Trace.Internal
      | Enum.map(
          [
            Kino.Trace.Front,
            Kino.Trace.Final,
            Kino.Trace.Reaper,
            {DynamicSupervisor, name: Kino.Trace.SessionSupervisor, strategy: :one_for_one}
          ],
          &Kino.Trace.Internal.child_spec_of_own/1
        )
    ]

    with {:ok, pid} <-
           Supervisor.start_link(children, strategy: :one_for_one, name: Kino.Trace.Supervisor) do
      Kino.Trace.Internal.register(pid)
      register_smart_cell()
      # loaded now, not by a session's first drain: loading waits for every scheduler, so
      # a traced loop could grow its stack meanwhile, before the stack guard moves it
      # (with the protocol implementations a session's drain uses)
      :code.ensure_modules_loaded([Enumerable.Map, Enumerable.List | Application.spec(:kino_trace, :modules) || []])
      # the first completion (Kino.Trace.complete/1) need not list the code path
      Kino.Trace.Complete.Modules.warm_async()
      {:ok, pid}
    end
  end

  # The "Trace" smart cell, when Kino is there (it is an optional dependency, so its
  # module is named at run time: no warning where it is absent).
  defp register_smart_cell(kino_smart_cell \\ Kino.SmartCell) do
    if Code.ensure_loaded?(kino_smart_cell) and Code.ensure_loaded?(Kino.Trace.SmartCell) do
      kino_smart_cell.register(Kino.Trace.SmartCell)
    end

    :ok
  end
end
