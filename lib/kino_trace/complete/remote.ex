defmodule KinoTrace.Complete.Remote do
  @moduledoc false
  # What `KinoTrace.Complete` knows of another node's modules, read there with plain OTP
  # calls (that node needs neither kino_trace nor Elixir), each bounded by @timeout: a
  # node that does not answer in time, or is gone, has no completions.
  #
  # Atoms: module names come as text (`:code.all_available/0` gives charlists) and an
  # object file's exports are read here from its bytes (`KinoTrace.Complete.Beam`), so
  # neither makes an atom. Only a module loaded there without an object file is asked for
  # its exports by its atom, which then exists on that node already.

  @timeout 2_000

  @doc "The full names of that node's modules (loaded or on its code path) starting with `prefix`, sorted."
  @spec matching(node(), String.t()) :: [String.t()]
  def matching(node, prefix) do
    case call(node, :code, :all_available, []) do
      {:ok, available} when is_list(available) ->
        for(
          {name, _file, _loaded} <- available,
          name = to_text(name),
          String.starts_with?(name, prefix),
          do: name
        )
        |> Enum.sort()
        |> Enum.dedup()

      _ ->
        []
    end
  end

  @doc "The exported `{name, arity}` of the module named `name` on that node, or `[]`."
  @spec exports(node(), String.t()) :: [{String.t(), arity()}]
  def exports(node, name) do
    with {:ok, path} when is_list(path) <-
           call(node, :code, :where_is_file, [String.to_charlist(name <> ".beam")]),
         {:ok, {:ok, binary}} <- call(node, :file, :read_file, [path]),
         {:ok, ^name, exports} <- KinoTrace.Complete.Beam.exports(binary) do
      exports
    else
      _ -> loaded_exports(node, name)
    end
  end

  # A module loaded there with no object file (sent with :code.load_binary/3, say).
  defp loaded_exports(node, name) do
    with {:ok, module} when is_atom(module) <-
           call(node, :erlang, :binary_to_existing_atom, [name, :utf8]),
         {:ok, true} <- call(node, :erlang, :module_loaded, [module]),
         {:ok, exports} when is_list(exports) <-
           call(node, :erlang, :get_module_info, [module, :exports]) do
      for {function, arity} <- exports, do: {Atom.to_string(function), arity}
    else
      _ -> []
    end
  end

  defp call(node, m, f, a) do
    {:ok, :erpc.call(node, m, f, a, @timeout)}
  catch
    _, _ -> :error
  end

  defp to_text(name) when is_list(name), do: List.to_string(name)
  defp to_text(name) when is_atom(name), do: Atom.to_string(name)
end
