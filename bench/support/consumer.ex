defmodule KinoTraceBench.Consumer do
  @moduledoc false
  # The consumer alone: a session's queue is filled with call+return events while the
  # session process is suspended (it drains nothing), then the session is resumed and
  # the drain -> decode -> pair -> history path is timed until every event is delivered:
  # with no subscriber (a {:sync, :infinity} request returns once all are in the
  # history), and with one subscriber that counts them; then with no subscriber and
  # latency distributions on (`latency: true`), and with slow calls kept too
  # (`slowest: 5, slower_than: 1`; every call of the workload is far below 1 ms).
  #
  # Each row also prints what the traced worker paid per call while the session was
  # suspended (its queue filling): the producer's side, the same code path in every row,
  # since `latency:`, `slowest:` and `slower_than:` change nothing the tracer is given
  # (the same flags and match specs as `return: true`; the session does their work).
  alias KinoTraceBench.Workload

  @calls 500_000

  def run(opts \\ []) do
    calls = opts[:calls] || @calls
    IO.puts("\nConsumer alone (#{2 * calls} call+return events queued, then delivered):")

    rows = [
      {"no subscriber ", false, []},
      {"one subscriber", true, []},
      {"latency: true ", false, [latency: true]},
      {"latency + slow", false, [latency: true, slowest: 5, slower_than: 1]}
    ]

    [none, one | _] =
      for {label, subscriber?, opts} <- rows, do: report(label, measure(calls, subscriber?, opts))
    compare_decoders(calls)
    # M events/s, for KinoTraceBench.Targets
    %{none: none, one: one}
  end

  # The two decoders on the same events: two native sessions trace the same calls; one is
  # drained raw and decoded by KinoTrace.Tracer.Decoder, the other drained decoded
  # (KinoTrace.Tracer.NativeDecoder), 100 events at a time into a history, as a session does.
  # Each runs in a fresh process: wall and CPU time, in one run (a noisy machine slows
  # both alike).
  def compare_decoders(calls) do
    alias KinoTrace.Tracer
    alias KinoTrace.Tracer.{Decoder, NativeDecoder}
    worker = Workload.spawn_worker(:small)
    limits = %{queue: [events: queue_events(calls), bytes: 4 * 1024 * 1024 * 1024]}

    sessions =
      for i <- 1..3 do
        resource = Tracer.new_session(self(), limits)

        session =
          :trace.session_create(:"kino_trace_bench_#{i}", {:kino_trace_tracer, resource}, [])

        :trace.process(session, worker, true, [:call])
        :trace.function(session, {Workload, :work, 1}, [{:_, [], [{:return_trace}]}], [:local])
        {resource, session}
      end

    ref = make_ref()
    send(worker, {:go, self(), ref, calls})
    receive do: ({^ref, _t0, _t1} -> :ok)
    delivered = :erlang.trace_delivered(worker)
    receive do: ({:trace_delivered, ^worker, ^delivered} -> :ok)
    [{elixir_res, _}, {native_res, _}, {latency_res, _}] = sessions

    elixir_step = fn decoder ->
      {raw, more} = Tracer.drain(elixir_res, 100)
      {events, decoder} = Decoder.decode(decoder, raw)
      {events, more, decoder}
    end

    native_step = fn decoder ->
      {events, more} = NativeDecoder.drain(decoder, native_res, 100)
      {events, more, decoder}
    end

    # the native decoder with latency distributions built as a session builds them
    latency_step = fn {decoder, latency} ->
      {events, more} = NativeDecoder.drain(decoder, latency_res, 100)
      {events, more, {decoder, KinoTrace.Latency.add(latency, events)}}
    end

    elixir = timed(fn -> drain_all(elixir_step, Decoder.new()) end)
    native = timed(fn -> drain_all(native_step, NativeDecoder.new()) end)

    latency =
      timed(fn ->
        drain_all(latency_step, {NativeDecoder.new(), KinoTrace.Latency.new()})
      end)

    for {resource, session} <- sessions do
      :trace.session_destroy(session)
      Tracer.close(resource)
    end

    Process.exit(worker, :kill)

    IO.puts(
      "  decoders alone: Elixir #{per(elixir)}; native #{per(native)}; native/Elixir " <>
        "#{Float.round(elem(native, 1) / elem(elixir, 1), 2)} (wall), " <>
        "#{Float.round(elem(native, 2) / max(elem(elixir, 2), 1), 2)} (CPU)"
    )

    IO.puts("  native decoder + latency distributions (Latency.add): #{per(latency)}")
  end

  defp per({n, wall_ns, cpu_ms}) do
    "#{round(wall_ns / max(n, 1))} ns/event wall, #{round(cpu_ms * 1.0e6 / max(n, 1))} ns/event CPU (#{n} events)"
  end

  # {events, wall ns, VM CPU ms} of `fun` run in a fresh process.
  defp timed(fun) do
    parent = self()

    pid =
      spawn(fn ->
        :erlang.statistics(:runtime)
        t0 = System.monotonic_time(:nanosecond)
        n = fun.()
        t1 = System.monotonic_time(:nanosecond)
        {_, cpu_ms} = :erlang.statistics(:runtime)
        send(parent, {self(), {n, t1 - t0, cpu_ms}})
      end)

    receive do: ({^pid, result} -> result)
  end

  defp drain_all(step, decoder),
    do: drain_all(step, decoder, KinoTrace.History.new(10_000), 0)

  defp drain_all(step, decoder, history, n) do
    case step.(decoder) do
      {[], false, _decoder} ->
        n

      {[], true, decoder} ->
        drain_all(step, decoder, history, n)

      {events, more, decoder} ->
        history = KinoTrace.History.push(history, events)

        if more,
          do: drain_all(step, decoder, history, n + length(events)),
          else: n + length(events)
    end
  end

  def measure(calls, subscriber?, opts \\ []) do
    worker = Workload.spawn_worker(:small)

    trace =
      Kino.Trace.calls(
        ["KinoTraceBench.Workload.work/1"],
        [pids: worker, queue: [events: queue_events(calls), bytes: 4 * 1024 * 1024 * 1024]] ++
          opts
      )

    counter = if subscriber?, do: counter(self())
    if counter, do: Kino.Trace.subscribe(trace, counter)
    :ok = :sys.suspend(trace.session)
    ref = make_ref()
    send(worker, {:go, self(), ref, calls})
    worker_ns = receive do: ({^ref, w0, w1} -> w1 - w0)
    delivered = :erlang.trace_delivered(worker)
    receive do: ({:trace_delivered, ^worker, ^delivered} -> :ok)

    :erlang.statistics(:runtime)
    t0 = System.monotonic_time(:nanosecond)
    :ok = :sys.resume(trace.session)
    :ok = GenServer.call(trace.session, {:sync, :infinity}, :infinity)
    # What the session delivered (all of it unless the queue dropped some, as it counts).
    info = Kino.Trace.info(trace)

    if counter do
      send(counter, {:expect, info.delivered})
      receive do: ({:counted, ^counter} -> :ok)
    end

    t1 = System.monotonic_time(:nanosecond)
    {_, cpu_ms} = :erlang.statistics(:runtime)

    Kino.Trace.stop(trace)
    Process.exit(worker, :kill)

    %{
      ns: t1 - t0,
      delivered: info.delivered,
      dropped: info.dropped,
      worker_ns_per_call: worker_ns / calls,
      cpu_ms: cpu_ms
    }
  end

  # The queue's event cap, with room for what the worker's other shards may hold back:
  # the cap is credit drawn per scheduler in blocks of cap / (64 x shards) (see
  # c_src/core/session_core.hpp, "Caps"), so a worker that moves between schedulers may
  # find the queue full short of the cap, and the counter would wait for dropped events.
  defp queue_events(calls), do: 2 * calls + div(2 * calls, 16) + 10

  # Counts the events a subscriber gets until it has as many as `{:expect, n}` says.
  defp counter(parent) do
    spawn_link(fn -> count(parent, nil, 0) end)
  end

  defp count(parent, n, seen) when is_integer(n) and seen >= n,
    do: send(parent, {:counted, self()})

  defp count(parent, n, seen) do
    receive do
      {:kino_trace, _id, {:events, events}} -> count(parent, n, seen + length(events))
      {:expect, expected} -> count(parent, expected, seen)
      _ -> count(parent, n, seen)
    end
  end

  defp report(label, %{ns: ns, delivered: delivered, dropped: dropped} = m) do
    per = ns / max(delivered, 1)

    IO.puts(
      "  #{label}: #{delivered} events in #{div(ns, 1_000_000)} ms = #{round(per)} ns/event, " <>
        "#{Float.round(1.0e3 / per, 2)} M events/s; VM CPU #{round(m.cpu_ms * 1.0e6 / max(delivered, 1))} ns/event, " <>
        "#{Float.round(delivered / max(m.cpu_ms, 1) / 1000, 2)} M events/CPU-s (dropped: #{inspect(dropped)}); " <>
        "the traced worker #{round(m.worker_ns_per_call)} ns/call"
    )

    1.0e3 / per
  end
end
