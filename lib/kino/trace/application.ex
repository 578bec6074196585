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

  @impl true
  def start(_type, _args) do
    Kino.Trace.TailCalls.init_cache()

    children = [
      Kino.Trace.Internal,
      Kino.Trace.Final,
      Kino.Trace.Reaper,
      {DynamicSupervisor, name: Kino.Trace.SessionSupervisor, strategy: :one_for_one}
    ]

    Supervisor.start_link(children, strategy: :one_for_one, name: Kino.Trace.Supervisor)
  end
end
