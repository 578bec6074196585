defmodule KinoTrace.Widget.HistoryTest do
  # A real trace: what a browser gets when it connects, with `:history`.
  use ExUnit.Case, async: true

  alias KinoTrace.Widget.Controller

  @moduletag timeout: 30_000

  # Runs `n` traced calls in a worker; returns their 2 * n events once the trace has them all.
  defp calls(trace, worker, ids) do
    before = length(Kino.Trace.events(trace, 10_000))
    send(worker, {:run, ids, self()})
    assert_receive {:ran, ^ids}, 10_000
    events = KinoTraceTest.Helpers.events_after(trace, worker)
    assert length(events) == before + 2 * Enum.count(ids)
    Enum.drop(events, before)
  end

  defp worker do
    spawn_link(fn ->
      Stream.repeatedly(fn ->
        receive do
          {:run, ids, from} ->
            Enum.each(ids, &SampleApp.Repo.get(:users, &1))
            send(from, {:ran, ids})
        end
      end)
      |> Stream.run()
    end)
  end

  # Processes the trace's batches and flushes like the widget's process, until the
  # controller has pushed the event with id `last`.
  defp follow(controller, last) do
    receive do
      message ->
        {:ok, effects, controller} = Controller.handle_info(controller, message)

        pushed = for {:broadcast, "events", %{events: rows}} <- effects, row <- rows, do: row.id

        for {:send_after, msg, ms} <- effects,
            msg != :tick,
            do: Process.send_after(self(), msg, ms)

        if last in pushed, do: controller, else: follow(controller, last)
    after
      5_000 -> flunk("event #{last} was not pushed")
    end
  end

  test ":history counts events, not log rows: a call and its return are two" do
    worker = worker()
    trace = Kino.Trace.calls(["SampleApp.Repo.get/2"], pids: worker)
    on_exit(fn -> Kino.Trace.stop(trace) end)

    # Events from before the widget existed come from the trace's history...
    events = calls(trace, worker, 1..4)
    {controller, _} = Controller.init(trace, history: 5)
    {payload, controller} = Controller.connect(controller)
    assert Enum.map(payload.events, & &1.id) == events |> Enum.take(-5) |> Enum.map(& &1.id)
    assert Enum.map(payload.events, & &1.kind) == ~w(return call return call return)

    # ... and those it pushed since from its own memory, with the same count.
    events = calls(trace, worker, 5..7)
    controller = follow(controller, List.last(events).id)
    {payload, _controller} = Controller.connect(controller)
    assert Enum.map(payload.events, & &1.id) == events |> Enum.take(-5) |> Enum.map(& &1.id)

    assert Enum.map(payload.events, &(&1.call || &1.result)) == [
             "{:ok, %{id: 5, table: :users}}",
             "SampleApp.Repo.get(:users, 6)",
             "{:ok, %{id: 6, table: :users}}",
             "SampleApp.Repo.get(:users, 7)",
             "{:ok, %{id: 7, table: :users}}"
           ]
  end
end
