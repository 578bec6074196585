defmodule KinoTraceBench.Tracers do
  @moduledoc false
  # Starting and ending each tracer the benchmark compares, on a list of worker pids.
  # start(kind, workers, opts) -> ctx; finish(ctx) -> %{accepted: _, dropped: _, ...}
  # (finish waits until the tracing side has consumed everything, so one run's backlog
  # never steals CPU from the next).

  alias KinoTrace.Tracer
  alias KinoTraceBench.{FloorTracer, Workload}

  @mfa {Workload, :work, 1}
  @pattern "KinoTraceBench.Workload.work/1"

  def mfa, do: @mfa

  # --- no tracing --------------------------------------------------------------------

  def start(:none, _workers, _opts), do: %{kind: :none}

  # --- the floor: a NIF tracer that discards in enabled (or accepts and copies nothing)

  def start(:floor, workers, _opts), do: floor_session(workers, :discard, [:call], true)

  def start(:floor_accept, workers, opts),
    do: floor_session(workers, :accept, [:call], match_spec(opts))

  # --- OTP's call counters in a session (stats mode) ------------------------------------

  def start({:stats, counters}, workers, _opts) do
    Code.ensure_loaded!(FloorTracer)
    session = :trace.session_create(:kino_trace_bench, {FloorTracer, :discard}, [])
    for w <- workers, do: :trace.process(session, w, true, [:call])
    for c <- counters, do: 1 = :trace.function(session, @mfa, true, [c])
    %{kind: :stats, session: session, counters: counters}
  end

  # --- kino_trace through its public API ---------------------------------------------------

  def start(:kino, workers, opts) do
    opts = Keyword.merge([pids: workers], opts)
    trace = Kino.Trace.calls(@pattern, opts)
    %{kind: :kino, trace: trace, resource: KinoTrace.Client.internals(trace).resource}
  end

  # a flight recorder (Kino.Trace.record/2): the same path in the traced process
  def start(:kino_record, workers, opts) do
    opts = Keyword.merge([pids: workers], opts)
    trace = Kino.Trace.record(@pattern, opts)
    %{kind: :kino, trace: trace, resource: KinoTrace.Client.internals(trace).resource}
  end

  # --- kino_trace on its pure-Erlang tracer (where the native one cannot build) ---------------

  def start(:kino_fallback, workers, opts) do
    previous = Application.fetch_env(:kino_trace, :tracer)
    Application.put_env(:kino_trace, :tracer, :fallback)

    try do
      %{
        kind: :kino_fallback,
        trace: Kino.Trace.calls(@pattern, Keyword.merge([pids: workers], opts))
      }
    after
      case previous do
        {:ok, value} -> Application.put_env(:kino_trace, :tracer, value)
        :error -> Application.delete_env(:kino_trace, :tracer)
      end
    end
  end

  # --- kino_trace's native layer, drained by a process that throws the events away -----------

  def start(:native, workers, opts),
    do: start({:native, KinoTrace.Session.DrainPacing.new()}, workers, opts)

  # the same, drained at once on every wake-up (what pacing saves)
  def start(:native_unpaced, workers, opts),
    do: start({:native, KinoTrace.Session.DrainPacing.new(0)}, workers, opts)

  # the same, drained only once the loop is over: the traced process with no consumer beside it
  def start(:native_deferred, workers, opts), do: start({:native, :deferred}, workers, opts)

  def start({:native, pacing}, workers, opts) do
    drainer = spawn(fn -> native_drainer(nil, pacing) end)
    limits = KinoTrace.Plan.Options.native_limits(KinoTrace.Plan.Options.validate!(opts))
    resource = Tracer.new_session(drainer, limits)
    send(drainer, {:resource, resource})
    Code.ensure_loaded!(:kino_trace_tracer)
    session = :trace.session_create(:kino_trace_bench, {:kino_trace_tracer, resource}, [])
    for w <- workers, do: :trace.process(session, w, true, [:call, :scheduler_id])
    1 = :trace.function(session, @mfa, match_spec(opts), [:local])
    %{kind: :native, session: session, resource: resource, drainer: drainer}
  end

  # --- an OTP 27 :trace session with a pid tracer that receives and discards ---------------

  def start(:pid_tracer, workers, opts) do
    sink = spawn(fn -> sink() end)
    session = :trace.session_create(:kino_trace_bench, sink, [])
    for w <- workers, do: :trace.process(session, w, true, [:call])
    1 = :trace.function(session, @mfa, match_spec(opts), [:local])
    %{kind: :pid_tracer, session: session, sink: sink}
  end

  # --- :dbg with a handler that discards ------------------------------------------------

  def start(:dbg, workers, opts) do
    {:ok, _} = :dbg.tracer(:process, {fn _msg, acc -> acc end, nil})
    for w <- workers, do: {:ok, _} = :dbg.p(w, [:c])
    {:ok, _} = :dbg.tpl(Workload, :work, 1, if(opts[:return], do: match_spec(opts), else: []))
    {:ok, sink} = :dbg.get_tracer()
    %{kind: :dbg, sink: sink}
  end

  defp floor_session(workers, state, flags, match_spec) do
    Code.ensure_loaded!(FloorTracer)
    session = :trace.session_create(:kino_trace_bench, {FloorTracer, state}, [])
    for w <- workers, do: :trace.process(session, w, true, flags)
    1 = :trace.function(session, @mfa, match_spec, [:local])
    %{kind: :floor, session: session}
  end

  defp match_spec(opts) do
    if opts[:return], do: [{:_, [], [{:exception_trace}]}], else: true
  end

  # --- ending ------------------------------------------------------------------------------

  def finish(%{kind: :none}), do: %{}
  def finish(%{kind: :floor, session: s}), do: destroyed(s, %{})

  def finish(%{kind: :stats, session: s, counters: counters}) do
    counts =
      for c <- counters, into: %{} do
        case :trace.info(s, @mfa, c) do
          {^c, [{_pid, n}]} ->
            {c, n}

          {^c, [{_pid, n, _s, _us} | _] = rows} ->
            {c, n + Enum.sum(for r <- tl(rows), do: elem(r, 1))}

          {^c, n} when is_integer(n) ->
            {c, n}

          {^c, other} ->
            {c, other}
        end
      end

    destroyed(s, %{calls_counted: counts})
  end

  def finish(%{kind: :kino, trace: trace, resource: resource}) do
    wait_until(fn -> Tracer.counters(resource).queued == 0 end)
    info = Kino.Trace.info(trace)
    wakeups = Tracer.counters(resource).wakeups
    :ok = Kino.Trace.stop(trace)

    %{
      accepted: info.accepted,
      dropped: info.dropped |> Map.values() |> Enum.sum(),
      dropped_by: info.dropped,
      wakeups: wakeups
    }
  end

  def finish(%{kind: :kino_fallback, trace: trace}) do
    :ok = Kino.Trace.flush(trace)
    info = Kino.Trace.info(trace)
    {:fallback, _why} = info.tracer
    :ok = Kino.Trace.stop(trace)

    %{
      accepted: info.accepted,
      dropped: info.dropped |> Map.values() |> Enum.sum(),
      dropped_by: info.dropped
    }
  end

  def finish(%{kind: :native, session: s, resource: resource, drainer: drainer}) do
    send(drainer, :drain_now)
    wait_until(fn -> Tracer.counters(resource).queued == 0 end)
    c = Tracer.counters(resource)
    :trace.session_destroy(s)
    Tracer.close(resource)
    Process.exit(drainer, :kill)

    %{
      accepted: c.accepted,
      dropped:
        c.dropped_rate + c.dropped_queue_full + c.dropped_max_events + c.dropped_closed +
          Map.get(c, :dropped_no_memory, 0),
      dropped_by: %{rate: c.dropped_rate, queue_full: c.dropped_queue_full},
      wakeups: c.wakeups
    }
  end

  def finish(%{kind: :pid_tracer, session: s, sink: sink}) do
    wait_until(fn -> Process.info(sink, :message_queue_len) == {:message_queue_len, 0} end)
    send(sink, {:count, self()})
    n = receive do: ({:sink_count, n} -> n)
    Process.exit(sink, :kill)
    destroyed(s, %{received: n})
  end

  def finish(%{kind: :dbg, sink: sink}) do
    wait_until(fn -> Process.info(sink, :message_queue_len) in [{:message_queue_len, 0}, nil] end)
    :dbg.stop()
    %{}
  end

  defp destroyed(session, result) do
    :trace.session_destroy(session)
    result
  end

  def wait_until(fun, deadline \\ 60_000) do
    cond do
      fun.() -> :ok
      deadline <= 0 -> raise "the tracing side did not catch up within a minute"
      true -> Process.sleep(5) && wait_until(fun, deadline - 5)
    end
  end

  defp sink, do: sink(0)

  defp sink(n) do
    receive do
      {:count, from} ->
        send(from, {:sink_count, n})
        sink(n)

      _ ->
        sink(n + 1)
    end
  end

  defp native_drainer(nil, pacing) do
    receive do
      {:resource, r} -> native_drainer(r, pacing)
    end
  end

  # Deferred: nothing is drained before :drain_now, then every event at once (and from
  # then on, as 3u does).
  defp native_drainer(resource, :deferred) do
    receive do
      :drain_now ->
        drain_all(resource)
        native_drainer(resource, KinoTrace.Session.DrainPacing.new(0))
    end
  end

  # Paced as a session paces its drains (KinoTrace.Session.DrainPacing).
  defp native_drainer(resource, pacing) do
    receive do
      {:kino_trace, _id, :ready} ->
        case KinoTrace.Session.DrainPacing.ready(pacing, KinoTrace.Session.DrainPacing.now()) do
          :now -> :ok
          {:after, ms} -> Process.sleep(ms)
        end

        drain_all(resource)

        native_drainer(
          resource,
          KinoTrace.Session.DrainPacing.emptied(pacing, KinoTrace.Session.DrainPacing.now())
        )

      # the drain that put the queue to sleep asked for one more (as the session does);
      # :drain_now, at the end, in case a wake-up went to a deferred drainer
      msg when msg in [:recheck, :drain_now] ->
        drain_all(resource)
        native_drainer(resource, pacing)

      _ ->
        native_drainer(resource, pacing)
    end
  end

  defp drain_all(resource) do
    case Tracer.drain(resource, 1000) do
      {_, true} -> drain_all(resource)
      {_, false} -> :ok
      {_, :recheck} -> Process.send_after(self(), :recheck, 1)
    end
  end
end
