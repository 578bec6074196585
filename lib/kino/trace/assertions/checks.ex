defmodule Kino.Trace.Assertions.Checks do
  @moduledoc false
  # The run-time side of the assertion macros in `Kino.Trace.Assertions`.
  #
  # Each function takes the trace, the patterns the macro compiled, the options and the
  # assertion's code (for the failure report), and either returns the matching calls or
  # raises `ExUnit.AssertionError` with a message that shows what did happen. Bad use
  # (unknown module or function, bad options) raises `ArgumentError`.

  alias Kino.Trace.Assertions.{Call, CallPattern, Coverage, Format, ValuePattern}
  alias Kino.Trace.MFA

  @typedoc "How an exception is asserted: its module (and message), or a `{class, reason}` pattern."
  @type exception_spec ::
          {:module, module(), nil | String.t() | Regex.t()} | {:pattern, ValuePattern.t()}

  ## Checks

  @doc """
  Asserts a call matching `pattern` (`times:` exactly that many). Returns the matching calls.

  ## Examples

      iex> require Kino.Trace.Assertions.CallPattern, as: CallPattern
      iex> events = [%Kino.Trace.Event{id: 1, kind: :call, module: Map, function: :new, arity: 0, args: []}]
      iex> [call] = Kino.Trace.Assertions.Checks.called(events, CallPattern.compile(Map.new()), [], nil)
      iex> call.function
      :new
  """
  @spec called(Call.trace(), CallPattern.t(), keyword(), Macro.t()) :: [Call.t()]
  def called(trace, %CallPattern{} = pattern, opts, expr) do
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

  ## Matching

  defp matches?(
         %CallPattern{module: m, function: f, arity: a} = pattern,
         %Call{module: m, function: f, arity: a} = call
       ),
       do: CallPattern.match?(pattern, call.args)

  defp matches?(_pattern, _call), do: false

  defp in_order([], _calls, found), do: {:ok, Enum.reverse(found)}

  defp in_order([pattern | rest], calls, found) do
    case Enum.drop_while(calls, &(not matches?(pattern, &1))) do
      [call | after_call] -> in_order(rest, after_call, [call | found])
      [] -> {:error, Enum.reverse(found), length(found)}
    end
  end

  defp exception_matches?({:pattern, value_pattern}, %Call{
         outcome: {:raised, class, reason},
         args: args
       }) do
    ValuePattern.match?(value_pattern, args, {class, reason}) or
      (class == :error and
         ValuePattern.match?(value_pattern, args, {:error, Call.normalize(reason)}))
  end

  defp exception_matches?({:module, module, message}, %Call{outcome: {:raised, :error, reason}}) do
    exception = Call.normalize(reason)
    is_struct(exception, module) and message_matches?(exception, message)
  end

  defp exception_matches?(_spec, _call), do: false

  defp message_matches?(_exception, nil), do: true
  defp message_matches?(exception, %Regex{} = regex), do: Exception.message(exception) =~ regex
  defp message_matches?(exception, message), do: Exception.message(exception) == message

  ## Options and validation

  defp validate_opts!(opts, allowed) when is_list(opts) do
    unless Keyword.keyword?(opts),
      do: raise(ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}")

    case Keyword.keys(opts) -- allowed do
      [] ->
        opts

      unknown ->
        raise ArgumentError, "unknown options #{inspect(unknown)}, allowed: #{inspect(allowed)}"
    end
  end

  defp validate_opts!(opts, _allowed),
    do: raise(ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}")

  defp validate_times!(nil), do: nil
  defp validate_times!(n) when is_integer(n) and n >= 0, do: n

  defp validate_times!(other),
    do: raise(ArgumentError, "times: must be a non-negative integer, got: #{inspect(other)}")

  # An assertion about a function that does not exist could never fail (refute_called) or
  # would fail with a misleading message: say so at once.
  defp validate_function!(%CallPattern{module: module, function: function, arity: arity}) do
    case Code.ensure_loaded(module) do
      {:module, ^module} ->
        functions = module.module_info(:functions)

        unless {function, arity} in functions do
          similar =
            for {f, a} <- functions,
                String.jaro_distance(Atom.to_string(f), Atom.to_string(function)) >= 0.8,
                not String.starts_with?(Atom.to_string(f), ["-", "MACRO-", "__"]),
                uniq: true,
                do: MFA.to_string({f, a})

          hint = if similar == [], do: "", else: " (did you mean #{Enum.join(similar, ", ")}?)"

          raise ArgumentError,
                "#{MFA.to_string({module, function, arity})} is not a function of " <>
                  "#{inspect(module)}#{hint}, so it can never be traced"
        end

      {:error, reason} ->
        raise ArgumentError,
              "unknown module #{inspect(module)} in call pattern " <>
                "#{MFA.to_string({module, function, arity})} (#{reason})"
    end
  end

  defp validate_exception_spec!({:module, module, message} = spec) do
    unless is_nil(message) or is_binary(message) or is_struct(message, Regex) do
      raise ArgumentError,
            "the expected message must be a string or a regex, got: #{inspect(message)}"
    end

    unless match?({:module, _}, Code.ensure_loaded(module)) and
             function_exported?(module, :exception, 1) do
      raise ArgumentError, "expected an exception module, got: #{inspect(module)}"
    end

    spec
  end

  defp validate_exception_spec!({:pattern, %ValuePattern{}} = spec), do: spec

  # Refuting a call of a function the capture did not trace could never fail.
  defp validate_traced!(trace, pattern, what) do
    mfa = CallPattern.mfa(pattern)

    if Coverage.traced?(trace, mfa) == false do
      raise ArgumentError,
            "#{what} on #{MFA.to_string(mfa)}, which the capture did not trace, " <>
              "could never fail: add it to the patterns given to Kino.Trace.capture/3 " <>
              "(they were #{Coverage.patterns_text(trace)})"
    end
  end

  # A capture that lost events cannot back any assertion: a call it lacks may have
  # happened (refute_called would pass), counts may be short, an order may have a gap.
  defp complete!(trace, expr) do
    case Kino.Trace.Capture.loss_report(trace) do
      nil -> :ok
      report -> fail(expr, report)
    end
  end

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

  ## Messages

  defp no_call_message(intro, pattern, calls, trace, expected \\ "") do
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
  defp untraced_note(trace) do
    case Kino.Trace.Capture.Sends.hint(trace) do
      nil -> ""
      hint -> "\n\n" <> hint
    end
  end

  defp not_traced_note(trace, mfa) do
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

  defp times_message(pattern, times, matching, calls) do
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

  defp order_message(patterns, calls, found, missing_index) do
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

  defp describe_spec({:module, module, nil}), do: inspect(module)

  defp describe_spec({:module, module, %Regex{} = regex}),
    do: "#{inspect(module)} with a message matching #{inspect(regex)}"

  defp describe_spec({:module, module, message}),
    do: "#{inspect(module)} with message #{inspect(message)}"

  defp describe_spec({:pattern, value_pattern}),
    do: "an exception matching {class, reason}:\n\n    #{value_pattern.source}"

  defp spec_pins({:pattern, value_pattern}), do: value_pattern.pins
  defp spec_pins(_spec), do: []

  defp exception_diff({:pattern, value_pattern}, matching) do
    case for(%Call{outcome: {:raised, class, reason}} <- matching, do: {class, reason}) do
      [actual | _] when value_pattern.diff? ->
        [left: value_pattern.ast, right: actual, context: {:match, value_pattern.pins}]

      _ ->
        []
    end
  end

  defp exception_diff({:module, module, message}, matching) do
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
  defp diff(%CallPattern{args_ast: nil}, _calls), do: []

  defp diff(%CallPattern{} = pattern, calls) do
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

  defp pins_note([]), do: ""

  defp pins_note(pins) do
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

  defp none_did([_]), do: "the only matching call did not"
  defp none_did(calls), do: "none of the #{length(calls)} matching calls did"

  defp count([_]), do: "1 call"
  defp count(calls), do: "#{length(calls)} calls"

  defp fail(expr, message, extra \\ []) do
    fields =
      [message: message] ++
        if(expr == nil, do: [], else: [expr: expr]) ++
        Keyword.take(extra, [:left, :right, :context])

    raise ExUnit.AssertionError, fields
  end
end
