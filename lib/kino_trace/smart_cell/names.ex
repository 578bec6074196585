defmodule KinoTrace.SmartCell.Names do
  @moduledoc false
  # Reads the smart cell's text fields of processes and nodes into the literal terms they
  # stand for, as quoted forms, without creating atoms and without running anything.
  #
  # Processes are written as a user would in code, comma-separated: a registered name
  # (`MyApp.Cache`, `:my_server`, or `my_server`), `{:global, name}`, `{:via, module,
  # name}`, or a pid as `inspect/1` shows it (`#PID<0.123.0>`, also `<0.123.0>` or
  # `pid("0.123.0")`). Each becomes a quoted literal: names and the parts of name tuples
  # are literals only (atoms, numbers, strings, and lists and tuples of them), so no
  # field can carry code into the cell, not even from attrs saved in a notebook someone
  # else wrote. A pid becomes `:c.pid(0, 123, 0)`, which needs no IEx helper. An atom
  # that does not exist yet stays a `KinoTrace.Base.Name` (written as the atom it
  # names, see `KinoTrace.Pattern.Quoted.to_string/1`).

  import KinoTrace.Base.Name, only: [is_name: 1]
  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.Quoted

  @pid ~r/^(?:#PID<|<|pid\(\s*"|:c\.pid\(\s*)(\d+)[.,]\s*(\d+)[.,]\s*(\d+)(?:>|"\s*\)|\s*\))$/
  @node ~r/^[A-Za-z0-9_\-.]+@[A-Za-z0-9_\-.]+$/

  @doc """
  The quoted literal of each process in `text` (comma-separated), in order, or
  `{:error, message}` naming the first entry that is no process.

  ## Examples

      iex> {:ok, quoted} = KinoTrace.SmartCell.Names.processes("MyApp.Cache, my_server, #PID<0.123.0>")
      iex> Enum.map(quoted, &KinoTrace.Pattern.Quoted.to_string/1)
      ["MyApp.Cache", ":my_server", ":c.pid(0, 123, 0)"]
      iex> {:ok, [quoted]} = KinoTrace.SmartCell.Names.processes("{:global, {:cache, 1}}")
      iex> KinoTrace.Pattern.Quoted.to_string(quoted)
      "{:global, {:cache, 1}}"
      iex> KinoTrace.SmartCell.Names.processes("1 + 1")
      {:error, "\\"1 + 1\\" is not a process: write a registered name (MyApp.Cache or :name), {:global, name}, {:via, module, name} or a pid (#PID<0.123.0>)"}
      iex> KinoTrace.SmartCell.Names.processes(~S|{:global, System.cmd("touch", ["/tmp/x"])}|)
      {:error, "{:global, System.cmd(\\"touch\\", [\\"/tmp/x\\"])}: a process name must be a literal (atoms, numbers, strings, and lists and tuples of them), got: System.cmd(\\"touch\\", [\\"/tmp/x\\"])"}

  Nodes are names such as `app@host`, with or without a leading `:` or quotes:

      iex> {:ok, nodes} = KinoTrace.SmartCell.Names.nodes("app@host, :\\"worker@10.0.0.2\\"")
      iex> Enum.map(nodes, &KinoTrace.Pattern.Quoted.to_string/1)
      [":app@host", ":\\"worker@10.0.0.2\\""]
  """
  @spec processes(String.t()) :: {:ok, [Macro.t()]} | {:error, String.t()}
  def processes(text) when is_binary(text) do
    text |> split() |> map_all(&process/1)
  end

  @doc """
  Each node name in `text` (separated by commas or spaces), as an atom, or as a
  `KinoTrace.Base.Name` when its atom does not exist; or `{:error, message}` naming
  the first bad one.
  """
  @spec nodes(String.t()) :: {:ok, [atom() | Name.t()]} | {:error, String.t()}
  def nodes(text) when is_binary(text) do
    text
    |> String.split([",", " ", "\n", "\t"], trim: true)
    |> map_all(&node_name/1)
  end

  @doc """
  Looks the processes of `text` up on this node, as the trace will when it starts:
  `:ok`, or `{:error, message}` for the first that names no live process. Only atoms
  that exist are looked up: a name whose atom does not exist names no process.

      iex> KinoTrace.SmartCell.Names.check_processes(":kino_trace_nobody_3f1")
      {:error, "no process is registered as :kino_trace_nobody_3f1"}
  """
  @spec check_processes(String.t()) :: :ok | {:error, String.t()}
  def check_processes(text) do
    with {:ok, _} <- processes(text) do
      text |> split() |> Enum.find_value(:ok, &check_process/1)
    end
  end

  @doc """
  Checks that each node of `text` is connected (or is this node): `:ok` or `{:error,
  message}`.
  """
  @spec check_nodes(String.t()) :: :ok | {:error, String.t()}
  def check_nodes(text) do
    with {:ok, _} <- nodes(text) do
      known = Enum.map([node() | Node.list(:connected)], &Atom.to_string/1)

      text
      |> String.split([",", " ", "\n", "\t"], trim: true)
      |> Enum.find_value(:ok, fn entry ->
        name = node_text(entry)
        unless name in known, do: {:error, "node #{name} is not connected"}
      end)
    end
  end

  ## Processes

  defp process(entry) do
    case Regex.run(@pid, entry, capture: :all_but_first) do
      [_, _, _] = parts ->
        {:ok, {{:., [], [:c, :pid]}, [], Enum.map(parts, &String.to_integer/1)}}

      nil ->
        with {:ok, quoted} <- parse(entry), do: name(quoted, entry)
    end
  end

  defp parse(entry) do
    case Quoted.parse(entry) do
      {:ok, quoted} -> {:ok, quoted}
      {:error, _} -> not_a_process(entry)
    end
  end

  # A registered name, or a name tuple whose parts are literals.
  defp name(atom, entry) when is_atom(atom) do
    if atom in [nil, true, false], do: not_a_process(entry), else: {:ok, atom}
  end

  defp name(%Name{} = name, _entry), do: {:ok, name}

  # A bare word is the atom of that name (not `_`, nor `__MODULE__`-like forms).
  defp name({word, _, context}, entry) when is_name(word) and is_atom(context) do
    text = Name.text(word)

    if text == "_" or (String.starts_with?(text, "__") and String.ends_with?(text, "__")),
      do: not_a_process(entry),
      else: {:ok, word}
  end

  defp name({:__aliases__, _, _} = quoted, entry) do
    case alias_literal(quoted) do
      {:ok, alias} -> {:ok, alias}
      :error -> not_a_process(entry)
    end
  end

  defp name({:global, term}, entry) do
    with {:ok, term} <- literal(term, entry), do: {:ok, {:global, term}}
  end

  defp name({:{}, _, [:via, module, term]}, entry) do
    with {:ok, module} <- via_module(module, entry),
         {:ok, term} <- literal(term, entry),
         do: {:ok, {:{}, [], [:via, module, term]}}
  end

  defp name(_quoted, entry), do: not_a_process(entry)

  defp via_module(module, entry) do
    case module do
      atom when is_atom(atom) and atom not in [nil, true, false] ->
        {:ok, atom}

      %Name{} = name ->
        {:ok, name}

      {:__aliases__, _, _} = quoted ->
        with :error <- alias_literal(quoted), do: not_literal(module, entry)

      _ ->
        not_literal(module, entry)
    end
  end

  # `MyApp.Cache` (also `Elixir.MyApp.Cache`), its segments atoms or `Name`s.
  defp alias_literal({:__aliases__, _, segments}) do
    case segments do
      [:"Elixir" | [_ | _] = rest] ->
        alias_literal({:__aliases__, [], rest})

      [_ | _] ->
        if Enum.all?(segments, &is_name/1), do: {:ok, {:__aliases__, [], segments}}, else: :error

      _ ->
        :error
    end
  end

  # The literal parts of a name tuple: atoms, numbers, strings, aliases, and lists and
  # tuples of them. Anything else (a call, a variable, a sigil, `&`, `@`, `__ENV__`,
  # `unquote`, an operator) would run code: refused.
  defp literal(term, _entry) when is_atom(term) or is_number(term) or is_binary(term),
    do: {:ok, term}

  defp literal(%Name{} = name, _entry), do: {:ok, name}
  defp literal({:-, _, [number]}, _entry) when is_number(number), do: {:ok, -number}

  defp literal({:__aliases__, _, _} = quoted, entry) do
    with :error <- alias_literal(quoted), do: not_literal(quoted, entry)
  end

  defp literal({left, right}, entry) do
    with {:ok, [left, right]} <- literals([left, right], entry), do: {:ok, {left, right}}
  end

  defp literal({:{}, _, items}, entry) when is_list(items) do
    with {:ok, items} <- literals(items, entry), do: {:ok, {:{}, [], items}}
  end

  defp literal(list, entry) when is_list(list), do: literals(list, entry)
  defp literal(other, entry), do: not_literal(other, entry)

  defp literals(items, entry), do: map_all(items, &literal(&1, entry))

  defp not_literal(quoted, entry) do
    {:error,
     "#{entry}: a process name must be a literal (atoms, numbers, strings, and lists and " <>
       "tuples of them), got: #{Quoted.to_string(quoted)}"}
  end

  defp not_a_process(entry) do
    {:error,
     "#{inspect(entry)} is not a process: write a registered name (MyApp.Cache or :name), " <>
       "{:global, name}, {:via, module, name} or a pid (#PID<0.123.0>)"}
  end

  defp check_process(entry) do
    {:ok, quoted} = process(entry)

    case term(quoted) do
      {:ok, term} ->
        try do
          KinoTrace.Plan.Options.resolve_pids(term)
          nil
        rescue
          e in ArgumentError ->
            {:error, String.replace_prefix(e.message, "invalid value for :pids: ", "")}
        end

      :no_atom ->
        {:error, "no process is registered as #{Quoted.to_string(quoted)}"}
    end
  end

  # The term a quoted literal stands for, with existing atoms only: `:no_atom` when it
  # needs one that does not exist (then it names no process).
  defp term(quoted) do
    {:ok, to_term(quoted)}
  catch
    :no_atom -> :no_atom
  end

  defp to_term(%Name{}), do: throw(:no_atom)

  defp to_term({:__aliases__, _, segments}),
    do: Name.existing(Name.module_text(segments)) || throw(:no_atom)

  defp to_term({{:., _, [:c, :pid]}, _, [a, b, c]}) do
    :c.pid(a, b, c)
  rescue
    # no pid of this node can have these numbers
    ArgumentError -> throw(:no_atom)
  end

  defp to_term({:{}, _, items}), do: items |> Enum.map(&to_term/1) |> List.to_tuple()
  defp to_term({a, b}), do: {to_term(a), to_term(b)}
  defp to_term(list) when is_list(list), do: Enum.map(list, &to_term/1)
  defp to_term(term), do: term

  ## Nodes

  defp node_name(entry) do
    name = node_text(entry)

    if Regex.match?(@node, name),
      do: {:ok, Name.resolve(name)},
      else: {:error, "#{inspect(entry)} is not a node name: write name@host"}
  end

  defp node_text(entry) do
    entry
    |> String.trim()
    |> String.trim_leading(":")
    |> String.trim("\"")
  end

  ## Splitting

  # Splits at commas outside brackets and quotes; entries are trimmed, blanks dropped.
  defp split(text) do
    {entries, current, _depth, _quote} =
      text
      |> String.graphemes()
      |> Enum.reduce({[], [], 0, false}, fn
        "\"", {entries, current, depth, quote?} ->
          {entries, ["\"" | current], depth, not quote?}

        c, {entries, current, depth, true} ->
          {entries, [c | current], depth, true}

        c, {entries, current, depth, false} when c in ["{", "[", "("] ->
          {entries, [c | current], depth + 1, false}

        c, {entries, current, depth, false} when c in ["}", "]", ")"] ->
          {entries, [c | current], max(depth - 1, 0), false}

        sep, {entries, current, 0, false} when sep in [",", "\n"] ->
          {[current | entries], [], 0, false}

        c, {entries, current, depth, false} ->
          {entries, [c | current], depth, false}
      end)

    [current | entries]
    |> Enum.reverse()
    |> Enum.map(&(&1 |> Enum.reverse() |> Enum.join() |> String.trim()))
    |> Enum.reject(&(&1 == ""))
  end

  defp map_all(entries, fun) do
    Enum.reduce_while(entries, {:ok, []}, fn entry, {:ok, acc} ->
      case fun.(entry) do
        {:ok, code} -> {:cont, {:ok, [code | acc]}}
        {:error, _} = error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, codes} -> {:ok, Enum.reverse(codes)}
      error -> error
    end
  end
end
