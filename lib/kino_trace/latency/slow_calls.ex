defmodule KinoTrace.Latency.SlowCalls do
  @moduledoc false
  # Slow calls kept whole from a trace's events, as they are decoded: per function the
  # `slowest` k (`slowest: k`), and every call of at least `threshold` (`slower_than:
  # ms`), at most KinoTrace.Limits' `:slower_than_kept` of them (the newest; the older
  # ones are counted in `left_out`).
  #
  # A kept call has its arguments (its `:call` event), its end (the `:return` or
  # `:exception` the call pairing rule paired with it, KinoTrace.Tracer.Decoder, with its
  # duration), its process, and, when the trace still has them, its events: the call,
  # what its process did beneath it, and its end, at most `:slow_call_events` of them,
  # and `:slow_kept_events` for all the kept calls together (past that, a call is kept
  # without them). The slowest are kept for as many functions as have distributions
  # (KinoTrace.Latency.max_functions/0); returns of others are passed over.
  #
  # Arguments: the end of a call does not carry them, so the open calls of each process
  # are kept (their `:call` events, innermost first, by the depths the pairing rule gave
  # them: a call at depth d closes the open ones at d or deeper, as KinoTrace.Render.CallTree
  # does, so calls traced without returns never pile up). At most `:slow_open_calls` are
  # kept in all; the calls past that (and those whose call came before the first event)
  # are kept without arguments (`args: nil`) when slow, and counted in `untracked`.
  # A process's entry goes when its outermost call ends.
  #
  # Events: at keep time, from `events_fun.(call_id, end_event)` (the session's history:
  # KinoTrace.History.since/3), nil when the trace no longer has them; or, for a
  # list of events, `fill_events/2` after the fact.

  alias Kino.Trace.Event
  alias KinoTrace.Limits

  @max_open Limits.default(:slow_open_calls)
  @max_kept_events Limits.default(:slow_kept_events)
  # the functions whose slowest calls are kept: as many as have distributions
  @max_functions KinoTrace.Latency.max_functions()

  defstruct slowest: nil,
            threshold: nil,
            open: %{},
            open_count: 0,
            top: %{},
            over: :queue.new(),
            over_kept: 0,
            over_count: 0,
            left_out: 0,
            untracked: 0,
            # the events the kept calls hold, each placement counted
            kept_events: 0

  @type t :: %__MODULE__{}

  @typedoc """
  One slow call: its function, process, arguments (`nil` when the trace did not keep
  its call), how it ended (`{:return, value}` or `{:exception, {class, reason}}`), its
  duration in nanoseconds, the ids of its call and end events, and `events`: the call,
  what its process did beneath it and the end (`nil` when the trace no longer had
  them; `events_cut` says whether events beneath it were left out, past the bound).
  """
  @type call :: %{
          mfa: mfa(),
          pid: pid() | nil,
          name: atom() | nil,
          args: list() | nil,
          result: {:return, term()} | {:exception, {atom(), term()}},
          duration: non_neg_integer(),
          call_id: pos_integer(),
          end_id: pos_integer() | nil,
          events: [Event.t()] | nil,
          events_cut: boolean()
        }

  @typedoc "What is kept: see `Kino.Trace.slow_calls/2`."
  @type report :: %{
          slowest: %{mfa() => [call()]},
          slower_than: [call()],
          over: non_neg_integer(),
          left_out: non_neg_integer(),
          untracked: non_neg_integer()
        }

  @type events_fun :: (pos_integer(), Event.t() -> [Event.t()] | nil) | nil

  @doc """
  An empty accumulator: `slowest: k` (per function, nil for none), `slower_than: ms`
  (a non-negative number of milliseconds, nil for none).
  """
  @spec new(keyword()) :: t()
  def new(opts) do
    threshold = opts[:slower_than]
    %__MODULE__{slowest: opts[:slowest], threshold: threshold && round(threshold * 1_000_000)}
  end

  @doc "Whether `opts` ask for slow calls (`:slowest` or `:slower_than` set)."
  @spec wanted?(keyword()) :: boolean()
  def wanted?(opts), do: opts[:slowest] != nil or opts[:slower_than] != nil

  @doc """
  Adds a batch of events (oldest first); `events_fun` gives a kept call's events.

      iex> alias Kino.Trace.Event
      iex> pid = :c.pid(0, 250, 0)
      iex> events = [
      ...>   %Event{id: 1, kind: :call, pid: pid, module: M, function: :f, arity: 1, args: [1], depth: 0},
      ...>   %Event{id: 2, kind: :return, pid: pid, module: M, function: :f, arity: 1, return: :ok, call_id: 1, duration: 5_000, depth: 0},
      ...>   %Event{id: 3, kind: :call, pid: pid, module: M, function: :f, arity: 1, args: [2], depth: 0},
      ...>   %Event{id: 4, kind: :return, pid: pid, module: M, function: :f, arity: 1, return: :ok, call_id: 3, duration: 9_000, depth: 0}
      ...> ]
      iex> acc = KinoTrace.Latency.SlowCalls.new(slowest: 1) |> KinoTrace.Latency.SlowCalls.add(events, nil)
      iex> [slow] = KinoTrace.Latency.SlowCalls.report(acc).slowest[{M, :f, 1}]
      iex> {slow.args, slow.result, slow.duration}
      {[2], {:return, :ok}, 9_000}
  """
  @spec add(t(), [Event.t()], events_fun()) :: t()
  def add(acc, events, events_fun), do: Enum.reduce(events, acc, &add_one(&1, &2, events_fun))

  defp add_one(%Event{lost: true, pid: pid} = e, acc, fun) do
    # its process's open calls were forgotten (KinoTrace.Tracer.Decoder)
    {stack, open} = Map.pop(acc.open, pid, [])

    add_one(
      %{e | lost: false},
      %{acc | open: open, open_count: acc.open_count - length(stack)},
      fun
    )
  end

  defp add_one(%Event{kind: :call, pid: pid, depth: depth} = e, %{open: open} = acc, _fun) do
    depth = depth || 0

    {stack, closed} =
      case open do
        %{^pid => stack} -> close_deeper(stack, depth, 0)
        _ -> {[], 0}
      end

    count = acc.open_count - closed

    # past the bound, the call is not kept: its end counts it as untracked
    if count < @max_open,
      do: %{acc | open: Map.put(open, pid, [{depth, e} | stack]), open_count: count + 1},
      else: %{acc | open: put_stack(open, pid, stack), open_count: count}
  end

  defp add_one(%Event{kind: kind, call_id: id, duration: d} = e, acc, fun)
       when kind in [:return, :exception] and is_integer(id) and is_integer(d) do
    {call, acc} = close(acc, e.pid, id)
    slowest? = slowest?(acc, e, d)
    over? = acc.threshold != nil and d >= acc.threshold

    if slowest? or over? do
      slow = slow_call(call, e, fun)
      placed = if(slowest?, do: 1, else: 0) + if(over?, do: 1, else: 0)
      {slow, acc} = within_budget(slow, placed, acc)
      acc = if slowest?, do: put_slowest(acc, slow), else: acc
      if over?, do: put_over(acc, slow), else: acc
    else
      acc
    end
  end

  defp add_one(_event, acc, _fun), do: acc

  # The open calls left when a call at `depth` comes (those at it or deeper closed), and
  # how many were closed.
  defp close_deeper([{d, _} | rest], depth, n) when d >= depth,
    do: close_deeper(rest, depth, n + 1)

  defp close_deeper(stack, _depth, n), do: {stack, n}

  # The call event `id` of `pid`'s open calls (nil when not kept: counted), and the
  # calls it made that are still open (ended without a return) closed with it.
  defp close(%{open: open} = acc, pid, id) do
    case open do
      %{^pid => [{_, %Event{id: ^id} = call} | below]} ->
        {call, %{acc | open: put_stack(open, pid, below), open_count: acc.open_count - 1}}

      %{^pid => stack} ->
        case close_to(stack, id, 1) do
          {call, below, closed} ->
            {call,
             %{acc | open: put_stack(open, pid, below), open_count: acc.open_count - closed}}

          nil ->
            {nil, %{acc | untracked: acc.untracked + 1}}
        end

      _ ->
        {nil, %{acc | untracked: acc.untracked + 1}}
    end
  end

  defp close_to([{_, %Event{id: id} = call} | below], id, n), do: {call, below, n}
  defp close_to([_ | rest], id, n), do: close_to(rest, id, n + 1)
  defp close_to([], _id, _n), do: nil

  defp put_stack(open, pid, []), do: Map.delete(open, pid)
  defp put_stack(open, pid, stack), do: Map.put(open, pid, stack)

  defp slowest?(%{slowest: nil}, _mfa, _d), do: false

  defp slowest?(%{slowest: k, top: top}, e, d) do
    mfa = {e.module, e.function, e.arity}

    case top do
      %{^mfa => {n, [fastest | _]}} -> n < k or d > fastest.duration
      _ -> map_size(top) < @max_functions
    end
  end

  # The kept calls hold at most @max_kept_events events in all: past that, a call is
  # kept without its events (`events: nil`, `events_cut: true`).
  defp within_budget(%{events: nil} = slow, _placed, acc), do: {slow, acc}

  defp within_budget(%{events: events} = slow, placed, acc) do
    n = length(events) * placed

    if acc.kept_events + n <= @max_kept_events,
      do: {slow, %{acc | kept_events: acc.kept_events + n}},
      else: {%{slow | events: nil, events_cut: true}, acc}
  end

  defp forget_events(acc, %{events: events}) when is_list(events),
    do: %{acc | kept_events: acc.kept_events - length(events)}

  defp forget_events(acc, _slow), do: acc

  # The function's kept calls, fastest first.
  defp put_slowest(%{slowest: k, top: top} = acc, slow) do
    {n, kept} = Map.get(top, slow.mfa, {0, []})
    kept = Enum.sort_by([slow | kept], & &1.duration)

    case kept do
      [fastest | rest] when n + 1 > k ->
        %{forget_events(acc, fastest) | top: Map.put(top, slow.mfa, {n, rest})}

      _ ->
        %{acc | top: Map.put(top, slow.mfa, {n + 1, kept})}
    end
  end

  defp put_over(acc, slow) do
    acc = %{acc | over: :queue.in(slow, acc.over), over_count: acc.over_count + 1}

    if acc.over_kept < Limits.default(:slower_than_kept) do
      %{acc | over_kept: acc.over_kept + 1}
    else
      {{:value, oldest}, over} = :queue.out(acc.over)
      %{forget_events(acc, oldest) | over: over, left_out: acc.left_out + 1}
    end
  end

  defp slow_call(call, %Event{} = e, fun) do
    events = if fun, do: fun.(e.call_id, e)
    {events, cut?} = bound_events(events)

    %{
      mfa: Event.mfa(e),
      pid: e.pid,
      name: e.name,
      args: call && call.args,
      result: if(e.kind == :return, do: {:return, e.return}, else: {:exception, e.exception}),
      duration: e.duration,
      call_id: e.call_id,
      end_id: e.id,
      events: events,
      events_cut: cut?
    }
  end

  # At most :slow_call_events events: the first ones, and the end.
  defp bound_events(nil), do: {nil, false}

  defp bound_events(events) do
    max = Limits.default(:slow_call_events)

    case Enum.split(events, max - 1) do
      {kept, [_ | _] = rest} when length(rest) > 1 -> {kept ++ [List.last(rest)], true}
      _ -> {events, false}
    end
  end

  @doc "How many open calls are kept (their `:call` events), in all."
  @spec open_calls(t()) :: non_neg_integer()
  def open_calls(%__MODULE__{open_count: count}), do: count

  @doc "The slow calls kept: per function the slowest first, the ones over the threshold oldest first."
  @spec report(t()) :: report()
  def report(%__MODULE__{} = acc) do
    %{
      slowest: Map.new(acc.top, fn {mfa, {_n, kept}} -> {mfa, Enum.reverse(kept)} end),
      slower_than: :queue.to_list(acc.over),
      over: acc.over_count,
      left_out: acc.left_out,
      untracked: acc.untracked
    }
  end

  @doc """
  How many slow calls a report keeps per function: its slowest and those over the
  threshold, each call once.

      iex> call = %{mfa: {M, :f, 0}, end_id: 2}
      iex> KinoTrace.Latency.SlowCalls.counts(%{slowest: %{{M, :f, 0} => [call]}, slower_than: [call]})
      %{{M, :f, 0} => 1}
  """
  @spec counts(%{slowest: %{mfa() => [map()]}, slower_than: [map()]}) :: %{mfa() => pos_integer()}
  def counts(report) do
    (List.flatten(Map.values(report.slowest)) ++ report.slower_than)
    |> Enum.uniq_by(& &1.end_id)
    |> Enum.frequencies_by(& &1.mfa)
  end

  @doc """
  The slow calls of a list of events (oldest first), with their events from the list.

      iex> alias Kino.Trace.Event
      iex> pid = :c.pid(0, 250, 0)
      iex> events = [
      ...>   %Event{id: 1, kind: :call, pid: pid, module: M, function: :a, arity: 0, args: [], depth: 0},
      ...>   %Event{id: 2, kind: :call, pid: pid, module: M, function: :b, arity: 0, args: [], depth: 1},
      ...>   %Event{id: 3, kind: :return, pid: pid, module: M, function: :b, arity: 0, call_id: 2, duration: 400, depth: 1},
      ...>   %Event{id: 4, kind: :return, pid: pid, module: M, function: :a, arity: 0, call_id: 1, duration: 1_000, depth: 0}
      ...> ]
      iex> %{slowest: %{{M, :a, 0} => [a]}} = KinoTrace.Latency.SlowCalls.of_events(events, slowest: 1)
      iex> Enum.map(a.events, & &1.id)
      [1, 2, 3, 4]
  """
  @spec of_events([Event.t()], keyword()) :: report()
  def of_events(events, opts),
    do: opts |> new() |> add(events, nil) |> report() |> fill_events(events)

  @doc """
  The slow calls of a running trace: those it keeps since its start (`slowest:`,
  `slower_than:`), else those of its last `last` events with `opts` (`of_events/2`).
  """
  @spec of_trace(KinoTrace.Client.trace(), pos_integer(), keyword()) :: report()
  def of_trace(trace, last, opts) do
    case KinoTrace.Client.slow_calls(trace) do
      %{slowest: _} = report -> report
      _none -> of_events(KinoTrace.Client.events(trace, last), opts)
    end
  end

  @doc "A report's calls with their events from `events` (oldest first), where it has them."
  @spec fill_events(report(), [Event.t()]) :: report()
  def fill_events(report, events) do
    calls = Enum.uniq(List.flatten(Map.values(report.slowest)) ++ report.slower_than)
    first_id = match?([%Event{id: id} | _] when is_integer(id), events) && hd(events).id

    # per process: {the ranges not begun yet, by their start; the ranges open}, so each
    # event goes to the ranges open at it (nested calls), not past every range
    ranges =
      calls
      |> Enum.group_by(& &1.pid, &{&1.call_id, &1.end_id})
      |> Map.new(fn {pid, ranges} -> {pid, {Enum.sort(ranges), []}} end)

    # per {call_id, end_id}: the events of its process from its call to its end, newest first
    {found, _ranges} =
      Enum.reduce(events, {%{}, ranges}, fn %Event{pid: pid, id: id} = e, {found, ranges} ->
        case ranges do
          %{^pid => {pending, open}} ->
            {begun, pending} = Enum.split_while(pending, fn {from, _} -> from <= id end)
            open = for {_, to} = range <- begun ++ open, to >= id, do: range
            found = Enum.reduce(open, found, &Map.update(&2, &1, [e], fn got -> [e | got] end))
            {found, %{ranges | pid => {pending, open}}}

          _ ->
            {found, ranges}
        end
      end)

    fill = fn call ->
      if first_id && first_id <= call.call_id do
        {events, cut?} =
          bound_events(Enum.reverse(Map.get(found, {call.call_id, call.end_id}, [])))

        %{call | events: events, events_cut: cut?}
      else
        call
      end
    end

    %{
      report
      | slowest: Map.new(report.slowest, fn {mfa, calls} -> {mfa, Enum.map(calls, fill)} end),
        slower_than: Enum.map(report.slower_than, fill)
    }
  end
end
