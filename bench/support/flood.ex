defmodule KinoTraceBench.Flood do
  @moduledoc false
  # The flood: one process makes `calls` traced calls as fast as it can, under
  # kino_trace with its default options (caps, queue, return: true), into a flight
  # recorder's ring with its defaults (Kino.Trace.record/2: the newest events kept, the
  # rest overwritten; issue 37 asks its memory to stay flat), then under a :trace session
  # with a pid tracer (call + return events, like kino_trace's default).
  # A sampler records peak VM memory and peak memory of the tracing side; it stops the
  # run when VM memory passes the safety cap.

  alias KinoTrace.Tracer
  alias KinoTraceBench.{Report, Tracers, Workload}

  @sample_ms 5
  @chunk 10_000

  def run(opts \\ []) do
    calls = Keyword.get(opts, :calls, 10_000_000)
    cap = Keyword.get(opts, :memory_cap, 8 * 1024 * 1024 * 1024)

    IO.puts(
      "\nFlood: #{calls} calls as fast as the workload goes, safety stop at VM memory > #{Report.mb(cap)}"
    )

    for kind <- [:kino, :kino_record, :pid_tracer] do
      r = flood(kind, calls, cap)
      print(kind, r)
      r
    end
  end

  defp flood(kind, calls, cap) do
    :erlang.garbage_collect()
    base = :erlang.memory(:total)
    worker = Workload.spawn_worker(:small)

    ctx =
      case kind do
        :kino -> Tracers.start(:kino, [worker], [])
        :kino_record -> Tracers.start(:kino_record, [worker], [])
        :pid_tracer -> Tracers.start(:pid_tracer, [worker], return: true)
      end

    stop = :atomics.new(1, [])
    count = :counters.new(1, [])
    me = self()

    sampler =
      spawn(fn ->
        sample(me, ctx, stop, cap, %{vm: base, side: 0, mailbox: 0, stopped: false})
      end)

    ref = make_ref()
    send(worker, {:go_chunks, self(), ref, calls, @chunk, stop, count})
    {t0, t1} = receive do: ({^ref, t0, t1} -> {t0, t1})
    done = :counters.get(count, 1)
    send(sampler, {:done, self()})
    peaks = receive do: ({:peaks, p} -> p)

    after_run =
      case ctx do
        %{kind: :kino, trace: trace, resource: resource} ->
          Tracers.wait_until(fn -> Tracer.counters(resource).queued == 0 end, 120_000)
          info = Kino.Trace.info(trace)
          Kino.Trace.stop(trace)
          %{info: info}

        %{kind: :pid_tracer, session: session, sink: sink} ->
          # a backlog past the cap is thrown away, not drained
          :trace.session_destroy(session)
          {:message_queue_len, left} = Process.info(sink, :message_queue_len)
          Process.exit(sink, :kill)
          %{left_in_mailbox: left}
      end

    send(worker, :exit)
    Map.merge(%{calls: done, ns: (t1 - t0) / max(done, 1), base: base, peaks: peaks}, after_run)
  end

  defp sample(parent, ctx, stop, cap, peaks) do
    receive do
      {:done, ^parent} -> send(parent, {:peaks, peaks})
    after
      @sample_ms ->
        vm = :erlang.memory(:total)
        {side, mailbox} = side_memory(ctx)
        stopped = peaks.stopped or vm > cap
        if stopped, do: :atomics.put(stop, 1, 1)

        sample(parent, ctx, stop, cap, %{
          vm: max(peaks.vm, vm),
          side: max(peaks.side, side),
          mailbox: max(peaks.mailbox, mailbox),
          stopped: stopped
        })
    end
  end

  # kino_trace: the session process (heap, mailbox) + the native queue's bytes.
  defp side_memory(%{kind: :kino, trace: trace, resource: resource}) do
    proc =
      case Process.info(trace.session, [:memory, :message_queue_len]) do
        [memory: m, message_queue_len: q] -> {m, q}
        nil -> {0, 0}
      end

    {elem(proc, 0) + Tracer.counters(resource).bytes_queued, elem(proc, 1)}
  end

  # the pid tracer: its heap and mailbox.
  defp side_memory(%{kind: :pid_tracer, sink: sink}) do
    case Process.info(sink, [:memory, :message_queue_len]) do
      [memory: m, message_queue_len: q] -> {m, q}
      nil -> {0, 0}
    end
  end

  defp print(kind, r) do
    name =
      case kind do
        :kino -> "kino_trace (defaults)"
        :kino_record -> "recorder (defaults)"
        :pid_tracer -> "pid tracer (call+return)"
      end

    stopped = if r.peaks.stopped, do: "  STOPPED by the memory cap", else: ""

    IO.puts(
      "  #{String.pad_trailing(name, 26)} #{r.calls} calls, #{round(r.ns)} ns/call; peak VM memory " <>
        "#{Report.mb(r.peaks.vm)} (+#{Report.mb(r.peaks.vm - r.base)}); peak tracing side #{Report.mb(r.peaks.side)}, " <>
        "peak mailbox #{r.peaks.mailbox}#{stopped}"
    )

    case r do
      %{info: info} ->
        IO.puts(
          "  #{String.pad_trailing("", 26)} accepted #{info.accepted}, delivered #{info.delivered}, " <>
            "dropped #{inspect(info.dropped)}"
        )

        with %{recorder: ring} <- info do
          IO.puts(
            "  #{String.pad_trailing("", 26)} ring: kept #{ring.kept} (#{Report.mb(ring.memory)}), " <>
              "overwritten #{ring.overwritten}"
          )
        end

      %{left_in_mailbox: left} ->
        IO.puts("  #{String.pad_trailing("", 26)} left in its mailbox at the end: #{left}")
    end
  end
end
