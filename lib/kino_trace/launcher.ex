defmodule KinoTrace.Launcher do
  @moduledoc false
  # Starts the server (KinoTrace.Server) that runs a plan: a KinoTrace.Session when
  # the plan traces this node only, a KinoTrace.Remote.Coordinator when it traces
  # others. Apart from KinoTrace.Client, which a coordinator itself uses to talk to its
  # sessions: the client never depends on the servers.

  alias Kino.Trace.Plan
  alias KinoTrace.Front

  @doc """
  Starts a server for `plan`, owned by `owner`, and returns its pid and the trace's id;
  raises `RuntimeError` when it cannot start (`ArgumentError` for a plan it cannot set).
  Runs in kino_trace's own processes (`KinoTrace.Front`).

  `await` is how long a trace of this node may take to set its process flags and match
  specs before it is returned, still setting them (`:infinity`: until they are set, as
  a capture needs; see `KinoTrace.Starter.start_session/3`). A trace of other nodes is
  returned once set up.
  """
  @spec start!(Plan.t(), pid(), timeout()) :: %{id: pos_integer(), session: pid(), node: node()}
  def start!(%Plan{} = plan, owner, await \\ :infinity) do
    Front.run(fn ->
      started =
        if Plan.remote?(plan),
          do: KinoTrace.Remote.Coordinator.start(owner, plan),
          else: KinoTrace.Session.start(owner, plan, await)

      case started do
        {:ok, pid, id} ->
          %{id: id, session: pid, node: node()}

        {:error, reason} ->
          raise RuntimeError, "kino_trace could not start a trace: #{inspect(reason)}"
      end
    end)
  end
end
