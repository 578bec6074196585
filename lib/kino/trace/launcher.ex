defmodule Kino.Trace.Launcher do
  @moduledoc false
  # Starts the server (Kino.Trace.Server) that runs a plan: a Kino.Trace.Session when
  # the plan traces this node only, a Kino.Trace.Remote.Coordinator when it traces
  # others. Apart from Kino.Trace.Client, which a coordinator itself uses to talk to its
  # sessions: the client never depends on the servers.

  alias Kino.Trace.{Front, Plan}

  @doc """
  Starts a server for `plan`, owned by `owner`, and returns its pid and the trace's id;
  raises `RuntimeError` when it cannot start (`ArgumentError` for a plan it cannot set).
  Runs in kino_trace's own processes (`Kino.Trace.Front`).
  """
  @spec start!(Plan.t(), pid()) :: %{id: pos_integer(), session: pid(), node: node()}
  def start!(%Plan{} = plan, owner) do
    Front.run(fn ->
      started =
        if Plan.remote?(plan),
          do: Kino.Trace.Remote.Coordinator.start(owner, plan),
          else: Kino.Trace.Session.start(owner, plan)

      case started do
        {:ok, pid, id} -> %{id: id, session: pid, node: node()}
        {:error, reason} -> raise RuntimeError, "kino_trace could not start a trace: #{inspect(reason)}"
      end
    end)
  end
end
