defmodule KinoTrace.Render.SlowCalls do
  @moduledoc false
  # The console text of `Kino.Trace.slow_calls/2`'s report (Kino.Trace.Printer's
  # `format_slow_calls/2`): per function its slowest calls, slowest first, then the calls
  # over the threshold; each call as a line (duration, process, the call as Elixir code
  # and how it ended), then its events as the printer prints them (indented by depth).

  alias Kino.Trace.Event
  alias KinoTrace.Render
  alias KinoTrace.Base.MFA

  @doc """
  The report as text lines (iodata). Options: those of `KinoTrace.Render.format/2`
  (`:colors`, `:time`, `:inspect`) for the events, and `events: false` to leave them out.

      iex> pid = :c.pid(0, 250, 0)
      iex> call = %{mfa: {M, :f, 1}, pid: pid, name: nil, args: [1], result: {:return, :ok},
      ...>   duration: 9_000, call_id: 1, end_id: 2, events: nil, events_cut: false}
      iex> report = %{slowest: %{{M, :f, 1} => [call]}, slower_than: [], over: 0, left_out: 0, untracked: 0}
      iex> report |> KinoTrace.Render.SlowCalls.format() |> IO.iodata_to_binary() |> String.split("\\n", trim: true)
      ["M.f/1: the 1 slowest", "  9.0 µs #PID<0.250.0> M.f(1) -> :ok"]
  """
  @spec format(KinoTrace.Latency.SlowCalls.report(), keyword()) :: iodata()
  def format(report, opts \\ []) do
    slowest =
      for {mfa, calls} <- Enum.sort_by(report.slowest, fn {mfa, _} -> MFA.to_string(mfa) end) do
        [MFA.to_string(mfa), ": the #{length(calls)} slowest\n", Enum.map(calls, &call(&1, opts))]
      end

    over =
      if report.over > 0 or report.slower_than != [] do
        kept = length(report.slower_than)

        left_out =
          if report.left_out > 0,
            do: " (the newest #{kept}; #{report.left_out} left out)",
            else: ""

        [
          "#{report.over} calls over the threshold#{left_out}\n",
          Enum.map(report.slower_than, &call(&1, opts))
        ]
      else
        []
      end

    untracked =
      if report.untracked > 0,
        do: "#{report.untracked} calls without their arguments (their call not kept)\n",
        else: []

    [slowest, over, untracked]
  end

  defp call(slow, opts) do
    inspect_opts =
      Keyword.merge([limit: 20, printable_limit: 200], Keyword.get(opts, :inspect, []))

    {m, f, _a} = slow.mfa

    text =
      if slow.args,
        do: Render.call(m, f, slow.args, inspect_opts),
        else: MFA.to_string(slow.mfa) <> " (arguments not kept)"

    ended =
      case slow.result do
        {:return, value} ->
          ["-> ", inspect(value, inspect_opts)]

        {:exception, {class, reason}} ->
          ["!! ", inspect(class), " ", inspect(reason, inspect_opts)]
      end

    process =
      Render.format_process(%Event{pid: slow.pid, name: slow.name, node: node_of(slow.pid)})

    head = ["  ", Render.format_duration(slow.duration), " ", process, " ", text, " ", ended, ?\n]

    events =
      if Keyword.get(opts, :events, true) and is_list(slow.events) and length(slow.events) > 2 do
        base = hd(slow.events).depth || 0
        cut = if slow.events_cut, do: "      (events beneath it cut)\n", else: []

        [
          Enum.map(slow.events, fn e ->
            ["    ", Render.format(%{e | depth: max((e.depth || 0) - base, 0)}, opts), ?\n]
          end),
          cut
        ]
      else
        []
      end

    [head, events]
  end

  defp node_of(pid) when is_pid(pid), do: node(pid)
  defp node_of(_), do: nil
end
