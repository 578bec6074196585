defmodule Kino.Trace.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    Kino.Trace.TailCalls.init_cache()

    children = [
      {DynamicSupervisor, name: Kino.Trace.SessionSupervisor, strategy: :one_for_one}
    ]

    Supervisor.start_link(children, strategy: :one_for_one, name: Kino.Trace.Supervisor)
  end
end
