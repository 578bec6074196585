defmodule KinoTrace.Base.Name do
  @moduledoc false
  # A name written in a pattern that is not an atom, kept as text.
  #
  # The BEAM never frees atoms, and the atom table is bounded: text typed by a
  # user (a widget, a message pattern, a stats pattern) must not create one atom
  # per new word, or enough typing aborts the VM. Pattern text is parsed so that
  # every identifier, alias and atom that does not exist yet stays a `Name`:
  #
  #   * a variable named by a `Name` works like any other variable
  #   * a module name becomes an atom only when the module really exists: it is
  #     loaded, or its `.beam` file is on the code path (loading it creates the
  #     atom anyway); otherwise it stays a `Name` and the pre-flight check reports
  #     an unknown module
  #   * a function name becomes an atom once its module is loaded (then every
  #     function of it is an atom); a `Name` that remains is not a function
  #   * a literal atom (`:users`, `%{key: _}`) that does not exist is an error: no
  #     term can contain it

  @enforce_keys [:text]
  defstruct [:text]

  @type t :: %__MODULE__{text: String.t()}

  @doc """
  True for an atom or a `Name`: what stands where Elixir's AST has an atom.

  ## Examples

      iex> KinoTrace.Base.Name.resolve("ok")
      :ok
      iex> KinoTrace.Base.Name.resolve("nil")
      nil
      iex> KinoTrace.Base.Name.resolve("kino_trace_no_such_atom_1f3c")
      %KinoTrace.Base.Name{text: "kino_trace_no_such_atom_1f3c"}
      iex> KinoTrace.Base.Name.module_name(["Enum"])
      Enum
      iex> KinoTrace.Base.Name.inspect_module(KinoTrace.Base.Name.module_name(["KinoTraceNoSuchAlias1f3c", "Zz"]))
      "KinoTraceNoSuchAlias1f3c.Zz"
  """
  defguard is_name(term) when is_atom(term) or is_struct(term, __MODULE__)

  @doc "The atom named `text` when it exists, else a `Name`. Never creates an atom."
  @spec resolve(String.t()) :: atom() | t()
  def resolve(text) when is_binary(text) do
    # (not through existing/1, whose nil would be taken for the atom nil's absence;
    # caught as the BIF's error, not rescued: a trace file may hold a million names)
    :erlang.binary_to_existing_atom(text, :utf8)
  catch
    :error, :badarg -> %__MODULE__{text: text}
  end

  @doc "Tries a `Name` again (its atom may exist by now); atoms are returned as they are."
  @spec retry(atom() | t()) :: atom() | t()
  def retry(%__MODULE__{text: text}), do: resolve(text)
  def retry(atom) when is_atom(atom), do: atom

  @doc "The atom named `text` when it exists, else `nil`. Never creates an atom."
  @spec existing(String.t()) :: atom() | nil
  def existing(text) when is_binary(text) do
    String.to_existing_atom(text)
  rescue
    ArgumentError -> nil
  end

  @doc "The text of an atom or a `Name`."
  @spec text(atom() | t()) :: String.t()
  def text(%__MODULE__{text: text}), do: text
  def text(atom) when is_atom(atom), do: Atom.to_string(atom)

  @doc """
  The module named by alias segments (atoms, `Name`s or their texts) or by the
  full text of a module atom (`"Elixir.Foo.Bar"`, `"ets"`): its atom when it
  exists or the module is on the code path, else a `Name` with the full text.
  """
  @spec module_name([atom() | t() | String.t()] | String.t()) :: module() | t()
  def module_name(segments) when is_list(segments), do: segments |> module_text() |> module_name()

  def module_name(text) when is_binary(text) do
    cond do
      atom = existing(text) -> atom
      # The module exists: loading it would create the atom anyway.
      on_code_path?(text) -> String.to_atom(text)
      true -> %__MODULE__{text: text}
    end
  end

  @doc """
  The full text of the module atom named by alias segments (atoms, `Name`s or texts).

      iex> KinoTrace.Base.Name.module_text(["MyApp", %KinoTrace.Base.Name{text: "Repo"}])
      "Elixir.MyApp.Repo"
  """
  @spec module_text([atom() | t() | String.t()]) :: String.t()
  def module_text(segments) when is_list(segments) do
    texts =
      case Enum.map(segments, &segment_text/1) do
        ["Elixir" | [_ | _] = rest] -> rest
        texts -> texts
      end

    if texts == ["Elixir"], do: "Elixir", else: "Elixir." <> Enum.join(texts, ".")
  end

  defp segment_text(text) when is_binary(text), do: text
  defp segment_text(name), do: text(name)

  defp on_code_path?(text) do
    file = beam_file(text)
    file != nil and :code.where_is_file(file) != :non_existing
  end

  @doc """
  The object file name of the module named `text` (`~c"Elixir.Enum.beam"`), to find
  with `:code.where_is_file/1`, or `nil` when `text` cannot name a module file.

      iex> KinoTrace.Base.Name.beam_file("Elixir.Enum")
      ~c"Elixir.Enum.beam"
      iex> KinoTrace.Base.Name.beam_file("../etc")
      nil
  """
  @spec beam_file(String.t()) :: charlist() | nil
  def beam_file(text) when is_binary(text) do
    if byte_size(text) <= 255 and not String.contains?(text, ["/", "\\", <<0>>]),
      do: String.to_charlist(text <> ".beam")
  end

  @doc """
  How a module (an atom or a `Name`) is written: `Enum`, `:ets`.

      iex> KinoTrace.Base.Name.inspect_module(%KinoTrace.Base.Name{text: "no such mod"})
      ~S(:"no such mod")
  """
  @spec inspect_module(module() | t()) :: String.t()
  def inspect_module(module) when is_atom(module), do: inspect(module)

  def inspect_module(%__MODULE__{text: "Elixir." <> alias} = name) do
    if alias?(alias), do: alias, else: ":" <> quoted(name.text)
  end

  def inspect_module(%__MODULE__{text: text}), do: inspect_atom(:literal, text)

  @doc """
  How a name is written as a literal atom (`:literal`: `:foo`, `:"a b"`), or after a
  dot or as a key (`:remote_call`, `:key`: `foo`, `"a b"`). Takes atoms, `Name`s and texts.
  """
  @spec inspect_atom(:literal | :remote_call | :key, atom() | t() | String.t()) :: String.t()
  def inspect_atom(kind, atom) when is_atom(atom), do: Macro.inspect_atom(kind, atom)
  def inspect_atom(kind, %__MODULE__{text: text}), do: inspect_atom(kind, text)

  def inspect_atom(:literal, text) when is_binary(text) do
    if identifier?(text), do: ":" <> text, else: ":" <> quoted(text)
  end

  def inspect_atom(_kind, text) when is_binary(text) do
    if identifier?(text), do: text, else: quoted(text)
  end

  # Written without quotes: a variable or function name, or an alias segment.
  defp identifier?(text),
    do: text =~ ~r/\A([\p{Ll}_][\p{L}\p{N}_@]*[?!]?|\p{Lu}[\p{L}\p{N}_]*)\z/u

  defp alias?(text), do: text =~ ~r/\A\p{Lu}[\p{L}\p{N}_]*(\.\p{Lu}[\p{L}\p{N}_]*)*\z/u
  defp quoted(text), do: inspect(text)
end

# A name stands where an atom this node does not know was (in a pattern, or in a trace
# file's events): it inspects as that atom would.
defimpl Inspect, for: KinoTrace.Base.Name do
  def inspect(%{text: text} = name, _opts) when is_binary(text),
    do: KinoTrace.Base.Name.inspect_module(name)

  def inspect(name, opts), do: Inspect.Any.inspect(name, opts)
end
