defmodule KinoTrace.Base.MFA do
  @moduledoc false
  # How a function is written in messages, printed lines, the widget and the stats:
  # `Module.function/arity`, as Elixir code names it.
  #
  # Elixir modules are written as aliases (`Enum`, not `Elixir.Enum`), Erlang modules as
  # atoms (`:ets`). A function name is written as it stands after a dot in a remote call:
  # operators and identifiers as they are (`Kernel.+/2`), any other name quoted
  # (`MyApp."-run/2-fun-0-"/1`). Modules and functions may also be
  # `KinoTrace.Base.Name`s, the names a pattern holds as text when no atom exists.
  #
  # The arity `:_` (a pattern's "any arity") is written `/*`; `nil` writes no arity.

  alias KinoTrace.Base.Name

  @typedoc "A module: an atom, or a `KinoTrace.Base.Name` when no atom of it exists."
  @type module_name :: module() | Name.t()

  @typedoc "A function name: an atom, or a `KinoTrace.Base.Name`."
  @type function_name :: atom() | Name.t()

  @typedoc "An arity; `:_` is any arity (written `/*`), `nil` none (nothing written)."
  @type arity_spec :: arity() | :_ | nil

  @doc """
  `Module.function/arity` for `{module, function, arity}`, or `function/arity` for a
  local `{function, arity}`.

      iex> KinoTrace.Base.MFA.to_string({Map, :get, 2})
      "Map.get/2"
      iex> KinoTrace.Base.MFA.to_string({%KinoTrace.Base.Name{text: "Elixir.NoSuch1f3c"}, :run, 0})
      "NoSuch1f3c.run/0"
      iex> KinoTrace.Base.MFA.to_string({:valid?, 1})
      "valid?/1"

  ## Examples

      iex> KinoTrace.Base.MFA.to_string({Enum, :map, 2})
      "Enum.map/2"
      iex> KinoTrace.Base.MFA.to_string({:ets, :insert, 2})
      ":ets.insert/2"
      iex> KinoTrace.Base.MFA.to_string({Kernel, :+, 2})
      "Kernel.+/2"
      iex> KinoTrace.Base.MFA.to_string({MyApp, :"-run/2-fun-0-", 1})
      ~s(MyApp."-run/2-fun-0-"/1)
      iex> KinoTrace.Base.MFA.to_string({:ets, :insert, :_})
      ":ets.insert/*"
      iex> KinoTrace.Base.MFA.to_string({:ets, :insert, nil})
      ":ets.insert"
      iex> KinoTrace.Base.MFA.to_string({:map, 2})
      "map/2"
      iex> KinoTrace.Base.MFA.call(Enum, :map)
      "Enum.map"
  """
  @spec to_string({module_name(), function_name(), arity_spec()} | {function_name(), arity()}) ::
          String.t()
  def to_string({module, function, arity}), do: with_arity(call(module, function), arity)
  def to_string({function, arity}), do: with_arity(function_name(function), arity)

  @doc """
  `Module.function` as written in a remote call.

      iex> KinoTrace.Base.MFA.call(:ets, :lookup)
      ":ets.lookup"
      iex> KinoTrace.Base.MFA.call(MyApp, :"a b")
      ~s(MyApp."a b")
  """
  @spec call(module_name(), function_name()) :: String.t()
  def call(module, function),
    do: Name.inspect_module(module) <> "." <> function_name(function)

  @doc """
  The function as a person reads it: `to_string/1`, except that a function the compiler
  made inside another (the body of an `fn`, a comprehension, an inlined `:lists`
  function) reads as Elixir's stacktraces write an anonymous function,
  `anonymous fn/arity in Module.function/arity`, naming the function it was made in.
  The raw name (`to_string/1`) stays the function's identity: two such functions of one
  function read alike.

      iex> KinoTrace.Base.MFA.label({Enum, :"-sum/1-lists^foldl/2-0-", 2})
      "anonymous fn/2 in Enum.sum/1"
      iex> KinoTrace.Base.MFA.label({MyApp, :"-run/2-fun-0-", 1})
      "anonymous fn/1 in MyApp.run/2"
      iex> KinoTrace.Base.MFA.label({:lists, :"-filter/2-lc$^0/1-0-", 2})
      "anonymous fn/2 in :lists.filter/2"
      iex> KinoTrace.Base.MFA.label({Kernel, :"-//2-fun-0-", 1})
      "anonymous fn/1 in Kernel.//2"
      iex> KinoTrace.Base.MFA.label({Enum, :map, 2})
      "Enum.map/2"
  """
  @spec label({module_name(), function_name(), arity_spec()}) :: String.t()
  def label({module, function, arity} = mfa) do
    case made_in(function) do
      {name, parent_arity} ->
        "anonymous fn" <> with_arity("", arity) <> " in " <> parent(module, name, parent_arity)

      nil ->
        __MODULE__.to_string(mfa)
    end
  end

  @doc """
  The labels (`label/1`) of `mfas` told apart, as a map: two functions the compiler made
  in one function can read alike (`anonymous fn/3 in Enum.reduce/3` twice); each of
  those gets, in parentheses, the part of its raw name that tells it apart (`fun-1`,
  `lists^foldl/2-0`: the kind and index the compiler named it by). The others read as
  `label/1` reads them.

      iex> labels = KinoTrace.Base.MFA.labels([
      ...>   {Enum, :"-reduce/3-lists^foldl/2-0-", 3}, {Enum, :"-reduce/3-anonymous-1-", 3}, {Enum, :"-map/2-fun-0-", 3}])
      iex> labels[{Enum, :"-reduce/3-lists^foldl/2-0-", 3}]
      "anonymous fn/3 in Enum.reduce/3 (lists^foldl/2-0)"
      iex> labels[{Enum, :"-reduce/3-anonymous-1-", 3}]
      "anonymous fn/3 in Enum.reduce/3 (anonymous-1)"
      iex> labels[{Enum, :"-map/2-fun-0-", 3}]
      "anonymous fn/3 in Enum.map/2"
  """
  @spec labels([{module_name(), function_name(), arity_spec()}]) :: %{
          optional(tuple()) => String.t()
        }
  def labels(mfas) do
    mfas
    |> Enum.uniq()
    |> Enum.group_by(&label/1)
    |> Enum.flat_map(fn
      {label, [mfa]} ->
        [{mfa, label}]

      {label, alike} ->
        for {_m, f, _a} = mfa <- alike, do: {mfa, label <> " (" <> made_as(f) <> ")"}
    end)
    |> Map.new()
  end

  @doc """
  A call as a person reads it, with its arguments already written (`args`): as
  `call/2` with them in parentheses, or, for a function the compiler made (see
  `label/1`), as Elixir's stacktraces write a call of an anonymous function.

      iex> KinoTrace.Base.MFA.label_call(Enum, :"-sum/1-lists^foldl/2-0-", "[1, 2], 0")
      "anonymous fn([1, 2], 0) in Enum.sum/1"
      iex> KinoTrace.Base.MFA.label_call(Enum, :map, "[1], :f")
      "Enum.map([1], :f)"
  """
  @spec label_call(module_name(), function_name(), String.t()) :: String.t()
  def label_call(module, function, args) do
    case made_in(function) do
      {name, arity} -> "anonymous fn(" <> args <> ") in " <> parent(module, name, arity)
      nil -> call(module, function) <> "(" <> args <> ")"
    end
  end

  @doc """
  Whether `label/1` reads the function otherwise than `to_string/1`.

      iex> KinoTrace.Base.MFA.compiler_made?(:"-sum/1-lists^foldl/2-0-")
      true
      iex> KinoTrace.Base.MFA.compiler_made?(:sum)
      false
  """
  @spec compiler_made?(function_name()) :: boolean()
  def compiler_made?(function), do: made_in(function) != nil

  # "-NAME/ARITY-KIND-" (KIND: fun-N, lc$^N/1-M, lists^foldl/2-N, anonymous-N...): the
  # function NAME/ARITY the compiler made it in.
  defp made_in(function) when is_atom(function) do
    case Regex.run(~r{\A-(.+?)/(\d+)-(.+)-\z}s, Atom.to_string(function)) do
      [_, name, arity, _kind] -> {name, String.to_integer(arity)}
      nil -> nil
    end
  end

  defp made_in(_name), do: nil

  # The KIND of "-NAME/ARITY-KIND-" (the whole name of another function).
  defp made_as(function) do
    case Regex.run(~r{\A-.+?/\d+-(.+)-\z}s, Atom.to_string(function)) do
      [_, kind] -> kind
      nil -> Atom.to_string(function)
    end
  end

  defp parent(module, name, arity),
    do: with_arity(call(module, Name.resolve(name)), arity)

  defp function_name(function), do: Name.inspect_atom(:remote_call, function)

  defp with_arity(text, nil), do: text
  defp with_arity(text, :_), do: text <> "/*"
  defp with_arity(text, arity) when is_integer(arity), do: text <> "/" <> Integer.to_string(arity)
end
