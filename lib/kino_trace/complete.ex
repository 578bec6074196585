defmodule KinoTrace.Complete do
  @moduledoc false
  # Completes a pattern line as it is typed: module names, function names with their
  # arities, and the arities of a function.
  #
  # `complete/2` looks at the end of the text (the text before the cursor) and returns
  # `%{prefix: prefix, items: items}`: `prefix` is the end of the text the items
  # replace (what has been typed of them), and each item is a map:
  #
  #   * `:label` - what a list of suggestions shows (`"Cache"`, `"fetch/2"`)
  #   * `:insert` - the text that replaces `prefix`
  #   * `:kind` - `:module` or `:function`
  #   * `:detail` - the full name (`"MyApp.Cache"`, `"MyApp.Cache.fetch/2"`)
  #
  # Accepting an item is `String.replace_suffix(text, prefix, item.insert)`. In a
  # browser, where string lengths count UTF-16 code units, the same is "remove
  # `prefix.length` characters before the cursor, insert `item.insert`".
  #
  # What it completes:
  #
  #   * `MyApp.Ca` - modules: the next alias segment (`Cache`, `Catalog`)
  #   * `:et` - Erlang modules (`:ets`)
  #   * `MyApp.Cache.fe` - functions, one item per arity (`fetch/2`, `fetch/3`)
  #   * `MyApp.Cache.` - both the modules under `MyApp.Cache` and its functions
  #   * `Enum.map/` - the arities (`2`)
  #   * `Enum.map(` - one call per arity with `_` for every argument (`_, _)`)
  #
  # Modules are those loaded and those whose object file is on the code path, which are
  # not loaded for it: their exports are read from the file
  # (`KinoTrace.Complete.Modules`). Only exported functions are offered, without
  # macros and the compiler's generated functions; names starting with `_` only once an
  # `_` is typed.
  #
  # Typed text never becomes an atom (the atom table is never freed): names are
  # compared as text, and a module's atom is only looked up when it already exists.

  alias KinoTrace.Complete.Modules
  alias KinoTrace.Base.Name
  alias KinoTrace.Base.MFA
  alias KinoTrace.Options

  # Text longer than this is not a pattern's head being typed.
  @max_bytes 4_096

  @typedoc "One suggestion; see the module documentation."
  @type item :: %{
          label: String.t(),
          insert: String.t(),
          kind: :module | :function,
          detail: String.t()
        }

  @typedoc "The suggestions, and the end of the text they replace."
  @type result :: %{prefix: String.t(), items: [item()]}

  @doc """
  Completes the end of `text` (the last line, when it has several).

  Options:

    * `:limit` - the most items returned (default 100)
    * `:node` - the node whose modules are offered (default: this one); another node's
      are read there with plain OTP calls, and a node that does not answer within 2 s
      has none

  Text that is not valid UTF-8, or longer than #{@max_bytes} bytes, has no completions.
  Anything but a string, or a bad option, raises an `ArgumentError`.

  ## Examples

      iex> KinoTrace.Complete.complete(":ets.insert")
      %{
        prefix: "insert",
        items: [
          %{label: "insert/2", insert: "insert/2", kind: :function, detail: ":ets.insert/2"},
          %{label: "insert_new/2", insert: "insert_new/2", kind: :function, detail: ":ets.insert_new/2"}
        ]
      }

      iex> %{prefix: prefix, items: items} = KinoTrace.Complete.complete("Enum.map_j")
      iex> {prefix, Enum.map(items, & &1.insert)}
      {"map_j", ["map_join/2", "map_join/3"]}
      iex> String.replace_suffix("Enum.map_j", prefix, hd(items).insert)
      "Enum.map_join/2"

      iex> KinoTrace.Complete.complete("Enum.map_join(").items |> Enum.map(& &1.insert)
      ["_, _)", "_, _, _)"]

      iex> %{prefix: "Enu", items: [%{insert: "Enum", kind: :module} | _]} = KinoTrace.Complete.complete("Enu")

      iex> KinoTrace.Complete.complete("KinoTraceNoSuchModule4d1.f")
      %{prefix: "f", items: []}
  """
  @spec complete(String.t(), keyword()) :: result()
  def complete(text, opts \\ [])

  def complete(text, opts) when is_binary(text) do
    opts = Options.validate!(opts, options())
    where = opts[:node]
    limit = opts[:limit]

    if byte_size(text) <= @max_bytes and String.valid?(text) do
      line = text |> String.split(["\r\n", "\n"]) |> List.last() |> String.trim_leading()
      {prefix, items} = suggest(line, limit, where)
      %{prefix: prefix, items: items |> Enum.take(limit) |> useful(prefix)}
    else
      %{prefix: "", items: []}
    end
  end

  def complete(text, _opts) do
    raise ArgumentError, "expected the text of a pattern line (a string), got: #{inspect(text)}"
  end

  # The options of complete/2 (`KinoTrace.Options`): a bad one raises an ArgumentError
  # naming it. The default node is this one, known at run time.
  defp options,
    do: [limit: {100, Options.non_neg_integer()}, node: {node(), {"a node name", &is_atom/1}}]

  # Items that would change nothing are no suggestion.
  defp useful(items, prefix) do
    if Enum.all?(items, &(&1.insert == prefix)), do: [], else: items
  end

  defp suggest(line, limit, where) do
    cond do
      captures = run(:arity, line) ->
        {"", arities(captures, where)}

      captures = run(:erlang_module, line) ->
        {":" <> captures["name"], erlang_modules(captures["name"], limit, where)}

      captures = run(:alias, line) ->
        %{"path" => path, "segment" => segment} = captures
        # `MyApp.Cache.`: the modules under it, and its functions
        functions =
          if segment == "" and path != "",
            do: functions(String.trim_trailing(path, "."), "", where),
            else: []

        {segment, aliases(path, segment, limit, where) ++ functions}

      captures = run(:function, line) ->
        {captures["function"], functions(captures["module"], captures["function"], where)}

      true ->
        {"", []}
    end
  end

  defp run(regex, line) do
    case Regex.named_captures(regex(regex), line) do
      nil -> nil
      captures -> captures
    end
  end

  ## What is typed

  # `Enum.map(`, `Enum.map/`
  defp regex(:arity),
    do:
      ~r/\A(?<module>\p{Lu}[\p{L}\p{N}_]*(?:\.\p{Lu}[\p{L}\p{N}_]*)*|:[\p{Ll}_][\p{L}\p{N}_@]*)\.(?<function>[\p{Ll}_][\p{L}\p{N}_@]*[?!]?)(?<separator>[(\/])\s*\z/u

  # `:et`
  defp regex(:erlang_module), do: ~r/\A:(?<name>[\p{Ll}_][\p{L}\p{N}_@]*)?\z/u
  # `MyApp.Ca`, `MyApp.Cache.`
  defp regex(:alias),
    do: ~r/\A(?<path>(?:\p{Lu}[\p{L}\p{N}_]*\.)*)(?<segment>\p{Lu}[\p{L}\p{N}_]*)?\z/u

  # `MyApp.Cache.fe`
  defp regex(:function),
    do:
      ~r/\A(?<module>\p{Lu}[\p{L}\p{N}_]*(?:\.\p{Lu}[\p{L}\p{N}_]*)*|:[\p{Ll}_][\p{L}\p{N}_@]*)\.(?<function>[\p{Ll}_][\p{L}\p{N}_@]*[?!]?)?\z/u

  # a name written as an alias segment
  defp regex(:alias_segment), do: ~r/\A\p{Lu}[\p{L}\p{N}_]*\z/u
  # an Erlang module written as `:name`
  defp regex(:erlang_name), do: ~r/\A[\p{Ll}_][\p{L}\p{N}_@]*\z/u
  # a function name written without quotes
  defp regex(:function_name), do: ~r/\A[\p{Ll}_][\p{L}\p{N}_@]*[?!]?\z/u

  ## Modules

  # The next alias segment of every Elixir module under `path` starting with `segment`.
  # The names come sorted, so their segments too: the first `limit` are taken.
  defp aliases("", "", _limit, _where), do: []

  defp aliases(path, segment, limit, where) do
    path = String.replace_prefix(path, "Elixir.", "")
    parent = "Elixir." <> path
    skip = byte_size(parent)

    where
    |> matching(parent <> segment)
    |> Stream.map(fn name ->
      name |> binary_part(skip, byte_size(name) - skip) |> :binary.split(".") |> hd()
    end)
    |> Stream.dedup()
    |> Stream.filter(&(&1 =~ regex(:alias_segment)))
    |> Enum.take(limit)
    |> Enum.map(fn next -> %{label: next, insert: next, kind: :module, detail: path <> next} end)
  end

  defp erlang_modules(prefix, limit, where) do
    where
    |> matching(prefix)
    |> Stream.reject(&String.starts_with?(&1, "Elixir."))
    |> Stream.filter(&(&1 =~ regex(:erlang_name)))
    |> Enum.take(limit)
    |> Enum.map(fn name ->
      text = ":" <> name
      %{label: text, insert: text, kind: :module, detail: text}
    end)
  end

  ## Functions

  defp functions(module, prefix, where) do
    name = module_name(module)

    for {function, arity} <- exports(name, where),
        String.starts_with?(function, prefix),
        offered?(function, prefix) do
      text = MFA.to_string({Name.resolve(function), arity})

      %{
        label: text,
        insert: text,
        kind: :function,
        detail: MFA.to_string({%Name{text: name}, Name.resolve(function), arity})
      }
    end
  end

  defp arities(%{"module" => module, "function" => function, "separator" => separator}, where) do
    name = module_name(module)

    for {^function, arity} <- exports(name, where), offered?(function, function) do
      %{
        label: MFA.to_string({Name.resolve(function), arity}),
        insert: arity_text(separator, arity),
        kind: :function,
        detail: MFA.to_string({%Name{text: name}, Name.resolve(function), arity})
      }
    end
  end

  # Sorted by name and arity, names written without quotes (`fetch`, not `+`) first.
  defp exports(module, where) do
    where
    |> module_exports(module)
    |> Enum.uniq()
    |> Enum.sort_by(fn {function, arity} ->
      {not (function =~ regex(:function_name)), function, arity}
    end)
  end

  # This node's modules, or another's (KinoTrace.Complete.Remote).
  defp matching(where, prefix) when where == node(), do: Modules.matching(prefix)
  defp matching(where, prefix), do: KinoTrace.Complete.Remote.matching(where, prefix)

  defp module_exports(where, name) when where == node(), do: Modules.exports(name)
  defp module_exports(where, name), do: KinoTrace.Complete.Remote.exports(where, name)

  defp arity_text("/", arity), do: Integer.to_string(arity)
  defp arity_text("(", arity), do: Enum.join(List.duplicate("_", arity), ", ") <> ")"

  # The compiler's functions (`-fun-0-`, `MACRO-`) never; `__info__/1` and friends
  # once an `_` is typed; `module_info` once anything is.
  defp offered?(function, prefix) do
    cond do
      String.starts_with?(function, ["-", "MACRO-"]) -> false
      String.starts_with?(function, "_") -> String.starts_with?(prefix, "_")
      function == "module_info" -> prefix != ""
      true -> true
    end
  end

  # The full name of a module as typed: `MyApp.Cache` -> "Elixir.MyApp.Cache".
  defp module_name(":" <> erlang), do: erlang
  defp module_name("Elixir." <> path), do: "Elixir." <> path
  defp module_name(path), do: "Elixir." <> path
end
