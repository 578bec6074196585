defmodule KinoTrace.Assertions.Matching do
  @moduledoc false
  # Which calls an assertion's patterns match (`KinoTrace.Assertions.Checks`): a call
  # pattern against a call, patterns in order, an exception spec against how a call
  # ended.

  alias KinoTrace.Assertions.{Call, CallPattern, ValuePattern}

  # Whether `call` is of the pattern's function and its arguments match.
  @spec matches?(CallPattern.t(), Call.t()) :: boolean
  def matches?(
        %CallPattern{module: m, function: f, arity: a} = pattern,
        %Call{module: m, function: f, arity: a} = call
      ),
      do: CallPattern.match?(pattern, call.args)

  def matches?(_pattern, _call), do: false

  # The first call matching each pattern, each after the one before (`found`, reversed,
  # so far); else the calls found and the index of the pattern no call matched.
  @spec in_order([CallPattern.t()], [Call.t()], [Call.t()]) ::
          {:ok, [Call.t()]} | {:error, [Call.t()], non_neg_integer}
  def in_order([], _calls, found), do: {:ok, Enum.reverse(found)}

  def in_order([pattern | rest], calls, found) do
    case Enum.drop_while(calls, &(not matches?(pattern, &1))) do
      [call | after_call] -> in_order(rest, after_call, [call | found])
      [] -> {:error, Enum.reverse(found), length(found)}
    end
  end

  # Whether `call` ended with an exception matching the (validated) exception spec.
  @spec exception_matches?(tuple, Call.t()) :: boolean
  def exception_matches?({:pattern, value_pattern}, %Call{
        outcome: {:raised, class, reason},
        args: args
      }) do
    ValuePattern.match?(value_pattern, args, {class, reason}) or
      (class == :error and
         ValuePattern.match?(value_pattern, args, {:error, Call.normalize(reason)}))
  end

  def exception_matches?({:module, module, message}, %Call{outcome: {:raised, :error, reason}}) do
    exception = Call.normalize(reason)
    is_struct(exception, module) and message_matches?(exception, message)
  end

  def exception_matches?(_spec, _call), do: false

  defp message_matches?(_exception, nil), do: true
  defp message_matches?(exception, %Regex{} = regex), do: Exception.message(exception) =~ regex
  defp message_matches?(exception, message), do: Exception.message(exception) == message
end
