defmodule Kino.Trace.Capture do
  @moduledoc """
  The calls captured by `Kino.Trace.capture/3`: every event of the block, in order, and
  the block's result.

      capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      [%Kino.Trace.Event{kind: :call, args: [[1, 2]]}, %Kino.Trace.Event{kind: :return, return: 3}] =
        capture.events

  Use it with `Kino.Trace.Assertions`. With `messages: true` and `processes: true`,
  the capture also records what the traced processes send and receive (`:pattern`
  filters messages; `timeouts: true` adds each `receive ... after` that timed out) and their lifecycle (spawn, exit, link, register...). Of the calling
  process, only what it does while the block runs is kept: the messages and calls
  kino_trace makes around the block (starting the trace, collecting it) are not.

  ## Lost events

  Tracing never blocks the traced code, so a capture can lose events:

    * when the block makes them faster than the trace collects them and the queue is
      full (`:queue_full`), or over the `:rate` (`:rate`): they are dropped and counted;
    * at the `:limit` or the `:timeout`, the trace ends before the block does: the few
      events caught on their way are counted (`:max_events`, `:closed`), what the block
      does later is not traced at all (`truncated` is then `:limit` or `:timeout`).

  And on OTP 27.3, BIF calls (such as `:ets.insert/2`) may go untraced: the VM switches
  BIF tracing off in every session when any trace session ends or clears a BIF's
  pattern (erlang/otp#10349). kino_trace's own sessions never do that while a trace of
  BIFs runs, but other tools' may. A capture of BIFs checks before and after the block
  whether it happened (a canary BIF of its own, traced while it runs), and lists its BIFs in
  `untraced_bifs` when it did.

  `dropped` counts the drops by reason, read after every event of the block was queued
  or dropped. `complete?/1` is `true` only when nothing was dropped, the trace did not
  end early and no BIF went untraced. Every assertion of `Kino.Trace.Assertions` on an incomplete capture fails,
  saying how many events were dropped, why, and how to avoid it (`loss_report/1`).

  A capture's queue holds as many events as its `:limit` (1_000_000 by default) within
  256 MB (about 190 bytes per small event), so a block that makes fewer events than the
  limit loses none. Narrower patterns make fewer events; `queue: [events: n, bytes: n]`
  and `limit: n` raise the caps.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> {capture.dropped, capture.truncated, Kino.Trace.Capture.complete?(capture)}
      {%{rate: 0, queue_full: 0, max_events: 0, closed: 0, no_memory: 0}, nil, true}
      iex> lossy = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1]) + Enum.sum([2]) end, limit: 2)
      iex> {length(lossy.events), lossy.truncated, Kino.Trace.Capture.complete?(lossy)}
      {2, :limit, false}
  """

  alias Kino.Trace.Plan
  alias KinoTrace.{Client, Front, Launcher, Pattern}
  alias KinoTrace.Capture.{Collector, Sends}
  alias KinoTrace.Limits
  alias KinoTrace.Plan.Options
  alias KinoTrace.Base.MFA

  @no_drops %{rate: 0, queue_full: 0, max_events: 0, closed: 0, no_memory: 0}
  # A capture's own defaults of the limits are KinoTrace.Limits' (its `capture` column).
  @limit Limits.capture_default(:limit)
  @queue_bytes Limits.capture_default(:queue_bytes)

  defstruct events: [],
            result: nil,
            patterns: [],
            info: %{},
            dropped: @no_drops,
            truncated: nil,
            limits: %{},
            untraced_receivers: [],
            untraced_bifs: []

  @typedoc "Events dropped, by reason (as `Kino.Trace.info/1` counts them)."
  @type dropped :: Kino.Trace.dropped()

  @typedoc """
  A capture. `info` is `Kino.Trace.info/1` of its trace when the block ended; `limits`
  the `:limit`, `:queue`, `:rate` and `:timeout` it ran with. `truncated` is `:limit` or
  `:timeout` when the trace ended before the block did (later events were not traced),
  else `nil`. `untraced_receivers` are the processes the block sent messages to that the
  capture did not trace, by registered name when they have one. `untraced_bifs` are the traced BIFs (`{m, f, a}`, `:_` as
  wildcards) whose calls may be missing because BIF tracing was switched off while the
  block ran (see Lost events).
  """
  @type t :: %__MODULE__{
          events: [Kino.Trace.Event.t()],
          result: term(),
          patterns: [String.t()],
          info: map(),
          dropped: dropped(),
          truncated: nil | :limit | :timeout,
          limits: %{optional(:limit | :queue | :rate | :timeout) => term()},
          untraced_receivers: [Sends.receiver()],
          untraced_bifs: [{atom(), atom(), atom() | arity()}]
        }

  @defaults Keyword.merge(Options.defaults(),
              pids: [],
              children: true,
              history: Limits.capture_default(:history),
              limit: @limit,
              queue: [events: Limits.capture_default(:queue_events), bytes: @queue_bytes],
              max_items: Limits.capture_default(:max_items),
              max_binary: Limits.capture_default(:max_binary),
              max_bytes: Limits.capture_default(:max_bytes)
            )

  @doc """
  True when the capture lost no event: nothing dropped (`dropped` is all zeros), the
  trace did not end before the block (`truncated` is `nil`) and no BIF went untraced
  (`untraced_bifs` is empty). A list of events, or a map without these keys, counts as
  complete, since it cannot tell.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1]) end)
      iex> Kino.Trace.Capture.complete?(capture)
      true
      iex> Kino.Trace.Capture.complete?(%{capture | truncated: :limit})
      false
  """
  @spec complete?(t() | map() | list()) :: boolean()
  def complete?(capture),
    do: dropped_total(capture) == 0 and truncated(capture) == nil and untraced_bifs(capture) == []

  @doc """
  How many events the capture dropped, all reasons together.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1]) end, rate: {1, 60_000})
      iex> {length(capture.events), Kino.Trace.Capture.dropped_total(capture), capture.dropped.rate}
      {1, 1, 1}
  """
  @spec dropped_total(t() | map() | list()) :: non_neg_integer()
  def dropped_total(%{dropped: %{} = dropped}), do: dropped |> Map.values() |> Enum.sum()
  def dropped_total(_capture), do: 0

  defp truncated(%{truncated: truncated}), do: truncated
  defp truncated(_capture), do: nil

  defp untraced_bifs(%{untraced_bifs: bifs}) when is_list(bifs), do: bifs
  defp untraced_bifs(_capture), do: []

  @doc """
  Why the capture cannot be trusted, or `nil` when it is complete: how many events were
  dropped, for which reasons, whether the trace ended before the block, which BIFs went
  untraced, and how to capture everything. The assertions of `Kino.Trace.Assertions`
  fail with it.

      iex> Kino.Trace.Capture.loss_report(%Kino.Trace.Capture{})
      nil
      iex> capture = %Kino.Trace.Capture{dropped: %{rate: 0, queue_full: 12, max_events: 0, closed: 0}}
      iex> Kino.Trace.Capture.loss_report(capture) =~ "12 dropped because the capture's queue was full"
      true
  """
  @spec loss_report(t() | map() | list()) :: String.t() | nil
  def loss_report(capture) do
    bifs = untraced_bifs(capture)

    case [dropped_total(capture) > 0 or truncated(capture) != nil, bifs != []] do
      [false, false] -> nil
      [true, false] -> drop_report(capture)
      [false, true] -> bif_report(bifs)
      [true, true] -> drop_report(capture) <> "\n\n" <> bif_report(bifs)
    end
  end

  defp bif_report(bifs) do
    "The capture is incomplete: BIF tracing was switched off while the block ran, so " <>
      "calls of #{Enum.map_join(bifs, ", ", &bif_name/1)} may be missing (untraced_bifs). " <>
      "No assertion on them can be trusted: a call the capture lacks may still have " <>
      "happened, and counts may be short.\n\n" <>
      "OTP 27.3 switches off the tracing of BIFs in every trace session when any session " <>
      "ends or clears a BIF's pattern (erlang/otp#10349). kino_trace's own sessions do " <>
      "neither while a trace of BIFs runs, so another tool did (:dbg, a :trace session, a " <>
      "profiler). To capture every call:\n\n" <>
      "  * run the test where no other tool ends a trace session meanwhile (async: false, " <>
      "or without the other tool)\n" <>
      "  * or run it on an OTP release with the fix of erlang/otp#10349"
  end

  defp bif_name({m, f, a} = mfa) when is_atom(m) and is_atom(f) and is_integer(a),
    do: MFA.to_string(mfa)

  defp bif_name(pattern), do: inspect(pattern)

  defp drop_report(capture) do
    limits = Map.get(capture, :limits) || %{}
    truncated = truncated(capture)
    dropped = Map.get(capture, :dropped) || %{}

    reasons =
      for reason <- [:queue_full, :no_memory, :max_events, :closed, :rate],
          (n = Map.get(dropped, reason, 0)) > 0,
          do: {reason, n}

    lines =
      Enum.map(reasons, fn {reason, n} ->
        "    #{n} dropped #{why(reason, limits)} (#{reason})\n"
      end)

    # Events dropped as the trace closed share the cause of its end, when known.
    causes = Enum.map(reasons, &elem(&1, 0))
    causes = if truncated, do: (causes -- [:closed]) ++ [truncated], else: causes

    "The capture is incomplete: #{lost(dropped_total(capture), truncated, limits)}. No " <>
      "assertion on it can be trusted: a call the capture lacks may still have happened, " <>
      "and counts may be short.\n\n" <>
      if(lines == [], do: "", else: Enum.join(lines) <> "\n") <>
      "To capture every event:\n\n" <>
      (causes
       |> Enum.flat_map(&remedies(&1, limits))
       |> Enum.uniq()
       |> Enum.map_join("\n", &"  * #{&1}"))
  end

  defp lost(total, nil, _limits), do: "#{total} of its events were dropped"

  defp lost(0, truncated, limits) do
    "the trace ended before the block did, at its #{ending(truncated, limits)}, so what " <>
      "the block did after that was not traced"
  end

  defp lost(total, truncated, limits),
    do: lost(total, nil, limits) <> ", and " <> lost(0, truncated, limits)

  defp ending(:limit, limits), do: "limit of #{limits[:limit]} events"
  defp ending(:timeout, limits), do: "timeout of #{limits[:timeout]} ms"

  defp why(:queue_full, _limits),
    do:
      "because the capture's queue was full (the block made events faster than they were collected)"

  defp why(:no_memory, _limits), do: "because the capture's queue could not allocate memory"

  defp why(:max_events, limits), do: "past the capture's limit#{setting(limits, :limit)}"
  defp why(:closed, _limits), do: "as the trace ended"
  defp why(:rate, limits), do: "over the capture's rate#{setting(limits, :rate)}"

  @narrower "trace fewer calls: give Kino.Trace.capture/3 narrower patterns (a function rather than a whole module, argument patterns)"

  defp remedies(:queue_full, limits),
    do: [
      @narrower,
      "or give it a bigger queue: the queue: [events: n, bytes: n] option#{setting(limits, :queue)}"
    ]

  defp remedies(:no_memory, limits),
    do: [
      @narrower,
      "or give it a smaller queue, within the memory the VM has: queue: [bytes: n]#{setting(limits, :queue)}"
    ]

  defp remedies(reason, limits) when reason in [:max_events, :limit],
    do: [@narrower, "or raise its limit: option#{setting(limits, :limit)}"]

  defp remedies(:timeout, limits),
    do: [
      "raise the timeout: option of Kino.Trace.capture/3#{setting(limits, :timeout)}, or leave it out"
    ]

  defp remedies(:rate, limits),
    do: [
      "leave out the rate: option of Kino.Trace.capture/3, or raise it#{setting(limits, :rate)}"
    ]

  # Only the limit or the timeout closes a capture's trace while the block runs.
  defp remedies(:closed, limits),
    do: remedies(:limit, limits) ++ if(limits[:timeout], do: remedies(:timeout, limits), else: [])

  defp setting(limits, key) do
    case limits do
      %{^key => value} when value != nil -> " (now #{key}: #{inspect(value)})"
      _ -> ""
    end
  end

  @doc false
  def run(patterns, fun, opts) do
    # Only the block runs in the caller: setting up and collecting run in kino_trace's
    # own processes (KinoTrace.Front), so no trace, this one or another, records them.
    owner = self()
    setup = Front.run(fn -> start(patterns, opts, owner) end)

    {result, t0, t1} =
      try do
        t0 = :erlang.monotonic_time(:nanosecond)
        result = fun.()
        {result, t0, :erlang.monotonic_time(:nanosecond)}
      catch
        kind, reason ->
          Front.run(fn -> stop(setup) end)
          :erlang.raise(kind, reason, __STACKTRACE__)
      end

    Front.run(fn ->
      try do
        collect(setup, owner, result, t0, t1)
      after
        stop(setup)
      end
    end)
  end

  defp start(patterns, opts, owner) do
    {extra_pids, opts} = Keyword.pop(opts, :pids, [])
    {messages?, opts} = Keyword.pop(opts, :messages, false)
    {processes?, opts} = Keyword.pop(opts, :processes, false)

    unless is_boolean(messages?) and is_boolean(processes?) do
      raise ArgumentError, "invalid value for :messages or :processes: expected a boolean"
    end

    defaults = Keyword.delete(@defaults, :pids)
    opts = opts |> Options.validate!(defaults) |> size_queue(opts)

    extra_pids =
      if extra_pids == [],
        do: [],
        else: Options.validate!(pids: extra_pids)[:pids] |> Options.resolve_pids()

    targets = [owner | extra_pids]

    what =
      [calls: patterns] ++
        if(messages?, do: [messages: targets], else: []) ++
        if(processes?, do: [processes: targets], else: [])

    # its session tells whether BIF calls went untraced (see KinoTrace.Backend.BifWorkaround)
    plan = what |> Plan.new!(Keyword.put(opts, :pids, targets), @defaults) |> Plan.watch_bifs()

    # started before the trace, so it is not one of the processes the block spawns
    collector = Collector.start(owner)
    started = System.monotonic_time(:nanosecond)

    {trace, sends} =
      try do
        trace = Launcher.start!(plan, owner)
        Client.subscribe(trace, collector)
        {trace, Sends.start(targets, opts[:children], trace.session)}
      rescue
        e ->
          Collector.stop(collector)
          reraise e, __STACKTRACE__
      end

    %{
      plan: plan,
      opts: opts,
      collector: collector,
      started: started,
      trace: trace,
      sends: sends
    }
  end

  defp stop(%{trace: trace, sends: sends, collector: collector}) do
    Sends.stop(sends)
    Client.stop(trace)
    Collector.stop(collector)
  end

  defp collect(%{trace: trace, opts: opts} = setup, owner, result, t0, t1) do
    ran = System.convert_time_unit(t1 - setup.started, :nanosecond, :millisecond)
    {events, info} = collect(trace, setup.collector)
    events = Enum.filter(events, &in_block?(&1, owner, t0, t1))

    %__MODULE__{
      events: events,
      result: result,
      patterns: Enum.map(setup.plan.calls.patterns, &Pattern.to_string/1),
      info: info,
      dropped: Map.merge(@no_drops, info.dropped),
      truncated: ended_early(info, opts[:timeout], ran),
      limits: Map.new([:limit, :queue, :rate, :timeout], &{&1, opts[&1]}),
      untraced_receivers: Sends.untraced(setup.sends, trace),
      untraced_bifs: Map.get(info, :untraced_bifs, [])
    }
  end

  # What the calling process did before the block started or after it returned is
  # kino_trace's own bookkeeping (starting the trace, subscribing, collecting), not the
  # block's. Other processes' events are the block's whenever they happen.
  defp in_block?(%{pid: pid, monotonic: t}, pid, t0, t1) when is_integer(t),
    do: t >= t0 and t <= t1

  defp in_block?(_event, _self, _t0, _t1), do: true

  # Whether the trace ended before the block did. At the limit the native session stops
  # tracing the processes, so the block's later events are not even counted. A timeout
  # (its timer starts after `started`) can only have cut the block if the block ran that long.
  defp ended_early(%{limit: limit, accepted: accepted}, _timeout, _ran)
       when is_integer(limit) and accepted >= limit,
       do: :limit

  defp ended_early(%{status: :timeout}, timeout, ran) when ran >= timeout, do: :timeout
  defp ended_early(_info, _timeout, _ran), do: nil

  # The queue holds as many events as the limit, and the capture's bytes, unless the
  # caller said otherwise (Options fills a partial :queue with the defaults of calls/2).
  defp size_queue(opts, given) do
    given_queue = Keyword.get(given, :queue, [])
    events = given_queue[:events] || opts[:limit] || @limit
    bytes = given_queue[:bytes] || @queue_bytes
    Keyword.put(opts, :queue, events: events, bytes: bytes)
  end

  # The NIF tracer runs inside the traced process, so once trace_delivered answers, every
  # event of the block has been queued or dropped (and counted), in every session (the
  # capture's and the one of its sends); the collector then has the session deliver the
  # whole queue, and the counters read after that are final for the block.
  defp collect(trace, collector) do
    ref = :erlang.trace_delivered(:all)

    receive do
      {:trace_delivered, :all, ^ref} -> :ok
    end

    events = Collector.collect(collector, trace)
    {events, Client.info(trace)}
  end
end
