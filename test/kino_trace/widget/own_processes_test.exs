defmodule KinoTrace.Widget.OwnProcessesTest do
  # A trace of new processes must not record its own widget starting (issue 39 item 4):
  # Kino starts the widget's process under its own supervisor, so that process is born
  # traced and makes `spawned` and `getting_linked` before its code registers it as
  # kino_trace's own; then it starts its lifeline. Without Kino: a stand-in started the
  # same way (a GenServer under a supervisor that is not kino_trace's) runs the widget's
  # plain controller, as the widget's process does.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers, only: [use_fallback_tracer: 0]

  alias Kino.Trace.Event

  defmodule StandIn do
    use GenServer

    def start_link(trace), do: GenServer.start_link(__MODULE__, trace)

    @impl true
    def init(trace) do
      {controller, _effects} = KinoTrace.Widget.Controller.init(trace, lifeline: true)
      {:ok, controller}
    end

    # (the trace's events: the widget's process hands them to the controller)
    @impl true
    def handle_info(_message, controller), do: {:noreply, controller}
  end

  for tracer <- [:native, :fallback] do
    test "processes(:new) records nothing of its widget starting (#{tracer} tracer)" do
      if unquote(tracer) == :fallback, do: use_fallback_tracer()

      {:ok, sup} = DynamicSupervisor.start_link(strategy: :one_for_one)
      trace = Kino.Trace.processes(:new)
      on_exit(fn -> Kino.Trace.stop(trace) end)
      assert Kino.Trace.info(trace).tracer == :native == (unquote(tracer) == :native)

      {:ok, widget} = DynamicSupervisor.start_child(sup, {StandIn, trace})
      # a process of the user's, for contrast: its birth is recorded
      {:ok, user} = DynamicSupervisor.start_child(sup, {Agent, fn -> :user end})

      events = Kino.Trace.events(trace, 1000)
      assert Enum.any?(events, &match?(%Event{kind: :spawned, pid: ^user}, &1)), inspect(events)

      own = [widget | KinoTrace.Internal.pids()]

      noise =
        Enum.filter(events, fn %Event{pid: pid, peer: peer, kind: kind} ->
          pid in own or (kind in [:spawned, :getting_linked] and peer in own)
        end)

      assert noise == [], "own processes recorded:\n" <> Enum.map_join(noise, "\n", &inspect/1)
      GenServer.stop(widget)
      DynamicSupervisor.stop(sup)
    end
  end
end
