defmodule KinoTrace.Pattern.Quoted do
  @moduledoc false
  # Parses pattern text into Elixir's quoted form without creating atoms.
  #
  # `Code.string_to_quoted/2` turns every identifier, alias and atom into an atom.
  # Here, a name whose atom does not exist yet becomes a `KinoTrace.Base.Name`
  # in the quoted form instead, so parsing any text leaves the atom table as it was
  # (see `KinoTrace.Base.Name` for what each kind of name then means).

  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.Edit

  # Placeholders stand for names while `Macro.to_string/1` prints; they exist from
  # the moment this module is loaded, like every other atom of its code.
  @max_names 256
  @placeholders List.to_tuple(for i <- 1..@max_names, do: :"__kino_trace_name_#{i}__")

  @doc """
  Parses `text` (an expression), returning its quoted form with `Name`s for the
  names that are not atoms, or `{:error, message}` for a syntax error.

  At most #{@max_names} distinct new names are allowed in one text, and the text is at
  most the bytes of one pattern (`KinoTrace.Pattern.Edit.check_pattern/1`), checked
  before it is parsed.

  ## Examples

      iex> {:ok, quoted} = KinoTrace.Pattern.Quoted.parse("{:ok, kino_trace_new_var_7c1d}")
      iex> quoted
      {:ok, {%KinoTrace.Base.Name{text: "kino_trace_new_var_7c1d"}, [line: 1], nil}}
      iex> KinoTrace.Pattern.Quoted.to_string(quoted)
      "{:ok, kino_trace_new_var_7c1d}"

      iex> KinoTrace.Pattern.Quoted.parse("{:ok,")
      {:error, "syntax error at column 1: missing terminator: }"}
  """
  @spec parse(String.t()) :: {:ok, Macro.t()} | {:error, String.t()}
  def parse(text) when is_binary(text) do
    with :ok <- Edit.check_pattern(text), do: quote_text(text)
  end

  defp quote_text(text) do
    opts = [
      static_atoms_encoder: &encode/2,
      # Atoms built from interpolation (`:"a#{b}"`) are calls in the quoted
      # form; never evaluated, but refused as unknown rather than created.
      existing_atoms_only: true,
      emit_warnings: false
    ]

    case Code.string_to_quoted(text, opts) do
      {:ok, quoted} ->
        count = quoted |> names(MapSet.new()) |> MapSet.size()

        if count > @max_names,
          do: {:error, "too many new names (#{count}; at most #{@max_names} in one pattern)"},
          else: {:ok, quoted}

      {:error, error} ->
        {:error, syntax_error(error)}
    end
  end

  defp encode(text, _meta), do: {:ok, Name.resolve(text)}

  defp syntax_error({location, message, token}) do
    column = if is_list(location), do: location[:column]
    position = if column, do: " at column #{column}", else: ""
    "syntax error#{position}: #{String.trim(message_text(message))}#{token_text(token)}"
  end

  defp syntax_error(other), do: "syntax error: #{inspect(other)}"

  defp message_text(message) when is_binary(message), do: message
  defp message_text({prefix, suffix}) when is_binary(prefix), do: prefix <> message_text(suffix)
  defp message_text(other), do: inspect(other)

  defp token_text(token) when is_binary(token), do: token
  defp token_text(_), do: ""

  @doc """
  Prints a quoted form that may hold `Name`s, as `Macro.to_string/1` does but
  on one line, however long.

  A part of parsed text may be a form no text prints as on its own (the
  `-> 1` of `(-> 1)`): that is shown as its quoted form.

      iex> KinoTrace.Pattern.Quoted.to_string({:->, [], [[], 1]})
      "{:->, [], [[], 1]}"
  """
  @spec to_string(Macro.t()) :: String.t()
  def to_string(quoted) do
    print(quoted)
  rescue
    _ -> inspect(without_meta(quoted), limit: 20, printable_limit: 200)
  end

  defp without_meta({form, meta, args}) when is_list(meta),
    do: {without_meta(form), [], without_meta(args)}

  defp without_meta(tuple) when is_tuple(tuple),
    do: tuple |> Tuple.to_list() |> Enum.map(&without_meta/1) |> List.to_tuple()

  defp without_meta([head | tail]), do: [without_meta(head) | without_meta(tail)]
  defp without_meta(other), do: other

  defp print(quoted) do
    names = quoted |> names(MapSet.new()) |> Enum.take(@max_names) |> Enum.with_index(1)
    by_name = Map.new(names, fn {name, i} -> {name, elem(@placeholders, i - 1)} end)

    text =
      quoted
      |> replace(by_name)
      |> Code.quoted_to_algebra()
      |> Inspect.Algebra.format(:infinity)
      |> IO.iodata_to_binary()

    Enum.reduce(names, text, fn {name, i}, text ->
      placeholder = Atom.to_string(elem(@placeholders, i - 1))

      text
      |> String.replace(":" <> placeholder, Name.inspect_atom(:literal, name))
      |> String.replace(placeholder, Name.inspect_atom(:remote_call, name))
    end)
  end

  @doc """
  The `Name`s of a quoted form (the names of its text that were not atoms).

      iex> {:ok, quoted} = KinoTrace.Pattern.Quoted.parse("{:ok, kino_trace_new_var_7c1e}")
      iex> KinoTrace.Pattern.Quoted.names(quoted)
      [%KinoTrace.Base.Name{text: "kino_trace_new_var_7c1e"}]
  """
  @spec names(Macro.t()) :: [Name.t()]
  def names(quoted), do: quoted |> names(MapSet.new()) |> MapSet.to_list()

  # Every `Name` in a quoted form (anywhere a term can nest).
  defp names(%Name{} = name, acc), do: MapSet.put(acc, name)
  defp names(tuple, acc) when is_tuple(tuple), do: names(Tuple.to_list(tuple), acc)
  defp names([head | tail], acc), do: names(tail, names(head, acc))
  defp names(_other, acc), do: acc

  defp replace(%Name{} = name, by_name), do: Map.get(by_name, name, :__kino_trace_name__)

  defp replace(tuple, by_name) when is_tuple(tuple),
    do: tuple |> Tuple.to_list() |> replace(by_name) |> List.to_tuple()

  defp replace([head | tail], by_name), do: [replace(head, by_name) | replace(tail, by_name)]
  defp replace(other, _by_name), do: other
end
