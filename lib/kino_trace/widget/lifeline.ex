defmodule KinoTrace.Widget.Lifeline do
  @moduledoc false
  # Ties a trace's (or a stats session's) life to a process: when the process exits, for
  # any reason (even `:kill`), the trace is stopped.
  #
  # The widget uses it so that closing the widget or re-evaluating its cell (Livebook then
  # terminates the widget's process) ends the trace. The lifeline is a small process of
  # its own that monitors both the holder and the trace's session; it ends by itself when
  # the trace ends first.
  #
  # ## Examples
  #
  #     trace = Kino.Trace.calls(["Enum.map/2"])
  #     holder = spawn(fn -> Process.sleep(:infinity) end)
  #     KinoTrace.Widget.Lifeline.start(trace, holder)
  #     Process.exit(holder, :kill)
  #     # the trace is stopped: its session process is gone

  @doc """
  Starts the lifeline of `trace` bound to `holder`. Returns the lifeline's pid.
  """
  @spec start(Kino.Trace.t() | Kino.Trace.Stats.t(), pid()) :: pid()
  def start(%Kino.Trace.Stats{server: server} = stats, holder)
      when is_pid(server) and is_pid(holder) do
    watch(server, holder, fn -> Kino.Trace.Stats.stop(stats) end)
  end

  def start(%Kino.Trace{session: session} = trace, holder)
      when is_pid(session) and is_pid(holder) do
    watch(session, holder, fn -> KinoTrace.Client.stop(trace) end)
  end

  defp watch(session, holder, stop) do
    spawn(fn ->
      KinoTrace.Internal.register(self())
      holder_ref = Process.monitor(holder)
      session_ref = Process.monitor(session)

      receive do
        {:DOWN, ^holder_ref, :process, _, _} -> stop.()
        {:DOWN, ^session_ref, :process, _, _} -> :ok
      end
    end)
  end
end
