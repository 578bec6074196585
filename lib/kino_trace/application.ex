defmodule KinoTrace.Application do
  @moduledoc false
  use Application

  defp new_cache(table) do
    if :ets.whereis(table) == :undefined do
      :ets.new(table, [:named_table, :public, :set, read_concurrency: true])
    end
  end

  @impl true
  def start(_type, _args) do
    # the caches of the tail-call cycles and of the code path's modules: tables named
    # after their modules, which read them only when they exist
    Enum.each([KinoTrace.Plan.TailCalls, KinoTrace.Complete.Modules], &new_cache/1)

    # KinoTrace.Internal first: the others are kino_trace's own processes, registered
    # there as they start (and restart), so no trace records them
    children = [
      KinoTrace.Internal
      | Enum.map(
          [
            KinoTrace.Front,
            KinoTrace.Client.Final,
            KinoTrace.Backend.Reaper,
            {DynamicSupervisor, name: KinoTrace.SessionSupervisor, strategy: :one_for_one}
          ],
          &KinoTrace.Internal.child_spec_of_own/1
        )
    ]

    with {:ok, pid} <-
           Supervisor.start_link(children, strategy: :one_for_one, name: KinoTrace.Supervisor) do
      KinoTrace.Internal.register(pid)
      register_smart_cell()
      # loaded now, not by a session's first drain: loading waits for every scheduler, so
      # a traced loop could grow its stack meanwhile, before the stack guard moves it
      # (with the protocol implementations a session's drain uses)
      :code.ensure_modules_loaded([
        Enumerable.Map,
        Enumerable.List | Application.spec(:kino_trace, :modules) || []
      ])

      # the first completion (Kino.Trace.complete/1) need not list the code path
      KinoTrace.Complete.Modules.warm_async()
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
