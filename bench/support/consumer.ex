defmodule KinoTrace.Bench.Consumer do
  @moduledoc false
  # The consumer alone: a session's queue is filled with call+return events while the
  # session process is suspended (it drains nothing), then the session is resumed and
  # the drain -> decode -> pair -> history path is timed until every event is delivered:
  # with no subscriber (a {:sync, :infinity} request returns once all are in the
  # history), and with one subscriber that counts them.
  alias KinoTrace.Bench.Workload

  @calls 500_000

  def run(opts \\ []) do
    calls = opts[:calls] || @calls
    IO.puts("\nConsumer alone (#{2 * calls} call+return events queued, then delivered):")
    for subscriber? <- [false, true], do: report(subscriber?, measure(calls, subscriber?))
  end

  def measure(calls, subscriber?) do
    worker = Workload.spawn_worker(:small)

    trace =
      Kino.Trace.calls(["KinoTrace.Bench.Workload.work/1"],
        pids: worker,
        queue: [events: 2 * calls + 10, bytes: 4 * 1024 * 1024 * 1024]
      )

    counter = if subscriber?, do: counter(self(), 2 * calls)
    if counter, do: Kino.Trace.subscribe(trace, counter)
    :ok = :sys.suspend(trace.session)
    ref = make_ref()
    send(worker, {:go, self(), ref, calls})
    receive do: ({^ref, _t0, _t1} -> :ok)
    delivered = :erlang.trace_delivered(worker)
    receive do: ({:trace_delivered, ^worker, ^delivered} -> :ok)

    t0 = System.monotonic_time(:nanosecond)
    :ok = :sys.resume(trace.session)
    :ok = GenServer.call(trace.session, {:sync, :infinity}, :infinity)
    if counter, do: receive(do: ({:counted, ^counter} -> :ok))
    t1 = System.monotonic_time(:nanosecond)

    info = Kino.Trace.info(trace)
    Kino.Trace.stop(trace)
    Process.exit(worker, :kill)
    %{ns: t1 - t0, delivered: info.delivered, dropped: info.dropped}
  end

  defp counter(parent, n) do
    spawn_link(fn -> count(parent, n, 0) end)
  end

  defp count(parent, n, seen) when seen >= n, do: send(parent, {:counted, self()})

  defp count(parent, n, seen) do
    receive do
      {:kino_trace, _id, {:events, events}} -> count(parent, n, seen + length(events))
      _ -> count(parent, n, seen)
    end
  end

  defp report(subscriber?, %{ns: ns, delivered: delivered, dropped: dropped}) do
    per = ns / max(delivered, 1)
    label = if subscriber?, do: "one subscriber", else: "no subscriber "

    IO.puts(
      "  #{label}: #{delivered} events in #{div(ns, 1_000_000)} ms = #{round(per)} ns/event, " <>
        "#{Float.round(1.0e3 / per, 2)} M events/s (dropped: #{inspect(dropped)})"
    )
  end
end
