defmodule KinoTrace.Session.Info do
  @moduledoc false
  # What a session tells of itself (Kino.Trace.info/1, and KinoTrace.Client.Final once it has
  # ended): the tracer's counters (another node's last known ones once its agent is
  # gone), the rate sampled on the session's tick, its patterns and safeguards' figures.
  # Works on the session's state; reads it, and keeps the rate and last counters in it.

  alias Kino.Trace.Plan
  alias KinoTrace.Pattern
  alias KinoTrace.Backend
  alias KinoTrace.Session.{Safeguards, StackGuard}

  # The tracer's counters before there is a tracer (another node's trace whose agent
  # could not start one).
  @no_counters Map.new(
                 ~w(accepted delivered queued discarded bytes_queued dropped_rate dropped_queue_full dropped_max_events dropped_no_memory dropped_closed)a,
                 &{&1, 0}
               )

  @doc "The tracer's counters; another node's last known ones when its agent is gone."
  @spec counters(map()) :: map()
  def counters(%{backend: nil} = state), do: state.counters || @no_counters

  def counters(state) do
    Backend.counters(state.backend)
  catch
    :exit, {:agent_down, _} -> state.counters || @no_counters
  end

  @doc """
  Samples the rate (events accepted per second since the last sample) and keeps the
  counters, for when another node's agent is gone. On the session's tick.
  """
  @spec sample(map()) :: map()
  def sample(state) do
    {t0, n0} = state.rate_sample
    now = System.monotonic_time(:millisecond)
    %{accepted: n} = counters = counters(state)
    rate = if now > t0, do: (n - n0) * 1000 / (now - t0), else: 0.0
    %{state | rate: rate, rate_sample: {now, n}, counters: counters}
  end

  @doc "What `Kino.Trace.info/1` answers for the session `state`."
  @spec build(map(), [Pattern.t()]) :: map()
  def build(state, patterns) do
    c = counters(state)

    %{
      id: state.id,
      status: state.status,
      patterns: Enum.map(patterns, &Pattern.to_string/1),
      what: Plan.summary(state.plan),
      accepted: c.accepted,
      delivered: c.delivered,
      queued: c.queued,
      discarded: c.discarded,
      bytes_queued: c.bytes_queued,
      dropped: %{
        rate: c.dropped_rate,
        queue_full: c.dropped_queue_full,
        max_events: c.dropped_max_events,
        no_memory: c.dropped_no_memory,
        closed: c.dropped_closed
      },
      rate: state.rate * 1.0,
      started_at: state.started_at,
      limit: state.plan.options[:limit],
      traced: Backend.tracing?(state.backend),
      stack_guarded: StackGuard.count(state.guard),
      subscribers: map_size(state.subscribers),
      reapplied: state.reapplied,
      tracer: if(state.backend, do: Backend.mode(state.backend), else: :native)
    }
    |> put_fallback(c)
    |> put_agent(state.agent)
    |> put_ring(c)
    |> put_untraced_bifs(Safeguards.untraced_bifs(state))
  end

  # A capture's session tells whether BIF calls went untraced (KinoTrace.Session.Safeguards).
  defp put_untraced_bifs(info, nil), do: info
  defp put_untraced_bifs(info, bifs), do: Map.put(info, :untraced_bifs, bifs)

  # A recorder's ring kept on another node by its agent: its figures (for
  # KinoTrace.Session.Recorder.put_info/2).
  defp put_ring(info, %{ring: figures}), do: Map.put(info, :ring, figures)
  defp put_ring(info, _counters), do: info

  # The fallback tracer of another node also tells the trace messages it received and
  # how often its mailbox guard switched tracing off (calls meanwhile were not traced).
  defp put_fallback(info, %{fallback: figures}) do
    Map.put(info, :fallback, %{received: figures.received, switched_off: figures.guard_trips})
  end

  defp put_fallback(info, _counters), do: info

  # Another node's trace tells what its agent there is doing, or what ending left there.
  defp put_agent(info, nil), do: info
  defp put_agent(info, agent), do: Map.put(info, :agent, agent)
end
