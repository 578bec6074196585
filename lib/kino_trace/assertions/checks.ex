defmodule KinoTrace.Assertions.Checks do
  @moduledoc false
  # The run-time side of the assertion macros in `Kino.Trace.Assertions`.
  #
  # Each function takes the trace, the patterns the macro compiled, the options and the
  # assertion's code (for the failure report), and either returns the matching calls or
  # raises `ExUnit.AssertionError` with a message that shows what did happen. Bad use
  # (unknown module or function, bad options) raises `ArgumentError`.

  import KinoTrace.Assertions.Matching
  import KinoTrace.Assertions.Messages
  import KinoTrace.Assertions.Validation

  alias KinoTrace.Assertions.{Call, CallPattern, Format, ValuePattern}

  @typedoc "How an exception is asserted: its module (and message), or a `{class, reason}` pattern."
  @type exception_spec ::
          {:module, module(), nil | String.t() | Regex.t()} | {:pattern, ValuePattern.t()}

  ## Checks

  @doc """
  Asserts a call matching `pattern` (`times:` exactly that many). Returns the matching calls.

  ## Examples

      iex> require KinoTrace.Assertions.CallPattern, as: CallPattern
      iex> events = [%Kino.Trace.Event{id: 1, kind: :call, module: Map, function: :new, arity: 0, args: []}]
      iex> [call] = KinoTrace.Assertions.Checks.called(events, CallPattern.compile(Map.new()), [], nil)
      iex> call.function
      :new
  """
  @spec called(Call.trace(), CallPattern.t(), keyword(), Macro.t()) :: [Call.t()]
  def called(trace, %CallPattern{} = pattern, opts, expr) do
    trace = source(trace)
    opts = validate_opts!(opts, [:times, :pid])
    times = validate_times!(Keyword.get(opts, :times))
    validate_function!(pattern)
    if times == 0, do: validate_traced!(trace, pattern, "assert_called with times: 0")
    complete!(trace, expr)
    {calls, note} = calls_for(trace, opts)
    matching = Enum.filter(calls, &matches?(pattern, &1))

    cond do
      times == nil and matching != [] ->
        matching

      times == length(matching) ->
        matching

      times == nil ->
        fail(
          expr,
          no_call_message("Expected a call matching:", pattern, calls, trace) <> note,
          diff(pattern, calls)
        )

      true ->
        missing = if length(matching) < times, do: untraced_note(trace), else: ""

        fail(expr, times_message(pattern, times, matching, calls) <> missing <> note,
          left: length(matching),
          right: times
        )
    end
  end

  @doc "Refutes any call matching `pattern`. Returns `:ok`."
  @spec not_called(Call.trace(), CallPattern.t(), keyword(), Macro.t()) :: :ok
  def not_called(trace, %CallPattern{} = pattern, opts, expr) do
    trace = source(trace)
    opts = validate_opts!(opts, [:pid])
    validate_function!(pattern)
    validate_traced!(trace, pattern, "refute_called")
    complete!(trace, expr)
    {calls, note} = calls_for(trace, opts)

    case Enum.filter(calls, &matches?(pattern, &1)) do
      [] ->
        :ok

      matching ->
        fail(
          expr,
          "Expected no call matching:\n\n    #{pattern.source}\n\nbut found #{count(matching)}:\n\n" <>
            Format.list_calls(matching) <> pins_note(pattern.pins) <> note
        )
    end
  end

  @doc """
  Asserts a call matching `pattern` that returned a value matching `value_pattern`.
  Returns the calls that did.
  """
  @spec returned(Call.trace(), CallPattern.t(), ValuePattern.t(), keyword(), Macro.t()) :: [
          Call.t()
        ]
  def returned(trace, %CallPattern{} = pattern, %ValuePattern{} = value_pattern, opts, expr) do
    trace = source(trace)
    opts = validate_opts!(opts, [:pid])
    validate_function!(pattern)

    returned? = fn
      %Call{outcome: {:returned, value}, args: args} ->
        ValuePattern.match?(value_pattern, args, value)

      _ ->
        false
    end

    diff = fn matching ->
      case for %Call{outcome: {:returned, value}} <- matching, do: value do
        [value | _] when value_pattern.diff? ->
          [left: value_pattern.ast, right: value, context: {:match, value_pattern.pins}]

        _ ->
          []
      end
    end

    expected = "to return a value matching:\n\n    #{value_pattern.source}\n\n"
    with_outcome(trace, pattern, opts, expr, {expected, value_pattern.pins}, returned?, diff)
  end

  @doc """
  Asserts a call matching `pattern` that ended with an exception matching `spec`.
  Returns the calls that did.
  """
  @spec raised_in(Call.trace(), CallPattern.t(), exception_spec(), keyword(), Macro.t()) :: [
          Call.t()
        ]
  def raised_in(trace, %CallPattern{} = pattern, spec, opts, expr) do
    trace = source(trace)
    opts = validate_opts!(opts, [:pid])
    validate_function!(pattern)
    spec = validate_exception_spec!(spec)
    expected = "to raise #{describe_spec(spec)}\n\n"

    with_outcome(
      trace,
      pattern,
      opts,
      expr,
      {expected, spec_pins(spec)},
      &exception_matches?(spec, &1),
      &exception_diff(spec, &1)
    )
  end

  # assert_returned and assert_raised_in: the calls matching `pattern` whose outcome
  # `kept?` accepts; else fails saying what was `expected` (its pins noted) and, when
  # calls matched, how they ended (`outcome_diff` makes the diff of those calls).
  defp with_outcome(trace, pattern, opts, expr, {expected, pins}, kept?, outcome_diff) do
    complete!(trace, expr)
    {calls, note} = calls_for(trace, opts)
    matching = Enum.filter(calls, &matches?(pattern, &1))

    case Enum.filter(matching, kept?) do
      [] when matching == [] ->
        fail(
          expr,
          no_call_message("Expected a call matching:", pattern, calls, trace, expected) <> note,
          diff(pattern, calls)
        )

      [] ->
        fail(
          expr,
          "Expected a call matching:\n\n    #{pattern.source}\n\n" <>
            expected <>
            "but #{none_did(matching)}:\n\n" <>
            Format.list_calls(matching, &Call.outcome_to_string/1) <>
            pins_note(pattern.pins ++ pins) <> note,
          outcome_diff.(matching)
        )

      kept ->
        kept
    end
  end

  @doc """
  Asserts calls matching `patterns` happened in that order (other calls may come in
  between). Returns the calls that matched, one per pattern.
  """
  @spec called_in_order(Call.trace(), [CallPattern.t()], keyword(), Macro.t()) :: [Call.t()]
  def called_in_order(trace, patterns, opts, expr) when is_list(patterns) do
    trace = source(trace)
    opts = validate_opts!(opts, [:pid])
    Enum.each(patterns, &validate_function!/1)
    complete!(trace, expr)
    {calls, note} = calls_for(trace, opts)

    case in_order(patterns, calls, []) do
      {:ok, found} ->
        found

      {:error, found, missing_index} ->
        missing = Enum.at(patterns, missing_index)

        fail(
          expr,
          order_message(patterns, calls, found, missing_index) <>
            not_traced_note(trace, CallPattern.mfa(missing)) <> untraced_note(trace) <> note
        )
    end
  end

  # A trace (a live one, or one opened from a file: any map with its server's pid) is
  # asserted on as a capture of its events: its history, its patterns, what it dropped,
  # and how many events it delivered that its history (or its file) no longer holds.
  defp source(%{session: pid, id: _} = trace) when is_pid(pid) do
    info = KinoTrace.Client.info(trace)
    events = KinoTrace.Client.events(trace, 0xFFFFFFFF)
    not_kept = max(info.delivered - length(events), 0)

    %{
      events: events,
      patterns: info.patterns,
      dropped: info.dropped,
      info: info,
      not_kept: not_kept
    }
  end

  defp source(trace), do: trace

  # A capture that lost events cannot back any assertion: a call it lacks may have
  # happened (refute_called would pass), counts may be short, an order may have a gap.
  defp complete!(trace, expr) do
    case Kino.Trace.Capture.loss_report(trace) || history_report(trace) do
      nil -> :ok
      report -> fail(expr, report)
    end
  end

  defp history_report(%{not_kept: n}) when is_integer(n) and n > 0 do
    "The trace is incomplete: #{n} of the events it delivered are no longer in its history " <>
      "(a trace keeps its last :history events, and a file those it kept when saved, " <>
      "less a torn tail). No assertion on it can be trusted: a call it lacks may still " <>
      "have happened, and counts may be short.\n\nTo assert on every event:\n\n" <>
      "  * use Kino.Trace.capture/3, which keeps every event of its block\n" <>
      "  * or give the trace a larger history: option"
  end

  defp history_report(_trace), do: nil

  # The calls to check and, when `pid:` left some out, a note saying so.
  defp calls_for(trace, opts) do
    calls = Call.from_trace(trace)

    case Keyword.fetch(opts, :pid) do
      :error ->
        {calls, ""}

      {:ok, pid} when is_pid(pid) ->
        {own, others} = Enum.split_with(calls, &(&1.pid == pid))

        note =
          if others == [],
            do: "",
            else:
              "\n\nOnly calls from #{inspect(pid)} were checked (pid: option); #{count(others)} from other processes were left out."

        {own, note}

      {:ok, other} ->
        raise ArgumentError, "pid: must be a pid, got: #{inspect(other)}"
    end
  end
end
