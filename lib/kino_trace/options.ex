defmodule KinoTrace.Options do
  @moduledoc false
  # The one validator of kino_trace's options: those of `Kino.Trace.calls/2` and
  # `Kino.Trace.capture/3` (`KinoTrace.Plan.Options`), of `Kino.Trace.Stats.start/2`
  # (`KinoTrace.Stats.Options`), of `Kino.Trace.Mermaid`, of `Kino.Trace.complete/2`
  # (`KinoTrace.Complete`) and of the widgets' controllers and their parts
  # (`KinoTrace.Widget.Buffer`, `KinoTrace.Widget.Store`).
  #
  # Each of them declares a schema, a keyword list of `option: {default, check}`, and
  # validates with `validate!/2`: options that are not a keyword list, an unknown option
  # (with its "did you mean", `KinoTrace.Base.Suggest`) and a bad value raise
  # `ArgumentError` worded the same way everywhere, in the order the options were given.
  # What depends on several options at once (`:return_to` needs `local: true`, the
  # native tracer's bounds) stays with the options it concerns.

  alias KinoTrace.Base.Suggest

  @typedoc """
  How an option's value is checked:

    * `{expected, predicate}` - valid when `predicate.(value)` is true; otherwise the
      error says the option expected `expected` (`"a boolean"`);
    * a function of the value that returns `:ok` or `{:error, expected}` (a check whose
      wording depends on the value); it may also raise its own `ArgumentError`.
  """
  @type check :: {String.t(), (term() -> boolean())} | (term() -> :ok | {:error, String.t()})

  @typedoc "Every option known, in the order errors list them, with its default and check."
  @type schema :: [{atom(), {term(), check()}}]

  @doc """
  Validates `opts` against `schema` and fills in the defaults. Raises `ArgumentError`
  naming the bad option.

      iex> schema = [time: {true, KinoTrace.Options.boolean()}, rows: {10, KinoTrace.Options.pos_integer()}]
      iex> KinoTrace.Options.validate!([rows: 5], schema)
      [time: true, rows: 5]

      iex> schema = [time: {true, KinoTrace.Options.boolean()}, rows: {10, KinoTrace.Options.pos_integer()}]
      iex> KinoTrace.Options.validate!([rows: 0], schema)
      ** (ArgumentError) invalid value for :rows: expected a positive integer, got: 0

      iex> schema = [time: {true, KinoTrace.Options.boolean()}, rows: {10, KinoTrace.Options.pos_integer()}]
      iex> KinoTrace.Options.validate!([tiem: false], schema)
      ** (ArgumentError) unknown option :tiem (did you mean :time?). Known options: :time, :rows
  """
  @spec validate!(term(), schema()) :: keyword()
  def validate!(opts, schema) do
    unless Keyword.keyword?(opts) do
      raise ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}"
    end

    Enum.each(opts, fn {key, value} ->
      case List.keyfind(schema, key, 0) do
        {^key, {_default, check}} -> check!(key, value, check)
        nil -> raise ArgumentError, Suggest.unknown_option(key, Keyword.keys(schema))
      end
    end)

    Keyword.merge(defaults(schema), opts)
  end

  @doc "The defaults of a schema."
  @spec defaults(schema()) :: keyword()
  def defaults(schema), do: for({key, {default, _check}} <- schema, do: {key, default})

  @doc """
  The schema with other defaults (a capture's, say): the options `defaults` has, in its
  order, with its values as defaults and the checks of `schema`.

      iex> schema = [a: {1, KinoTrace.Options.pos_integer()}, b: {true, KinoTrace.Options.boolean()}]
      iex> KinoTrace.Options.put_defaults(schema, b: false, a: 2) |> KinoTrace.Options.defaults()
      [b: false, a: 2]
  """
  @spec put_defaults(schema(), keyword()) :: schema()
  def put_defaults(schema, defaults) do
    for {key, default} <- defaults,
        {^key, {_default, check}} <- [List.keyfind(schema, key, 0)],
        do: {key, {default, check}}
  end

  @doc "Raises the `ArgumentError` of a bad value: `invalid value for :key: expected ..., got: ...`."
  @spec invalid!(atom(), String.t(), term()) :: no_return()
  def invalid!(key, expected, value) do
    raise ArgumentError,
          "invalid value for #{inspect(key)}: expected #{expected}, got: #{inspect(value)}"
  end

  defp check!(key, value, {expected, valid?}) do
    unless valid?.(value), do: invalid!(key, expected, value)
  end

  defp check!(key, value, check) when is_function(check, 1) do
    case check.(value) do
      :ok -> :ok
      {:error, expected} -> invalid!(key, expected, value)
    end
  end

  # --- the checks options share ---------------------------------------------------------

  @doc "A boolean."
  @spec boolean() :: check()
  def boolean, do: {"a boolean", &is_boolean/1}

  @doc "A positive integer."
  @spec pos_integer() :: check()
  def pos_integer, do: {"a positive integer", &pos_integer?/1}

  @doc "A non-negative integer."
  @spec non_neg_integer() :: check()
  def non_neg_integer, do: {"a non-negative integer", &(is_integer(&1) and &1 >= 0)}

  @doc "A positive integer, or `nil`."
  @spec optional_pos_integer() :: check()
  def optional_pos_integer, do: {"a positive integer", &(is_nil(&1) or pos_integer?(&1))}

  @doc "A positive integer of at most `max` (`unit`, if any, follows the bound in errors), or `nil` with `nil?`."
  @spec bounded_pos_integer(pos_integer(), keyword()) :: check()
  def bounded_pos_integer(max, opts \\ []) do
    unit = if opts[:unit], do: " (#{opts[:unit]})", else: ""
    nil? = Keyword.get(opts, nil, false)

    fn
      nil when nil? ->
        :ok

      value ->
        if(not pos_integer?(value),
          do: {:error, "a positive integer"},
          else: at_most(value, max, unit)
        )
    end
  end

  defp at_most(value, max, _unit) when value <= max, do: :ok
  defp at_most(_value, max, unit), do: {:error, "at most #{max}#{unit}"}

  @doc "Whether `value` is a positive integer."
  @spec pos_integer?(term()) :: boolean()
  def pos_integer?(value), do: is_integer(value) and value > 0
end
