defmodule KinoTrace.Widget.SlowPayload do
  @moduledoc false
  # The slow calls of one function (`Kino.Trace.slow_calls/2`) as the JSON-able map the
  # widget's Stats tab shows when a row links to them: per call its duration, process,
  # the call and its end rendered as the log's rows (KinoTrace.Widget.Payload.event/2, so
  # `call_id` and `end_id` find them in the log), and its events as log rows (its call
  # tree, `nil` when the trace no longer had them). Nothing here needs Kino.
  #
  # The widget's controller calls `for_function/3` with the trace's slow calls
  # (`KinoTrace.Latency.SlowCalls.of_trace(trace, 10_000, slowest: 5)`) and the row's key
  # (its `mfa`, `"Mod.fun/arity"`, as KinoTrace.Widget.Payload.event/2 names it), and
  # `counts/1` for the number of slow calls to show as each row's link.

  alias Kino.Trace.Event
  alias KinoTrace.Base.MFA
  alias KinoTrace.Widget.Payload

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

    %{
      key: key,
      slowest: Enum.map(slowest, &call(&1, limits)),
      slower_than: for(c <- report.slower_than, mine?.(c.mfa), do: call(c, limits)),
      over: report.over,
      left_out: report.left_out
    }
  end

  @doc """
  How many slow calls each function has kept (its slowest and those over the threshold,
  each call once), by key (`"Mod.fun/arity"`).

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> KinoTrace.Widget.SlowPayload.counts(Kino.Trace.slow_calls(capture))
      %{"Enum.sum/1" => 1}
  """
  @spec counts(KinoTrace.Latency.SlowCalls.report()) :: %{String.t() => pos_integer()}
  def counts(report) do
    (List.flatten(Map.values(report.slowest)) ++ report.slower_than)
    |> Enum.uniq_by(& &1.end_id)
    |> Enum.frequencies_by(&MFA.to_string(&1.mfa))
  end

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
