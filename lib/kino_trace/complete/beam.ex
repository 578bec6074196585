defmodule KinoTrace.Complete.Beam do
  @moduledoc false
  # Reads the name and the exported functions of a `.beam` file as text, without loading
  # it and without creating an atom.
  #
  # `:beam_lib` turns every name it reads into an atom; completion reads the object
  # files of modules that are only on the code path, and a VM's atom table is never
  # freed, so this reads the file's chunks itself: the atom table (`"AtU8"`, or the
  # older latin-1 `"Atom"`) and the export table (`"ExpT"`). Compressed object files
  # (`compile` option `:compressed`) are read too. The atom table may give its lengths
  # as single bytes (OTP 27 and older) or in the compact form newer compilers use (a
  # negative count).

  @doc """
  The module name and the exported `{name, arity}` of an object file's contents, all as
  text, or `:error` when it is not a BEAM file this can read.

  ## Examples

      iex> {:ok, binary} = File.read(:code.which(:lists))
      iex> {:ok, "lists", exports} = KinoTrace.Complete.Beam.exports(binary)
      iex> {"reverse", 2} in exports
      true
      iex> KinoTrace.Complete.Beam.exports("not a beam")
      :error
  """
  @spec exports(binary()) :: {:ok, String.t(), [{String.t(), arity()}]} | :error
  def exports(<<31, 139, _::binary>> = gzipped) do
    exports(:zlib.gunzip(gzipped))
  rescue
    _ -> :error
  end

  # The container's size must be the bytes that follow it: a file cut short at a chunk's
  # end would otherwise read as a whole one with fewer chunks.
  def exports(<<"FOR1", size::32, "BEAM", chunks::binary>>) when size == byte_size(chunks) + 4 do
    with {:ok, found} <- chunks(chunks, %{}),
         {:ok, atoms} <- atoms(found),
         {:ok, exports} <- export_table(Map.get(found, "ExpT"), atoms) do
      {:ok, elem(atoms, 0), exports}
    end
  end

  def exports(_other), do: :error

  # The chunks this needs, by id: a chunk is a 4-byte id, a 32-bit size and the data,
  # padded to a multiple of 4 bytes.
  defp chunks(<<>>, found), do: {:ok, found}

  defp chunks(<<id::binary-4, size::32, data::binary-size(size), rest::binary>>, found) do
    padding = rem(4 - rem(size, 4), 4)
    found = if id in ["AtU8", "Atom", "ExpT"], do: Map.put(found, id, data), else: found

    case rest do
      <<_::binary-size(^padding), rest::binary>> -> chunks(rest, found)
      _ -> {:ok, found}
    end
  end

  defp chunks(_truncated, _found), do: :error

  # The atom table as a tuple of texts: element 0 is the module's name.
  defp atoms(%{"AtU8" => <<count::signed-32, table::binary>>}),
    do: atom_table(table, count, :utf8)

  defp atoms(%{"Atom" => <<count::signed-32, table::binary>>}),
    do: atom_table(table, count, :latin1)

  defp atoms(_found), do: :error

  defp atom_table(table, count, encoding) when count > 0,
    do: read_atoms(table, count, &byte_length/1, encoding, [])

  # A negative count: the lengths are in the compact term encoding.
  defp atom_table(table, count, encoding) when count < 0,
    do: read_atoms(table, -count, &compact_length/1, encoding, [])

  defp atom_table(_table, _count, _encoding), do: :error

  defp read_atoms(_table, 0, _length, _encoding, acc),
    do: {:ok, acc |> Enum.reverse() |> List.to_tuple()}

  defp read_atoms(table, n, length, encoding, acc) do
    with {:ok, size, rest} <- length.(table),
         <<name::binary-size(^size), rest::binary>> <- rest,
         {:ok, text} <- text(name, encoding) do
      read_atoms(rest, n - 1, length, encoding, [text | acc])
    else
      _ -> :error
    end
  end

  defp byte_length(<<size, rest::binary>>), do: {:ok, size, rest}
  defp byte_length(_), do: :error

  # An unsigned integer (tag 0) in the compact term encoding: 4 bits of value, or 11
  # bits over two bytes. An atom is at most 255 characters, 1 020 bytes.
  defp compact_length(<<size::4, 0::1, 0::3, rest::binary>>), do: {:ok, size, rest}

  defp compact_length(<<high::3, 0::1, 1::1, 0::3, low, rest::binary>>),
    do: {:ok, high * 256 + low, rest}

  defp compact_length(_), do: :error

  defp text(name, :utf8), do: if(String.valid?(name), do: {:ok, name}, else: :error)

  defp text(name, :latin1) do
    case :unicode.characters_to_binary(name, :latin1) do
      text when is_binary(text) -> {:ok, text}
      _ -> :error
    end
  end

  # Entries are the function's index in the atom table (from 1), its arity and its label.
  defp export_table(<<count::32, entries::binary>>, atoms)
       when byte_size(entries) == count * 12 do
    size = tuple_size(atoms)

    exports =
      for <<name::32, arity::32, _label::32 <- entries>>, name in 1..size//1 do
        {elem(atoms, name - 1), arity}
      end

    if length(exports) == count, do: {:ok, exports}, else: :error
  end

  defp export_table(_chunk, _atoms), do: :error
end
