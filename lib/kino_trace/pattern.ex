defmodule KinoTrace.Pattern do
  @moduledoc false
  # Turns what a user writes into trace targets and match specs.
  #
  # A pattern names the functions to trace and, optionally, which calls of them
  # to keep. These forms can be mixed freely in one list:
  #
  #   * strings: `"Enum"`, `"Enum.map"`, `"Enum.map/2"`, `"Enum.map/*"`,
  #     `":ets.insert/2"`, `":ets"`, and calls with argument patterns and guards
  #     in Elixir syntax: `"MyApp.Cache.fetch(:users, _)"`,
  #     `"Enum.map(list, _) when length(list) > 100"`
  #   * a module atom: `Enum`, `:ets`
  #   * a function capture: `&Enum.map/2`
  #   * a tuple: `{Enum, :map, 2}`, `{Enum, :map, :_}`, `{Enum, :_, :_}`
  #
  # `parse/2` checks the syntax only. `check/2` is the pre-flight check run
  # before anything is traced: the module exists, the function exists with that
  # arity, it is not a macro, and the pattern does not trace everything or the
  # tracer itself. `parse_each/2` and `parse_all!/2` do both.

  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.{Edit, Preflight, Text}
  alias KinoTrace.Base.Lookup

  defstruct [:source, :module, :function, :arity, head: :_, guards: [], call_text: nil]

  @typedoc """
  A parsed pattern.

    * `:source` - what the user wrote
    * `:module`, `:function`, `:arity` - the trace target; `:_` is a wildcard. A
      module or function named in text that does not exist as an atom is a
      `KinoTrace.Base.Name` until `check/2` resolves it (or reports it)
    * `:head` - the match spec head: a list with one pattern per argument, or
      `:_` for any arguments
    * `:guards` - the match spec guards of each clause, one list per `when` (`[]`
      when there is none)
    * `:call_text` - the argument patterns and guard as written (`nil` when
      there are none), used by `to_string/1`
  """
  @type t :: %__MODULE__{
          source: term,
          module: module | :_ | Name.t(),
          function: atom | :_ | Name.t(),
          arity: non_neg_integer | :_,
          head: [term] | :_,
          guards: [[term]],
          call_text: String.t() | nil
        }

  @type input :: String.t() | module | function | {module, atom, non_neg_integer | :_} | t

  @type check_opts :: [
          local: boolean,
          force: boolean,
          lookup: KinoTrace.Base.Lookup.t(),
          max_bytes: pos_integer
        ]

  @doc """
  Parses one pattern, checking its syntax only.

  Returns `{:ok, pattern}` or `{:error, message}`.

      iex> {:ok, pattern} = KinoTrace.Pattern.parse(":ets.insert/2")
      iex> {pattern.module, pattern.function, pattern.arity}
      {:ets, :insert, 2}

      iex> KinoTrace.Pattern.parse("Foo.bar(^x)")
      {:error, "the pin operator is not supported in trace patterns: ^x (write the value itself)"}

  Literal binaries are built from their segments, never evaluated, and what the
  literals of one pattern build is bounded by `:max_bytes` (the trace option; its
  default when not given), checked before anything is built:

      iex> KinoTrace.Pattern.parse("Foo.bar(<<0::size(1_000_000_000_000)>>)")
      {:error, "the binary <<0::size(1_000_000_000_000)>> is 125000000000 bytes: more than the trace's :max_bytes (16384 bytes), the bound on what the literals of a pattern may build (pass a larger max_bytes: to allow it)"}
      iex> {:ok, pattern} = KinoTrace.Pattern.parse("Foo.bar(<<1::size(24)-little>>)", max_bytes: 3)
      iex> pattern.head
      [<<1, 0, 0>>]

  ## Examples

      iex> {:ok, pattern} = KinoTrace.Pattern.parse("Enum.map/2")
      iex> KinoTrace.Pattern.mfa(pattern)
      {Enum, :map, 2}
      iex> KinoTrace.Pattern.match_spec(pattern, [{:return_trace}])
      [{:_, [], [{:return_trace}]}]

      iex> {:ok, pattern} = KinoTrace.Pattern.parse("Map.get(%{id: id}, _) when is_integer(id) and id > 0")
      iex> KinoTrace.Pattern.mfa(pattern)
      {Map, :get, 2}
      iex> KinoTrace.Pattern.match_spec(pattern, [])
      [{[%{id: :"$1"}, :_], [{:andalso, {:is_integer, :"$1"}, {:>, :"$1", 0}}], []}]

  A variable used twice must match equal values:

      iex> {:ok, pattern} = KinoTrace.Pattern.parse("Foo.bar({:ok, x}, x)")
      iex> pattern.head
      [{:ok, :"$1"}, :"$1"]

  The pre-flight check explains what is wrong:

      iex> KinoTrace.Pattern.parse("Enum.mpa/2") |> elem(1) |> KinoTrace.Pattern.check()
      {:error, "Enum.mpa/2 is not a function; did you mean Enum.map/2?"}

      iex> KinoTrace.Pattern.parse_each(["Enum.map/2", "Enumm"])
      [
        {"Enum.map/2", {:ok, %KinoTrace.Pattern{source: "Enum.map/2", module: Enum, function: :map, arity: 2, head: :_, guards: []}, []}},
        {"Enumm", {:error, "unknown module Enumm; did you mean Enum?"}}
      ]

  ## Argument patterns

  The grammar (what arguments and guards may be) is guides/patterns.md, the public
  home of it; the examples here are its doctests.

  Several `when` clauses are one match spec clause each, so as in Elixir a
  guard that raises only fails its own clause:

      iex> {:ok, pattern} = KinoTrace.Pattern.parse("Foo.bar(x) when hd(x) == 1 when is_atom(x)")
      iex> spec = KinoTrace.Pattern.match_spec(pattern, [])
      [{[:"$1"], [{:==, {:hd, :"$1"}, 1}], []}, {[:"$1"], [{:is_atom, :"$1"}], []}]
      iex> :erlang.match_spec_test([:a], spec, :trace)
      {:ok, true, [], []}

  Anything else is an error naming it, never a crash:

      iex> KinoTrace.Pattern.parse("Foo.bar(%URI{u | host: h})")
      {:error, "map update syntax is not supported in trace patterns: %URI{u | host: h} (write a map pattern such as %{key: value})"}

  ## Atoms

  Pattern text never creates atoms (see `KinoTrace.Base.Name` and
  guides/patterns.md): a literal atom that does not exist yet is an error.

      iex> KinoTrace.Pattern.parse("Map.get(_, :kino_trace_no_such_atom_3e9a)")
      {:error, "unknown atom :kino_trace_no_such_atom_3e9a: no such atom exists yet, so no traced term can contain it (kino_trace never creates atoms from pattern text; if the atom appears once some code has run or loaded, set the pattern again then)"}
  """
  @spec parse(input | term, max_bytes: pos_integer) :: {:ok, t} | {:error, String.t()}
  def parse(input, opts \\ [])
  def parse(%__MODULE__{} = pattern, _opts), do: {:ok, pattern}
  def parse(text, opts) when is_binary(text), do: text |> Text.parse(opts) |> pattern()
  def parse(input, _opts), do: parse_term(input)

  defp parse_term(:_), do: {:ok, %__MODULE__{source: :_, module: :_, function: :_, arity: :_}}
  defp parse_term(module) when is_atom(module), do: build(module, module, :_, :_)
  defp parse_term(fun) when is_function(fun), do: parse_function(fun)

  defp parse_term([_ | _] = list) do
    if List.improper?(list),
      do: {:error, "expected a proper list of patterns, got an improper list: #{inspect(list)}"},
      else: parse_other(list)
  end

  defp parse_term({module, function, arity} = tuple) when is_atom(module) and is_atom(function) do
    if arity == :_ or (is_integer(arity) and arity >= 0) do
      build(tuple, module, function, arity)
    else
      {:error, "the arity in #{inspect(tuple)} must be a non-negative integer or :_"}
    end
  end

  defp parse_term({module, function} = tuple) when is_atom(module) and is_atom(function),
    do: build(tuple, module, function, :_)

  defp parse_term(other), do: parse_other(other)

  defp parse_other(other) do
    {:error,
     "expected a string such as \"Enum.map/2\", a module, a capture such as &Enum.map/2 " <>
       "or a {module, function, arity} tuple, got: #{inspect(other)}"}
  end

  @doc """
  Runs the pre-flight check on a parsed pattern.

  Returns `{:ok, pattern, warnings}` when it can be traced (warnings are
  strings, for example when the compiler inlines the function so calls never
  reach it), or `{:error, message}`. The returned pattern has its module and
  function as atoms (see "Atoms" in the module documentation).

  Options:

    * `:local` - whether local (private and module-internal) calls are traced
      too, so private functions are valid targets. Defaults to `true`.
    * `:force` - allow patterns that are refused otherwise: tracing every
      function, kino_trace's own modules, and macro expansion functions.
      Defaults to `false`.
    * `:lookup` - where modules and their functions are looked up
      (`KinoTrace.Base.Lookup`): this node by default, or the node the pattern
      is for, which needs no kino_trace. Suggestions come from that node's
      modules and functions.
    * `:max_bytes` - the most the literals of a pattern may build, in bytes
      (see `parse/2`): the trace's option of that name. Defaults to its default.

      iex> {:ok, pattern} = KinoTrace.Pattern.parse("Kernel.+/2")
      iex> KinoTrace.Pattern.check(pattern)
      {:ok, pattern, ["Kernel.+/2 is inlined by the compiler (calls never reach it); trace :erlang.+/2 instead (compiled code usually runs :erlang.+/2 as a VM instruction, so only dynamic calls reach it)"]}
  """
  @spec check(t, check_opts) :: {:ok, t, [String.t()]} | {:error, String.t()}
  def check(%__MODULE__{} = pattern, opts \\ []) do
    [result] = Preflight.run_all([{:ok, pattern}], opts)
    result
  end

  @doc """
  Parses and checks each input on its own, for showing a result per line.

  Takes a list of inputs, or a text with one pattern per line (blank lines and
  lines starting with `#` are skipped). Returns `{input, result}` pairs in order.
  """
  @spec parse_each([input] | String.t(), check_opts) ::
          [{input, {:ok, t, [String.t()]} | {:error, String.t()}}]
  def parse_each(inputs, opts \\ []) do
    inputs = entries(inputs)
    lookup = Keyword.get(opts, :lookup)
    if lookup && not Lookup.local?(lookup), do: Text.import_names(inputs, lookup)
    Enum.zip(inputs, Preflight.run_all(Enum.map(inputs, &parse(&1, opts)), opts))
  end

  @doc """
  Parses and checks all inputs, raising `ArgumentError` naming every bad entry.

  Accepts a list of inputs, a text with one pattern per line, or a single
  input. Returns the patterns and all warnings.

      iex> {[pattern], []} = KinoTrace.Pattern.parse_all!("Enum.map/2")
      iex> KinoTrace.Pattern.to_string(pattern)
      "Enum.map/2"
  """
  @spec parse_all!([input] | input, check_opts) :: {[t], [String.t()]}
  def parse_all!(inputs, opts \\ []) do
    if improper_list?(inputs) do
      raise ArgumentError,
            "expected a list of trace patterns, got an improper list: #{inspect(inputs)}"
    end

    results = parse_each(inputs, opts)

    if results == [] do
      raise ArgumentError, "no trace patterns given"
    end

    case for(
           {input, {:error, message}} <- results,
           do: "invalid trace pattern #{display(input)}: #{message}"
         ) do
      [] ->
        patterns = for {_input, {:ok, pattern, _warnings}} <- results, do: pattern
        warnings = Enum.flat_map(results, fn {_input, {:ok, _, warnings}} -> warnings end)
        {patterns, warnings}

      errors ->
        raise ArgumentError, Enum.join(errors, "\n")
    end
  end

  @doc """
  The match spec for `:trace.function/4`, with `body` as the actions of every
  clause (such as `[{:return_trace}]` or `[{:message, {:caller}}]`): one clause,
  or one per `when` clause of the guard.

      iex> {:ok, pattern} = KinoTrace.Pattern.parse("Foo.bar(x) when x in [:a, :b]")
      iex> KinoTrace.Pattern.match_spec(pattern, [{:exception_trace}])
      [{[:"$1"], [{:orelse, {:"=:=", :"$1", :a}, {:"=:=", :"$1", :b}}], [{:exception_trace}]}]
  """
  @spec match_spec(t, list) :: [{[term] | :_, [term], list}]
  def match_spec(pattern, body \\ [])

  def match_spec(%__MODULE__{head: head, guards: []}, body) when is_list(body),
    do: [{head, [], body}]

  def match_spec(%__MODULE__{head: head, guards: guards}, body) when is_list(body),
    do: for(clause_guards <- guards, do: {head, clause_guards, body})

  @doc """
  The `{module, function, arity}` trace target, with `:_` as wildcards.

      iex> KinoTrace.Pattern.parse(&Enum.map/2) |> elem(1) |> KinoTrace.Pattern.mfa()
      {Enum, :map, 2}
  """
  @spec mfa(t) :: {module | :_, atom | :_, non_neg_integer | :_}
  def mfa(%__MODULE__{module: module, function: function, arity: arity}),
    do: {module, function, arity}

  @doc """
  The canonical text of a pattern.

      iex> KinoTrace.Pattern.parse({:ets, :insert, :_}) |> elem(1) |> KinoTrace.Pattern.to_string()
      ":ets.insert/*"

      iex> KinoTrace.Pattern.parse("Enum.map( list,_ ) when length(list)>100") |> elem(1) |> KinoTrace.Pattern.to_string()
      "Enum.map(list, _) when length(list) > 100"
  """
  @spec to_string(t) :: String.t()
  def to_string(%__MODULE__{} = pattern), do: Text.of(pattern)

  @doc """
  Splits a text of patterns into its patterns: one per line, trimmed, with blank lines
  and lines starting with `#` (comments) skipped. `parse_each/2` and `parse_all!/2` split
  text this way.

      iex> KinoTrace.Pattern.lines("Enum.map/2\\r\\n\\n  # off for now\\n :ets.insert \\n")
      ["Enum.map/2", ":ets.insert"]
  """
  @spec lines(String.t()) :: [String.t()]
  def lines(text) when is_binary(text) do
    text
    |> String.split(["\r\n", "\n"])
    |> Enum.map(&String.trim/1)
    |> Enum.reject(&(&1 == "" or String.starts_with?(&1, "#")))
  end

  ## Inputs

  defp entries(text) when is_binary(text), do: lines(text)

  # An improper list is one bad entry (`parse/2` explains it).
  defp entries(inputs) when is_list(inputs),
    do: if(improper_list?(inputs), do: [inputs], else: inputs)

  defp entries(input), do: [input]

  defp improper_list?(inputs), do: is_list(inputs) and List.improper?(inputs)

  # (a text over the bytes of a pattern by its start: its error says how long it is)
  defp display(input) when is_binary(input) do
    if Edit.check_pattern(input) == :ok,
      do: inspect(input),
      else: inspect(String.slice(input, 0, 40) <> "...")
  end

  defp display(%__MODULE__{} = pattern), do: inspect(__MODULE__.to_string(pattern))
  defp display(input), do: inspect(input)

  defp build(source, module, function, arity),
    do: source |> Text.target(module, function, arity) |> pattern()

  defp pattern({:ok, fields}), do: {:ok, struct!(__MODULE__, fields)}
  defp pattern({:error, _} = error), do: error

  defp parse_function(fun) do
    info = Function.info(fun)

    case {info[:type], Atom.to_string(info[:name]), info[:env]} do
      {:external, _name, _env} ->
        build(fun, info[:module], info[:name], info[:arity])

      # `&local_fun/1` inside a module: a local fun named after the function.
      {:local, "-" <> _, _env} ->
        {:error, anonymous_function_error(fun)}

      {:local, _name, []} ->
        build(fun, info[:module], info[:name], info[:arity])

      _ ->
        {:error, anonymous_function_error(fun)}
    end
  end

  defp anonymous_function_error(fun) do
    "anonymous functions cannot be traced (#{inspect(fun)}); " <>
      "pass a capture of a named function such as &Enum.map/2, or a string such as \"Enum.map/2\""
  end
end
