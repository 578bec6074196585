defmodule Kino.Trace.SmartCell.Names do
  @moduledoc """
  Reads the smart cell's text fields of processes and nodes into the code they stand
  for, without creating atoms.

  Processes are written as a user would in code, comma-separated: a registered name
  (`MyApp.Cache`, `:my_server`, or `my_server`), `{:global, name}`, `{:via, module,
  name}`, or a pid as `inspect/1` shows it (`#PID<0.123.0>`, also `<0.123.0>` or
  `pid("0.123.0")`). Each becomes a piece of Elixir code; a pid becomes
  `:c.pid(0, 123, 0)`, which needs no IEx helper.

      iex> Kino.Trace.SmartCell.Names.processes("MyApp.Cache, my_server, #PID<0.123.0>")
      {:ok, ["MyApp.Cache", ":my_server", ":c.pid(0, 123, 0)"]}
      iex> Kino.Trace.SmartCell.Names.processes("{:global, {:cache, 1}}")
      {:ok, ["{:global, {:cache, 1}}"]}
      iex> Kino.Trace.SmartCell.Names.processes("1 + 1")
      {:error, "\\"1 + 1\\" is not a process: write a registered name (MyApp.Cache or :name), {:global, name}, {:via, module, name} or a pid (#PID<0.123.0>)"}

  Nodes are names such as `app@host`, with or without a leading `:` or quotes:

      iex> Kino.Trace.SmartCell.Names.nodes("app@host, :\\"worker@10.0.0.2\\"")
      {:ok, [":app@host", ":\\"worker@10.0.0.2\\""]}
  """

  @pid ~r/^(?:#PID<|<|pid\(\s*"|:c\.pid\(\s*)(\d+)[.,]\s*(\d+)[.,]\s*(\d+)(?:>|"\s*\)|\s*\))$/
  @alias ~r/^(?:Elixir\.)?[A-Z][A-Za-z0-9_]*(?:\.[A-Z][A-Za-z0-9_]*)*$/
  @atom ~r/^:?([a-z_][A-Za-z0-9_@]*[?!]?)$/
  @quoted_atom ~r/^:"((?:[^"\\]|\\.)*)"$/
  @name_tuple ~r/^\{\s*:(?:global|via)\s*,/

  @doc """
  The code of each process in `text` (comma-separated), in order, or `{:error,
  message}` naming the first entry that is no process.
  """
  @spec processes(String.t()) :: {:ok, [String.t()]} | {:error, String.t()}
  def processes(text) when is_binary(text) do
    text |> split() |> map_all(&process/1)
  end

  @doc """
  The code of each node name in `text` (separated by commas or spaces), or `{:error,
  message}` naming the first bad one.
  """
  @spec nodes(String.t()) :: {:ok, [String.t()]} | {:error, String.t()}
  def nodes(text) when is_binary(text) do
    text
    |> String.split([",", " ", "\n", "\t"], trim: true)
    |> map_all(&node_name/1)
  end

  @doc """
  Looks the processes of `text` up on this node, as the trace will when it starts:
  `:ok`, or `{:error, message}` for the first that names no live process. Only atoms
  that exist are looked up: a name whose atom does not exist names no process.

      iex> Kino.Trace.SmartCell.Names.check_processes(":kino_trace_nobody_3f1")
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
      known = Enum.map([node() | Node.list()], &Atom.to_string/1)

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
    cond do
      match = Regex.run(@pid, entry, capture: :all_but_first) ->
        {:ok, ":c.pid(#{Enum.join(Enum.map(match, &String.to_integer/1), ", ")})"}

      Regex.match?(@alias, entry) ->
        {:ok, String.replace_prefix(entry, "Elixir.", "")}

      match = Regex.run(@atom, entry, capture: :all_but_first) ->
        {:ok, ":" <> hd(match)}

      Regex.match?(@quoted_atom, entry) ->
        {:ok, entry}

      Regex.match?(@name_tuple, entry) and literal?(entry) ->
        {:ok, entry}

      true ->
        {:error,
         "#{inspect(entry)} is not a process: write a registered name (MyApp.Cache or :name), " <>
           "{:global, name}, {:via, module, name} or a pid (#PID<0.123.0>)"}
    end
  end

  # A literal term (a name tuple), read without creating atoms: one that needs a new
  # atom cannot name a registered process, so it reads as not registered.
  defp literal?(entry) do
    case Code.string_to_quoted(entry, existing_atoms_only: true) do
      {:ok, quoted} -> literal_quoted?(quoted)
      {:error, {_, message, _}} when is_binary(message) -> String.contains?(message, "atom")
      {:error, _} -> false
    end
  end

  defp literal_quoted?({:__aliases__, _, parts}), do: Enum.all?(parts, &is_atom/1)
  defp literal_quoted?({:{}, _, items}), do: Enum.all?(items, &literal_quoted?/1)
  defp literal_quoted?({a, b}), do: literal_quoted?(a) and literal_quoted?(b)
  defp literal_quoted?(list) when is_list(list), do: Enum.all?(list, &literal_quoted?/1)
  defp literal_quoted?(term), do: is_atom(term) or is_number(term) or is_binary(term)

  defp check_process(entry) do
    case term(entry) do
      {:ok, term} ->
        try do
          Kino.Trace.Options.resolve_pids(term)
          nil
        rescue
          e in ArgumentError ->
            {:error, String.replace_prefix(e.message, "invalid value for :pids: ", "")}
        end

      :no_atom ->
        {:error, "no process is registered as #{entry_code(entry)}"}
    end
  end

  # The term an entry stands for, with existing atoms only.
  defp term(entry) do
    {:ok, code} = process(entry)

    case Regex.run(@pid, entry, capture: :all_but_first) do
      [a, b, c] ->
        {:ok, :c.pid(String.to_integer(a), String.to_integer(b), String.to_integer(c))}

      nil ->
        code = if Regex.match?(@alias, code), do: "Elixir." <> code, else: code

        case Code.string_to_quoted(alias_as_atom(code), existing_atoms_only: true) do
          {:ok, quoted} -> {:ok, to_term(quoted)}
          {:error, _} -> :no_atom
        end
    end
  rescue
    ArgumentError -> :no_atom
  end

  defp alias_as_atom("Elixir." <> _ = code), do: ":\"" <> code <> "\""
  defp alias_as_atom(code), do: code

  defp to_term({:__aliases__, _, parts}), do: Module.concat(parts)
  defp to_term({:{}, _, items}), do: items |> Enum.map(&to_term/1) |> List.to_tuple()
  defp to_term({a, b}), do: {to_term(a), to_term(b)}
  defp to_term(list) when is_list(list), do: Enum.map(list, &to_term/1)
  defp to_term(term), do: term

  defp entry_code(entry) do
    {:ok, code} = process(entry)
    code
  end

  ## Nodes

  defp node_name(entry) do
    name = node_text(entry)

    if Regex.match?(~r/^[A-Za-z0-9_\-.]+@[A-Za-z0-9_\-.]+$/, name) do
      {:ok, atom_code(name)}
    else
      {:error, "#{inspect(entry)} is not a node name: write name@host"}
    end
  end

  defp node_text(entry) do
    entry
    |> String.trim()
    |> String.trim_leading(":")
    |> String.trim("\"")
  end

  defp atom_code(name) do
    if Regex.match?(~r/^[a-z_][A-Za-z0-9_@]*$/, name), do: ":" <> name, else: ":" <> inspect(name)
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
