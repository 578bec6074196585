defmodule KinoTrace.Pattern.Bits do
  @moduledoc false
  # Literal bitstrings of pattern text (`<<1, 2>>`, `<<"é"::utf8>>`, `<<0::size(16)>>`),
  # read segment by segment without evaluating anything, and bounded: their size is
  # known from the text before a single byte is built, so `<<0::size(1_000_000_000_000)>>`
  # is an error, not a 125 GB allocation.
  #
  # A segment is an integer, a float or a string literal (a negative number too), with
  # the modifiers Elixir takes after `::`: a type (`integer`, `float`, `bits`/`bitstring`,
  # `binary`/`bytes`, `utf8`, `utf16`, `utf32`), `signed`/`unsigned`, `big`/`little`/
  # `native`, `size(n)`, `unit(n)`, `n` (a size) and `n*m` (size and unit), all literal.
  # What Elixir would refuse is an error here too, naming the segment.

  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.Quoted

  @types %{
    integer: :integer,
    float: :float,
    bits: :bits,
    bitstring: :bits,
    binary: :binary,
    bytes: :binary,
    utf8: :utf8,
    utf16: :utf16,
    utf32: :utf32
  }
  @endians [:big, :little, :native]
  @signs [:signed, :unsigned]
  # Erlang's bound on a segment's unit.
  @max_unit 256

  @doc false
  # The size in bits of the literal bitstring `ast` (a `<<>>` form), from its text
  # alone: `{:ok, bits}`, or `{:error, message}` for a segment that is not a literal
  # Elixir would build. Nothing is built.
  @spec size(Macro.t()) :: {:ok, non_neg_integer} | {:error, String.t()}
  def size({:<<>>, _, segments} = ast) when is_list(segments) do
    Enum.reduce_while(segments, {:ok, 0}, fn segment, {:ok, total} ->
      case read(segment, ast) do
        {:ok, spec} -> {:cont, {:ok, total + spec.bits}}
        error -> {:halt, error}
      end
    end)
  end

  @doc false
  # The bitstring `ast` stands for, when it is at most `max_bits` long (checked before
  # anything is built): `{:ok, bitstring}`, `{:too_big, bits}` or `{:error, message}`.
  @spec build(Macro.t(), non_neg_integer | :infinity) ::
          {:ok, bitstring} | {:too_big, non_neg_integer} | {:error, String.t()}
  def build({:<<>>, _, segments} = ast, max_bits) do
    with {:ok, bits} <- size(ast) do
      if bits > max_bits do
        {:too_big, bits}
      else
        specs =
          Enum.map(segments, fn segment ->
            {:ok, spec} = read(segment, ast)
            spec
          end)

        encode(specs, ast)
      end
    end
  end

  defp encode(specs, ast) do
    specs
    |> Enum.map(&encode_segment/1)
    |> Enum.reduce_while({:ok, []}, fn
      {:ok, bits}, {:ok, acc} -> {:cont, {:ok, [acc | bits]}}
      :error, _ -> {:halt, :error}
    end)
    |> case do
      {:ok, iodata} -> {:ok, :erlang.list_to_bitstring(iodata)}
      :error -> invalid(ast, "a value does not fit its segment's type")
    end
  end

  ## Reading a segment

  # `%{value:, type:, bits:, size:, unit:, endian:}`, with every bound checked.
  defp read({:"::", _, [value, modifiers]} = segment, ast) do
    with {:ok, value} <- value(value, segment, ast),
         {:ok, mods} <- modifiers(modifiers, %{}, segment, ast),
         do: spec(value, mods, segment, ast)
  end

  defp read(value, ast) do
    with {:ok, value} <- value(value, value, ast), do: spec(value, %{}, value, ast)
  end

  defp value(value, _segment, _ast) when is_integer(value) or is_float(value) or is_binary(value),
    do: {:ok, value}

  defp value({:-, _, [number]}, _segment, _ast) when is_number(number), do: {:ok, -number}
  defp value({:+, _, [number]}, _segment, _ast) when is_number(number), do: {:ok, number}

  defp value(_value, _segment, ast), do: not_literal(ast)

  # `a-b-c`, each a type, a sign, an endianness, size(n), unit(n), n or n*m.
  defp modifiers({:-, _, [left, right]}, mods, segment, ast) do
    with {:ok, mods} <- modifiers(left, mods, segment, ast),
         do: modifiers(right, mods, segment, ast)
  end

  defp modifiers({name, _, context}, mods, segment, ast)
       when is_atom(name) and is_atom(context) do
    cond do
      Map.has_key?(@types, name) ->
        put_modifier(mods, :type, Map.fetch!(@types, name), segment, ast)

      name in @endians ->
        put_modifier(mods, :endian, name, segment, ast)

      name in @signs ->
        put_modifier(mods, :sign, name, segment, ast)

      true ->
        invalid(ast, "unknown modifier #{name} in #{Quoted.to_string(segment)}")
    end
  end

  # A word that is no atom yet (`KinoTrace.Base.Name`) is no modifier either.
  defp modifiers({%Name{text: text}, _, context}, _mods, segment, ast) when is_atom(context),
    do: invalid(ast, "unknown modifier #{text} in #{Quoted.to_string(segment)}")

  defp modifiers({:size, _, [size]}, mods, segment, ast),
    do: put_integer(mods, :size, size, segment, ast)

  defp modifiers({:unit, _, [unit]}, mods, segment, ast),
    do: put_integer(mods, :unit, unit, segment, ast)

  defp modifiers({:*, _, [size, unit]}, mods, segment, ast) do
    with {:ok, mods} <- put_integer(mods, :size, size, segment, ast),
         do: put_integer(mods, :unit, unit, segment, ast)
  end

  defp modifiers(size, mods, segment, ast) when is_integer(size),
    do: put_integer(mods, :size, size, segment, ast)

  defp modifiers(_other, _mods, _segment, ast), do: not_literal(ast)

  defp put_integer(mods, key, value, segment, ast) when is_integer(value) and value >= 0 do
    if key == :unit and (value < 1 or value > @max_unit),
      do: invalid(ast, "the unit of #{Quoted.to_string(segment)} must be from 1 to #{@max_unit}"),
      else: put_modifier(mods, key, value, segment, ast)
  end

  defp put_integer(_mods, key, value, segment, ast) when is_integer(value),
    do: invalid(ast, "the #{key} of #{Quoted.to_string(segment)} must not be negative")

  defp put_integer(_mods, _key, _value, _segment, ast), do: not_literal(ast)

  defp put_modifier(mods, key, value, segment, ast) do
    case mods do
      %{^key => _} -> invalid(ast, "#{Quoted.to_string(segment)} has two #{key} modifiers")
      %{} -> {:ok, Map.put(mods, key, value)}
    end
  end

  # The segment's type and size in bits, as Elixir gives them.
  defp spec(value, mods, segment, ast) do
    type = Map.get(mods, :type, default_type(value))
    endian = Map.get(mods, :endian, :big)

    with :ok <- check_type(type, value, segment, ast),
         {:ok, bits} <- bits(type, value, mods, segment, ast) do
      {:ok, %{value: value, type: type, bits: bits, endian: endian}}
    end
  end

  defp default_type(value) when is_integer(value), do: :integer
  defp default_type(value) when is_float(value), do: :float
  defp default_type(value) when is_binary(value), do: :binary

  defp check_type(type, value, _segment, _ast)
       when type in [:integer, :float, :utf8, :utf16, :utf32] and is_integer(value),
       do: :ok

  defp check_type(:float, value, _segment, _ast) when is_float(value), do: :ok

  defp check_type(type, value, _segment, _ast)
       when type in [:binary, :bits, :utf8, :utf16, :utf32] and is_binary(value),
       do: :ok

  defp check_type(type, value, segment, ast),
    do:
      invalid(
        ast,
        "#{Quoted.to_string(segment)}: #{inspect(value)} is not a valid #{type} segment value"
      )

  defp bits(type, value, mods, segment, ast) when type in [:utf8, :utf16, :utf32] do
    cond do
      Map.has_key?(mods, :size) or Map.has_key?(mods, :unit) or Map.has_key?(mods, :sign) ->
        invalid(ast, "#{Quoted.to_string(segment)}: #{type} segments take no size, unit or sign")

      is_integer(value) ->
        utf_bits(type, [value], segment, ast)

      String.valid?(value) ->
        utf_bits(type, String.to_charlist(value), segment, ast)

      true ->
        invalid(ast, "#{Quoted.to_string(segment)}: not valid UTF-8")
    end
  end

  defp bits(type, _value, %{unit: _} = mods, segment, ast)
       when type in [:integer, :float] and not is_map_key(mods, :size),
       do: invalid(ast, "#{Quoted.to_string(segment)}: a unit needs a size")

  defp bits(:integer, _value, mods, _segment, _ast),
    do: {:ok, Map.get(mods, :size, 8) * Map.get(mods, :unit, 1)}

  defp bits(:float, _value, mods, segment, ast) do
    bits = Map.get(mods, :size, 64) * Map.get(mods, :unit, 1)

    if bits in [16, 32, 64],
      do: {:ok, bits},
      else:
        invalid(ast, "#{Quoted.to_string(segment)}: a float is 16, 32 or 64 bits, not #{bits}")
  end

  # As in Elixir, a string literal takes only a type and an endianness: it is whole.
  defp bits(type, value, mods, segment, ast) when type in [:binary, :bits] do
    if Map.has_key?(mods, :size) or Map.has_key?(mods, :unit) or Map.has_key?(mods, :sign),
      do:
        invalid(ast, "#{Quoted.to_string(segment)}: a literal string takes no size, unit or sign"),
      else: {:ok, bit_size(value)}
  end

  defp utf_bits(type, codepoints, segment, ast) do
    Enum.reduce_while(codepoints, {:ok, 0}, fn codepoint, {:ok, total} ->
      case utf_size(type, codepoint) do
        nil ->
          {:halt,
           invalid(ast, "#{Quoted.to_string(segment)}: #{codepoint} is not a Unicode code point")}

        bits ->
          {:cont, {:ok, total + bits}}
      end
    end)
  end

  defp utf_size(_type, c) when c < 0 or c > 0x10FFFF or c in 0xD800..0xDFFF, do: nil
  defp utf_size(:utf8, c) when c < 0x80, do: 8
  defp utf_size(:utf8, c) when c < 0x800, do: 16
  defp utf_size(:utf8, c) when c < 0x10000, do: 24
  defp utf_size(:utf8, _c), do: 32
  defp utf_size(:utf16, c) when c < 0x10000, do: 16
  defp utf_size(:utf16, _c), do: 32
  defp utf_size(:utf32, _c), do: 32

  ## Building a segment (sizes checked already)

  defp encode_segment(%{type: :integer, value: v, bits: n, endian: endian}) do
    {:ok,
     case endian do
       :big -> <<v::size(n)-big>>
       :little -> <<v::size(n)-little>>
       :native -> <<v::size(n)-native>>
     end}
  end

  defp encode_segment(%{type: :float, value: v, bits: n, endian: endian}) do
    {:ok,
     case endian do
       :big -> <<v::float-size(n)-big>>
       :little -> <<v::float-size(n)-little>>
       :native -> <<v::float-size(n)-native>>
     end}
  rescue
    # a float out of range of a 16 or 32 bit float
    ArgumentError -> :error
  end

  defp encode_segment(%{type: type, value: v}) when type in [:binary, :bits], do: {:ok, v}

  defp encode_segment(%{type: type, value: v} = spec) when is_binary(v),
    do: {:ok, Enum.map(String.to_charlist(v), &utf(type, &1, spec.endian))}

  defp encode_segment(%{type: type, value: v, endian: endian}), do: {:ok, utf(type, v, endian)}

  defp utf(:utf8, c, _endian), do: <<c::utf8>>
  defp utf(:utf16, c, :little), do: <<c::utf16-little>>
  defp utf(:utf16, c, :native), do: <<c::utf16-native>>
  defp utf(:utf16, c, :big), do: <<c::utf16-big>>
  defp utf(:utf32, c, :little), do: <<c::utf32-little>>
  defp utf(:utf32, c, :native), do: <<c::utf32-native>>
  defp utf(:utf32, c, :big), do: <<c::utf32-big>>

  # As `KinoTrace.Pattern.MatchSpec` words what it does not support.
  defp not_literal(ast) do
    {:error,
     "a binary with variables is not supported in trace patterns: #{Quoted.to_string(ast)} " <>
       "(match specs can only compare whole binaries; bind a variable and use binary_part/3 " <>
       "or byte_size/1 in a guard)"}
  end

  defp invalid(ast, reason), do: {:error, "invalid binary #{Quoted.to_string(ast)}: #{reason}"}
end
