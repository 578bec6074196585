defmodule KinoTrace.Complete.Modules do
  @moduledoc false
  # The modules completion offers and their exported functions, all as text.
  #
  # A module is offered when it is loaded, or when its object file is in a directory of
  # the code path (then it is not loaded, and no atom is made for it: the directory's
  # file names are kept as text, and its exports are read from the file with
  # `KinoTrace.Complete.Beam`).
  #
  # What the code path holds is cached per directory, and checked against the
  # directory's modification time and size at most once a second; exports read from a file are
  # cached per file, against its modification time and size (a directory or file changed
  # in the last second is read again each time: times count whole seconds). The cache is a table made
  # by kino_trace's application (named after this module); without it (the application not
  # started) nothing is cached and the answers are the same.

  @table __MODULE__
  # Object files whose exports are kept; the table is emptied when there are more.
  @max_files 4_096
  # How long what a code path directory holds is taken as known without a look.
  @recheck_ms 1_000

  @doc """
  Reads what every code path directory holds into the cache, so that the first
  completion need not: listing a directory of thousands of files takes tens of
  milliseconds. The widget calls it, in a process of its own, when it starts.

  ## Examples

      iex> "Elixir.Enum" in KinoTrace.Complete.Modules.matching("Elixir.En")
      true
      iex> {"insert_new", 2} in KinoTrace.Complete.Modules.exports("ets")
      true
      iex> KinoTrace.Complete.Modules.exports("Elixir.KinoTraceNoSuchModule4d1")
      []
  """
  @spec warm() :: :ok
  def warm do
    Enum.each(code_path(), &dir_modules/1)
  end

  @doc """
  `warm/0` in a short-lived process of kino_trace's own (registered before it runs, so
  no trace records it). kino_trace's application calls it when it starts, and the
  widget when it opens: the first completion then finds the code path already read.
  """
  @spec warm_async() :: :ok
  def warm_async do
    pid =
      spawn(fn ->
        receive do
          :go -> warm()
        end
      end)

    KinoTrace.Internal.register(pid)
    send(pid, :go)
    :ok
  end

  @doc """
  The full names (`"Elixir.Enum"`, `"ets"`) of the loaded modules and of those on the
  code path that start with `prefix`, sorted, without duplicates.
  """
  @spec matching(String.t()) :: [String.t()]
  def matching(prefix) when is_binary(prefix) do
    loaded =
      for module <- :erlang.loaded(),
          name = Atom.to_string(module),
          String.starts_with?(name, prefix),
          do: name

    on_path = for dir <- code_path(), do: starting_with(dir_modules(dir), prefix)
    :lists.umerge([Enum.sort(loaded) | on_path])
  end

  # The names in a sorted tuple that start with `prefix`: they follow each other,
  # from the first name not below `prefix`.
  defp starting_with(names, prefix) do
    names |> first_not_below(prefix, 0, tuple_size(names)) |> take_prefixed(names, prefix, [])
  end

  defp first_not_below(_names, _prefix, low, low), do: low

  defp first_not_below(names, prefix, low, high) do
    middle = div(low + high, 2)

    if elem(names, middle) < prefix,
      do: first_not_below(names, prefix, middle + 1, high),
      else: first_not_below(names, prefix, low, middle)
  end

  defp has?(names, name) do
    index = first_not_below(names, name, 0, tuple_size(names))
    index < tuple_size(names) and elem(names, index) == name
  end

  defp take_prefixed(index, names, prefix, acc) do
    if index < tuple_size(names) and String.starts_with?(elem(names, index), prefix),
      do: take_prefixed(index + 1, names, prefix, [elem(names, index) | acc]),
      else: Enum.reverse(acc)
  end

  @doc """
  The exported `{name, arity}` of the module named `name` (its full name, as text), or
  `[]` when there is no such module. A loaded module answers from the VM; one that is
  only on the code path from its object file, which is not loaded.
  """
  @spec exports(String.t()) :: [{String.t(), arity()}]
  def exports(name) when is_binary(name) do
    case loaded(name) do
      nil ->
        file_exports(name)

      module ->
        for {function, arity} <- module.module_info(:exports),
            do: {Atom.to_string(function), arity}
    end
  end

  # The module's atom when it exists and the module is loaded. Never makes an atom.
  defp loaded(name) do
    module = KinoTrace.Base.Name.existing(name)
    if module && :erlang.module_loaded(module), do: module
  end

  # The first object file of that name on the code path, as the code server would
  # load it.
  defp file_exports(name) do
    case Enum.find(code_path(), &has?(dir_modules(&1), name)) do
      nil -> []
      dir -> dir |> Path.join(name <> ".beam") |> beam_exports(name)
    end
  end

  defp beam_exports(path, name) do
    stamp = stamp(path)

    case cached({:file, path}, stamp) do
      {:ok, exports} ->
        exports

      :miss ->
        exports =
          with {:ok, binary} <- File.read(path),
               {:ok, ^name, exports} <- KinoTrace.Complete.Beam.exports(binary) do
            exports
          else
            _ -> []
          end

        store({:file, path}, stamp, exports)
    end
  end

  defp code_path, do: Enum.map(:code.get_path(), &List.to_string/1)

  # The module names of a code path directory (its `.beam` files' names), as a sorted
  # tuple. A directory
  # looked at less than @recheck_ms ago is not looked at again.
  defp dir_modules(dir) do
    now = System.monotonic_time(:millisecond)

    case recent(dir, now) do
      {:ok, names} ->
        names

      :miss ->
        stamp = stamp(dir)

        case cached({:dir, dir}, stamp) do
          {:ok, names} ->
            store({:dir, dir}, stamp, names, now)

          :miss ->
            names =
              case stamp && File.ls(dir) do
                {:ok, files} ->
                  files |> Enum.flat_map(&beam_name/1) |> Enum.sort() |> List.to_tuple()

                _ ->
                  {}
              end

            store({:dir, dir}, stamp, names, now)
        end
    end
  end

  defp recent(dir, now) do
    case :ets.whereis(@table) != :undefined and :ets.lookup(@table, {:dir, dir}) do
      [{_key, _stamp, names, checked}] when now - checked < @recheck_ms -> {:ok, names}
      _ -> :miss
    end
  rescue
    ArgumentError -> :miss
  end

  defp beam_name(file) when byte_size(file) > 5 do
    size = byte_size(file) - 5

    case file do
      <<name::binary-size(^size), ".beam">> -> [name]
      _ -> []
    end
  end

  defp beam_name(_file), do: []

  # What changes when a directory gains or loses a file, or a file is rewritten.
  defp stamp(path) do
    case File.stat(path, time: :posix) do
      {:ok, %File.Stat{mtime: mtime, size: size}} -> {mtime, size}
      {:error, _} -> nil
    end
  end

  defp cached(key, stamp) do
    case :ets.whereis(@table) != :undefined and :ets.lookup(@table, key) do
      [{^key, ^stamp, value, _checked}] -> {:ok, value}
      _ -> :miss
    end
  rescue
    ArgumentError -> :miss
  end

  # Kept only once the stamp is in the past: a file written later in the same second
  # would not change a modification time counted in seconds.
  defp store(key, stamp, value, checked \\ nil) do
    if settled?(stamp) and :ets.whereis(@table) != :undefined do
      if :ets.info(@table, :size) >= @max_files, do: :ets.delete_all_objects(@table)
      :ets.insert(@table, {key, stamp, value, checked})
    end

    value
  rescue
    # The table went away with the application: nothing to cache in.
    ArgumentError -> value
  end

  defp settled?({mtime, _size}), do: mtime < System.os_time(:second)
  defp settled?(nil), do: false
end
