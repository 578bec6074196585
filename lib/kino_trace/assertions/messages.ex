defmodule KinoTrace.Assertions.Messages do
  @moduledoc false
  # The failure reports of the assertions (`KinoTrace.Assertions.Checks`): what was
  # expected, what was called instead, the diff ExUnit shows under it, and the notes
  # on what the capture left out (untraced functions and processes, cut arguments,
  # pinned values). `fail/3` raises the ExUnit.AssertionError.

  import KinoTrace.Assertions.Matching, only: [matches?: 2]

  alias KinoTrace.Assertions.{Call, CallPattern, Coverage, Format}
  alias KinoTrace.Base.MFA

  # "Expected a call matching ... but": what was called instead, and the notes that
  # explain why the call may be missing.
  @spec no_call_message(String.t(), CallPattern.t(), [Call.t()], Call.trace(), String.t()) ::
          String.t()
  def no_call_message(intro, pattern, calls, trace, expected \\ "") do
    mfa = CallPattern.mfa(pattern)
    same_function = Enum.filter(calls, &(Call.mfa(&1) == mfa))
    head = "#{intro}\n\n    #{pattern.source}\n\n" <> expected

    body =
      case same_function do
        [] -> never_called(mfa, calls) <> not_traced_note(trace, mfa)
        _ -> "but #{none_matched(same_function, mfa)}:\n\n" <> Format.list_calls(same_function)
      end

    head <> body <> cut_note(same_function) <> pins_note(pattern.pins) <> untraced_note(trace)
  end

  # A call made in a process the capture did not trace is missing from it: name the
  # processes the block sent messages to that it did not trace.
  @spec untraced_note(Call.trace()) :: String.t()
  def untraced_note(trace) do
    case KinoTrace.Capture.Sends.hint(trace) do
      nil -> ""
      hint -> "\n\n" <> hint
    end
  end

  # Says the function was not among those the capture traced (else "").
  @spec not_traced_note(Call.trace(), mfa) :: String.t()
  def not_traced_note(trace, mfa) do
    if Coverage.traced?(trace, mfa) == false do
      "\n\n#{MFA.to_string(mfa)} was not traced: the patterns given to " <>
        "Kino.Trace.capture/3 were #{Coverage.patterns_text(trace)}."
    else
      ""
    end
  end

  defp never_called(mfa, []) do
    "but no calls were traced at all. Check that the patterns given to Kino.Trace.capture/3 " <>
      "include #{MFA.to_string(mfa)} and that the block calls it."
  end

  defp never_called(mfa, calls) do
    closest = Format.closest(mfa, Enum.map(calls, &Call.mfa/1))

    close_calls =
      for close <- closest,
          call <- calls |> Enum.filter(&(Call.mfa(&1) == close)) |> Enum.take(3),
          do: call

    closest_text =
      if close_calls == [],
        do: "",
        else: "\n\nClosest calls by name:\n\n" <> Format.list_calls(close_calls)

    "but #{MFA.to_string(mfa)} was never called." <>
      closest_text <> "\n\nTraced functions: " <> Format.traced_functions(calls)
  end

  # assert_called with times: that did not hold.
  @spec times_message(CallPattern.t(), non_neg_integer, [Call.t()], [Call.t()]) :: String.t()
  def times_message(pattern, times, matching, calls) do
    others =
      Enum.filter(
        calls,
        &(Call.mfa(&1) == CallPattern.mfa(pattern) and not matches?(pattern, &1))
      )

    listed =
      case matching do
        [] -> "."
        _ -> ":\n\n" <> Format.list_calls(matching)
      end

    other_text =
      case others do
        [] ->
          ""

        _ ->
          "\n\nCalls to #{MFA.to_string(CallPattern.mfa(pattern))} that did not match:\n\n" <>
            Format.list_calls(others)
      end

    "Expected a call matching:\n\n    #{pattern.source}\n\nto happen #{Format.times(times)}, " <>
      "but it happened #{Format.times(length(matching))}" <>
      listed <> other_text <> pins_note(pattern.pins)
  end

  # assert_called_in_order: which pattern no call matched, and the calls there were.
  @spec order_message([CallPattern.t()], [Call.t()], [Call.t()], non_neg_integer) :: String.t()
  def order_message(patterns, calls, found, missing_index) do
    expected =
      patterns
      |> Enum.with_index(1)
      |> Enum.map_join("\n", fn {p, i} -> "    #{i}. #{p.source}" end)

    missing = Enum.at(patterns, missing_index)

    reason =
      case List.last(found) do
        nil ->
          "but no call matched #{missing_index + 1}. #{missing.source}"

        last ->
          earlier = Enum.any?(calls, &matches?(missing, &1))

          "but no call matched #{missing_index + 1}. #{missing.source} after #{Call.to_code(last)}" <>
            if(earlier, do: " (it was only called before that)", else: "")
      end

    mfas = patterns |> Enum.map(&CallPattern.mfa/1) |> MapSet.new()
    relevant = Enum.filter(calls, &MapSet.member?(mfas, Call.mfa(&1)))

    actual =
      case relevant do
        [] ->
          "\n\nNone of these functions was called. Traced functions: " <>
            Format.traced_functions(calls)

        _ ->
          "\n\nCalls to these functions, in order:\n\n" <> Format.list_calls(relevant)
      end

    pins = Enum.flat_map(patterns, & &1.pins)
    "Expected calls in this order:\n\n#{expected}\n\n#{reason}." <> actual <> pins_note(pins)
  end

  # An exception spec in words.
  @spec describe_spec(tuple) :: String.t()
  def describe_spec({:module, module, nil}), do: inspect(module)

  def describe_spec({:module, module, %Regex{} = regex}),
    do: "#{inspect(module)} with a message matching #{inspect(regex)}"

  def describe_spec({:module, module, message}),
    do: "#{inspect(module)} with message #{inspect(message)}"

  def describe_spec({:pattern, value_pattern}),
    do: "an exception matching {class, reason}:\n\n    #{value_pattern.source}"

  # The pinned variables of an exception spec.
  @spec spec_pins(tuple) :: list
  def spec_pins({:pattern, value_pattern}), do: value_pattern.pins
  def spec_pins(_spec), do: []

  # The diff of an exception spec against how the first matching call ended.
  @spec exception_diff(tuple, [Call.t()]) :: keyword
  def exception_diff({:pattern, value_pattern}, matching) do
    case for(%Call{outcome: {:raised, class, reason}} <- matching, do: {class, reason}) do
      [actual | _] when value_pattern.diff? ->
        [left: value_pattern.ast, right: actual, context: {:match, value_pattern.pins}]

      _ ->
        []
    end
  end

  def exception_diff({:module, module, message}, matching) do
    case for(%Call{outcome: {:raised, :error, reason}} <- matching, do: Call.normalize(reason)) do
      [%{__struct__: ^module} = actual | _] when message != nil ->
        [left: Exception.message(actual), right: message]

      [actual | _] when is_exception(actual) and not is_struct(actual, module) ->
        [left: actual.__struct__, right: module]

      _ ->
        []
    end
  end

  # The diff ExUnit shows under the message: the args pattern against the closest call.
  @spec diff(CallPattern.t(), [Call.t()]) :: keyword
  def diff(%CallPattern{args_ast: nil}, _calls), do: []

  def diff(%CallPattern{} = pattern, calls) do
    candidates = Enum.filter(calls, &(Call.mfa(&1) == CallPattern.mfa(pattern)))

    case Enum.max_by(candidates, &CallPattern.score(pattern, &1.args), &>=/2, fn -> nil end) do
      nil -> []
      closest -> [left: pattern.args_ast, right: closest.args, context: {:match, pattern.pins}]
    end
  end

  defp cut_note(calls) do
    if Enum.any?(calls, &Kino.Trace.Cut.cut?(&1.args)) do
      "\n\nSome arguments were too large to trace whole (shown as ...); " <>
        "raise the max_depth/max_items/max_binary/max_bytes options of Kino.Trace.capture/3 to see them."
    else
      ""
    end
  end

  # The values of the pinned variables (else "").
  @spec pins_note(list) :: String.t()
  def pins_note([]), do: ""

  def pins_note(pins) do
    "\n\nThe following variables were pinned:\n" <>
      (pins
       |> Enum.uniq_by(&elem(&1, 0))
       |> Enum.map_join("\n", fn {{name, _ctx}, value} ->
         "    #{name} = #{Format.term(value)}"
       end))
  end

  defp none_matched([_], mfa), do: "the only call to #{MFA.to_string(mfa)} did not match"

  defp none_matched(calls, mfa),
    do: "none of the #{length(calls)} calls to #{MFA.to_string(mfa)} matched"

  @spec none_did([Call.t()]) :: String.t()
  def none_did([_]), do: "the only matching call did not"
  def none_did(calls), do: "none of the #{length(calls)} matching calls did"

  @spec count([Call.t()]) :: String.t()
  def count([_]), do: "1 call"
  def count(calls), do: "#{length(calls)} calls"

  # Raises ExUnit.AssertionError with `message`, the assertion's code and the diff's
  # `:left`, `:right` and `:context` from `extra`.
  @spec fail(Macro.t(), String.t(), keyword) :: no_return
  def fail(expr, message, extra \\ []) do
    fields =
      [message: message] ++
        if(expr == nil, do: [], else: [expr: expr]) ++
        Keyword.take(extra, [:left, :right, :context])

    raise ExUnit.AssertionError, fields
  end
end
