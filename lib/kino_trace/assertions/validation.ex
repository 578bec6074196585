defmodule KinoTrace.Assertions.Validation do
  @moduledoc false
  # What the assertions refuse before looking at any call (`KinoTrace.Assertions.Checks`):
  # bad options, a function that does not exist, an exception spec that is not one, a
  # refutation that could never fail. Each raises ArgumentError saying so.

  alias KinoTrace.Assertions.{Call, CallPattern, Coverage, ValuePattern}
  alias KinoTrace.Base.MFA
  alias KinoTrace.Base.Suggest

  # `opts` when a keyword list of only the `allowed` keys; else raises ArgumentError.
  @spec validate_opts!(term, [atom]) :: keyword
  def validate_opts!(opts, allowed) when is_list(opts) do
    unless Keyword.keyword?(opts),
      do: raise(ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}")

    case Keyword.keys(opts) -- allowed do
      [] ->
        opts

      unknown ->
        raise ArgumentError, "unknown options #{inspect(unknown)}, allowed: #{inspect(allowed)}"
    end
  end

  def validate_opts!(opts, _allowed),
    do: raise(ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}")

  @spec validate_times!(term) :: non_neg_integer | nil
  def validate_times!(nil), do: nil
  def validate_times!(n) when is_integer(n) and n >= 0, do: n

  def validate_times!(other),
    do: raise(ArgumentError, "times: must be a non-negative integer, got: #{inspect(other)}")

  # An assertion about a function that does not exist could never fail (refute_called) or
  # would fail with a misleading message: say so at once.
  @spec validate_function!(CallPattern.t()) :: nil
  def validate_function!(%CallPattern{module: module, function: function, arity: arity}) do
    case Code.ensure_loaded(module) do
      {:module, ^module} ->
        functions = module.module_info(:functions)

        unless {function, arity} in functions do
          names =
            for {f, _} <- functions,
                not String.starts_with?(Atom.to_string(f), ["-", "MACRO-", "__"]),
                uniq: true,
                do: f

          similar =
            for f <- Suggest.similar(function, names),
                a <- Enum.sort(for {^f, a} <- functions, do: a),
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

  # The exception spec of assert_raised_in, once its module is an exception and its
  # message a string or a regex.
  @spec validate_exception_spec!(tuple) :: tuple
  def validate_exception_spec!({:module, module, message} = spec) do
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

  def validate_exception_spec!({:pattern, %ValuePattern{}} = spec), do: spec

  # Refuting a call of a function the capture did not trace could never fail.
  @spec validate_traced!(Call.trace(), CallPattern.t(), String.t()) :: nil
  def validate_traced!(trace, pattern, what) do
    mfa = CallPattern.mfa(pattern)

    if Coverage.traced?(trace, mfa) == false do
      raise ArgumentError,
            "#{what} on #{MFA.to_string(mfa)}, which the capture did not trace, " <>
              "could never fail: add it to the patterns given to Kino.Trace.capture/3 " <>
              "(they were #{Coverage.patterns_text(trace)})"
    end
  end
end
