defmodule KinoTrace.Widget.SlowPayload do
  @moduledoc false
  # The slow calls of one function (`Kino.Trace.slow_calls/2`) as the JSON-able map the
  # widget's Stats tab shows when a row links to them: per call its duration, process,
  # the call and its end rendered as the log's rows (KinoTrace.Widget.Payload.event/2, so
  # `call_id` and `end_id` find them in the log), and its events as log rows (its call
  # tree, `nil` when the trace no longer had them). Nothing here needs Kino.
  #
  # The widget's controller answers a browser's `"get_slow_calls"` (`%{"mfa" => key}`,
  # the row's key: its `mfa`, `"Mod.fun/arity"`, as KinoTrace.Widget.Payload.event/2
  # names it) with `reply/4`: `for_function/3` of the slow calls the trace keeps
  # (`slowest:`, `slower_than:`), else of the events the widget keeps
  # (`KinoTrace.Latency.SlowCalls.of_events/2`, their slowest 5). Each row's link
  # shows `keyed/1` of the trace's `KinoTrace.Latency.SlowCalls.counts/1`
  # (KinoTrace.Widget.LatencyPayload's `slow`). Bounded: at most @max_shown calls of
  # each list, the others counted.

  alias Kino.Trace.Event
  alias KinoTrace.Base.MFA
  alias KinoTrace.Latency.SlowCalls
  alias KinoTrace.Widget.Payload

  # the most calls of each list (slowest, over the threshold) a reply holds
  @max_shown 20
  # the slowest calls per function found in the widget's events when the trace keeps none
  @slowest_of_events 5

  @typedoc "One slow call."
  @type call :: %{
          call_id: pos_integer(),
          end_id: pos_integer() | nil,
          duration: non_neg_integer(),
          pid: String.t() | nil,
          call: Payload.row(),
          end: Payload.row(),
          events: [Payload.row()] | nil,
          events_cut: boolean()
        }

  @doc """
  The slow calls of the function `key` (`"Mod.fun/arity"`) in `report` (as
  `Kino.Trace.slow_calls/2` and `KinoTrace.Latency.SlowCalls.of_trace/3` give it): its
  slowest, slowest first, and those over the threshold, oldest first, with the figures
  of the whole trace (`over`, `left_out`). `limits` are `KinoTrace.Widget.Payload.event/2`'s.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> report = Kino.Trace.slow_calls(capture)
      iex> payload = KinoTrace.Widget.SlowPayload.for_function(report, "Enum.sum/1")
      iex> [slow] = payload.slowest
      iex> {slow.call.call, slow.end.result, length(slow.events)}
      {"Enum.sum([1, 2])", "3", 2}
  """
  @spec for_function(KinoTrace.Latency.SlowCalls.report(), String.t(), Payload.limits()) :: map()
  def for_function(report, key, limits \\ []) when is_binary(key) do
    mine? = fn mfa -> MFA.to_string(mfa) == key end

    slowest =
      Enum.find_value(report.slowest, [], fn {mfa, calls} -> if mine?.(mfa), do: calls end)

    # the slowest first; of those over the threshold, the newest
    over = Enum.filter(report.slower_than, &mine?.(&1.mfa))
    {over_shown, over_hidden} = Enum.split(over, max(length(over) - @max_shown, 0)) |> swap()

    %{
      key: key,
      slowest: slowest |> Enum.take(@max_shown) |> Enum.map(&call(&1, limits)),
      slowest_omitted: max(length(slowest) - @max_shown, 0),
      slower_than: Enum.map(over_shown, &call(&1, limits)),
      slower_than_omitted: length(over_hidden),
      over: report.over,
      left_out: report.left_out
    }
  end

  defp swap({a, b}), do: {b, a}

  @doc """
  The reply to a browser's `"get_slow_calls"` request (`%{"mfa" => key}`; anything
  else asks for no function): `for_function/3` of `kept` (the trace's slow calls, as
  `KinoTrace.Client.try_slow_calls/1` gives them) with `from: "trace"`, or, when the
  trace keeps none (`nil`), of the slowest #{@slowest_of_events} calls of each function
  in `events_fun.()` (the events the widget keeps, oldest first) with `from: "events"`.
  The key is compared with the functions' names, never turned into a term.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> reply = KinoTrace.Widget.SlowPayload.reply(nil, fn -> capture.events end, %{"mfa" => "Enum.sum/1"})
      iex> {reply.from, length(reply.slowest)}
      {"events", 1}
  """
  @spec reply(SlowCalls.report() | nil, (-> [Event.t()]), term(), Payload.limits()) :: map()
  def reply(kept, events_fun, request, limits \\ []) do
    key =
      case request do
        %{"mfa" => key} when is_binary(key) -> key
        _ -> ""
      end

    {report, from} =
      case kept do
        %{slowest: _} -> {kept, "trace"}
        nil -> {SlowCalls.of_events(events_fun.(), slowest: @slowest_of_events), "events"}
      end

    report |> for_function(key, limits) |> Map.put(:from, from)
  end

  @doc """
  How many slow calls each function has kept (its slowest and those over the threshold,
  each call once), by key (`"Mod.fun/arity"`).

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> KinoTrace.Widget.SlowPayload.counts(Kino.Trace.slow_calls(capture))
      %{"Enum.sum/1" => 1}
  """
  @spec counts(KinoTrace.Latency.SlowCalls.report()) :: %{String.t() => pos_integer()}
  def counts(report), do: report |> SlowCalls.counts() |> keyed()

  @doc """
  The slow calls a running trace keeps (`slowest:`, `slower_than:`), `nil` when it
  keeps none or has ended.
  """
  @spec kept(KinoTrace.Client.trace()) :: SlowCalls.report() | nil
  def kept(trace), do: ask(&KinoTrace.Client.try_slow_calls/1, trace)

  @doc """
  How many slow calls a running trace keeps per function, by key (`keyed/1`), `nil`
  when it keeps none or has ended.
  """
  @spec kept_counts(KinoTrace.Client.trace()) :: %{String.t() => pos_integer()} | nil
  def kept_counts(trace) do
    with %{} = counts <- ask(&KinoTrace.Client.try_slow_counts/1, trace), do: keyed(counts)
  end

  defp ask(request, trace) do
    case request.(trace) do
      {:ok, %{} = answer} -> answer
      _none_or_ended -> nil
    end
  catch
    # (its server did not answer in time)
    :exit, _ -> nil
  end

  @doc """
  Counts by function (`KinoTrace.Latency.SlowCalls.counts/1`) by key (`"Mod.fun/arity"`).

      iex> KinoTrace.Widget.SlowPayload.keyed(%{{Enum, :sum, 1} => 2})
      %{"Enum.sum/1" => 2}
  """
  @spec keyed(%{mfa() => pos_integer()}) :: %{String.t() => pos_integer()}
  def keyed(counts), do: Map.new(counts, fn {mfa, n} -> {MFA.to_string(mfa), n} end)

  defp call(slow, limits) do
    {m, f, a} = slow.mfa
    base = %Event{pid: slow.pid, name: slow.name, module: m, function: f, arity: a}

    ended =
      case slow.result do
        {:return, value} -> %{base | kind: :return, return: value}
        {:exception, reason} -> %{base | kind: :exception, exception: reason}
      end

    %{
      call_id: slow.call_id,
      end_id: slow.end_id,
      duration: slow.duration,
      pid: slow.pid && inspect(slow.pid),
      call: Payload.event(%{base | id: slow.call_id, kind: :call, args: slow.args}, limits),
      end:
        Payload.event(
          %{ended | id: slow.end_id, call_id: slow.call_id, duration: slow.duration},
          limits
        ),
      events: slow.events && Payload.events(slow.events, limits),
      events_cut: slow.events_cut
    }
  end
end
