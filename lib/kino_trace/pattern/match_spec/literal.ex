defmodule KinoTrace.Pattern.MatchSpec.Literal do
  @moduledoc false
  # Literal terms of a trace pattern, for the head and guard compilers
  # (`KinoTrace.Pattern.MatchSpec.Head`, `.Guard`): binaries and sigils built from
  # their text (never evaluated), aliases, the bound on what a pattern's literals
  # build (`check_sizes/2`), and the messages the compilers share for what they
  # refuse.

  import KinoTrace.Base.Name, only: [is_name: 1]
  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.{Bits, Quoted}

  # `<<1, 2>>`, `<<"abc", 0>>`, `<<1::16>>`, `<<"é"::utf8>>`: only literal
  # segments are allowed (match specs cannot match parts of a binary). Built by
  # `Bits`, never evaluated; its size was bounded by `check_sizes/2` already.
  @spec binary(Macro.t()) :: {:ok, bitstring} | {:error, String.t()}
  def binary({:<<>>, _, _} = ast) do
    case Bits.build(ast, :infinity) do
      {:ok, bitstring} -> {:ok, bitstring}
      {:error, _} = error -> error
    end
  end

  ## Sizes

  # The largest integer that is no bignum (a 64-bit VM's small integers).
  @max_word Bitwise.bsl(1, 59) - 1

  # What the literals of a pattern build, in all, before any is built: its binaries
  # (`<<0::size(n)>>`, whose size the text alone gives), its strings (and the text of
  # its sigils), its integers larger than a machine word, and the integers its guards
  # shift left by a literal amount (`1 <<< n`, evaluated at each traced call). At most
  # `max_bytes`; the first literal that goes over it is the error. Literals that are
  # not valid are left to the compiler, which names them. (The text itself is bounded
  # before it is parsed: `KinoTrace.Pattern.Edit.check_pattern/1`.)
  @doc false
  @spec check_sizes(Macro.t(), pos_integer) :: :ok | {:error, String.t()}
  def check_sizes(ast, max_bytes) do
    case sizes(ast, 0, max_bytes * 8) do
      {:ok, _bits} -> :ok
      {:over, what, total} -> {:error, too_big(what, total, max_bytes)}
    end
  end

  defp sizes({:<<>>, _, segments} = ast, total, max_bits) when is_list(segments) do
    case Bits.size(ast) do
      {:ok, bits} -> add_bits({:binary, ast, bits}, total, max_bits)
      {:error, _} -> sizes(segments, total, max_bits)
    end
  end

  defp sizes({op, _, [left, right]} = ast, total, max_bits) when op in [:<<<, :bsl, :bsr, :>>>] do
    with {:ok, total} <- sizes([left, right], total, max_bits),
         do: shift_bits(op, ast, right, total, max_bits)
  end

  defp sizes({{:., _, [_module, op]}, _, [left, right]} = ast, total, max_bits)
       when op in [:bsl, :bsr] do
    with {:ok, total} <- sizes([left, right], total, max_bits),
         do: shift_bits(op, ast, right, total, max_bits)
  end

  # A call or a variable: its metadata holds no literal.
  defp sizes({form, meta, args}, total, max_bits) when is_list(meta),
    do: sizes([form, args], total, max_bits)

  defp sizes(tuple, total, max_bits) when is_tuple(tuple),
    do: sizes(Tuple.to_list(tuple), total, max_bits)

  defp sizes(string, total, max_bits) when is_binary(string),
    do: add_bits({:string, string, bit_size(string)}, total, max_bits)

  defp sizes(integer, total, max_bits) when is_integer(integer) and abs(integer) > @max_word,
    do:
      add_bits(
        {:integer, integer, 8 * byte_size(:binary.encode_unsigned(abs(integer)))},
        total,
        max_bits
      )

  defp sizes([head | tail], total, max_bits) do
    with {:ok, total} <- sizes(head, total, max_bits), do: sizes(tail, total, max_bits)
  end

  defp sizes(_leaf, total, _max_bits), do: {:ok, total}

  # A shift left (or right by a negative amount) by a literal: the integer it makes
  # has at least that many bits.
  defp shift_bits(op, ast, right, total, max_bits) do
    amount =
      case right do
        n when is_integer(n) -> n
        {:-, _, [n]} when is_integer(n) -> -n
        {:+, _, [n]} when is_integer(n) -> n
        _ -> 0
      end

    bits = if op in [:<<<, :bsl], do: amount, else: -amount
    if bits > 0, do: add_bits({:shift, ast, bits}, total, max_bits), else: {:ok, total}
  end

  defp add_bits({_kind, _ast, bits} = what, total, max_bits) do
    if total + bits > max_bits, do: {:over, what, total + bits}, else: {:ok, total + bits}
  end

  defp too_big({kind, ast, bits}, total, max_bytes) do
    bytes = div(bits + 7, 8)

    what =
      case kind do
        :binary -> "the binary #{Quoted.to_string(ast)} is #{bytes} bytes"
        :string -> "the string #{preview(inspect(ast))} is #{bytes} bytes"
        :integer -> "the integer #{preview(Integer.to_string(ast))} is #{bytes} bytes"
        :shift -> "the shift #{Quoted.to_string(ast)} makes an integer of #{bytes} bytes or more"
      end

    all =
      if total > bits,
        do: ", #{div(total + 7, 8)} bytes with the pattern's other literals",
        else: ""

    "#{what}#{all}: more than the trace's :max_bytes (#{max_bytes} bytes), the bound on " <>
      "what the literals of a pattern may build (pass a larger max_bytes: to allow it)"
  end

  # The start of a long literal's text, for an error.
  defp preview(text) when byte_size(text) <= 40, do: text
  defp preview(text), do: String.slice(text, 0, 32) <> "..."

  # The term a sigil without interpolation stands for: ~s, ~c and ~w (its s, c and a
  # modifiers; ~w(...)a only of atoms that exist).
  @spec sigil(Macro.t()) :: {:ok, term} | {:error, String.t()}
  def sigil({sigil, _, [{:<<>>, _, [text]}, modifiers]} = ast) when is_binary(text) do
    case {sigil, modifiers} do
      {s, []} when s in [:sigil_s, :sigil_S] ->
        {:ok, text}

      {c, []} when c in [:sigil_c, :sigil_C] ->
        {:ok, String.to_charlist(text)}

      {w, []} when w in [:sigil_w, :sigil_W] ->
        {:ok, String.split(text)}

      {w, ~c"s"} when w in [:sigil_w, :sigil_W] ->
        {:ok, String.split(text)}

      {w, ~c"c"} when w in [:sigil_w, :sigil_W] ->
        {:ok, Enum.map(String.split(text), &String.to_charlist/1)}

      {w, ~c"a"} when w in [:sigil_w, :sigil_W] ->
        words = String.split(text)

        case Enum.find(words, &is_nil(Name.existing(&1))) do
          nil -> {:ok, Enum.map(words, &String.to_existing_atom/1)}
          word -> {:error, unknown_atom(Name.inspect_atom(:literal, word))}
        end

      _ ->
        unsupported("sigil", ast)
    end
  end

  def sigil(ast), do: unsupported("sigil with interpolation", ast)

  ## Aliases and errors

  # The module an alias names: its atom when the module exists (see
  # `Name.module_name/1`), else a `Name`. `:error` when it is not a plain alias.
  @doc false
  @spec alias_to_atom([term]) :: {:ok, module | Name.t()} | :error
  def alias_to_atom(parts) do
    if parts != [] and Enum.all?(parts, &is_name/1),
      do: {:ok, Name.module_name(parts)},
      else: :error
  end

  @doc false
  @spec unknown_alias(Name.t()) :: String.t()
  def unknown_alias(name) do
    "unknown module #{Name.inspect_module(name)}: no module or atom of that name exists yet, " <>
      "so no traced term can contain it"
  end

  @doc false
  @spec unknown_atom(String.t()) :: String.t()
  def unknown_atom(written) do
    "unknown atom #{written}: no such atom exists yet, so no traced term can contain it " <>
      "(kino_trace never creates atoms from pattern text; if the atom appears once some code " <>
      "has run or loaded, set the pattern again then)"
  end

  @doc false
  # The error for a construct the compilers refuse: `what`, the text it was written
  # as, and a `hint` when there is a way to say it that is supported.
  @spec unsupported(String.t(), Macro.t(), String.t() | nil) :: {:error, String.t()}
  def unsupported(what, ast, hint \\ nil) do
    message = "#{what} is not supported in trace patterns: #{Quoted.to_string(ast)}"
    {:error, if(hint, do: message <> " (#{hint})", else: message)}
  end
end
