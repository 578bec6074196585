defmodule KinoTrace.File.Codec do
  @moduledoc false
  # The term encoding of trace files (the "Trace files" guide has the table of tags).
  #
  # A file is untrusted input, so this is kino_trace's own encoding and not the external
  # term format: decoding never creates an atom (a name this node does not know comes
  # back as a `KinoTrace.Base.Name`, as in a pattern), never makes a fun (funs are kept as their printed
  # form), and stays within a budget of items and a nesting depth, so the memory a
  # decoded term takes is bounded by the bytes it came from. Pids, ports and references
  # of a node this node knows by name come back as real ones, built by
  # `:erlang.binary_to_term/2` with `:safe` from bytes checked here, whose only atom is
  # that existing node name.
  #
  # Anything malformed throws `{:bad, reason, rest}` (`rest` is what was left when it
  # was found, for the offset); `decode/2` turns it into `{:error, reason, offset}`.

  import Bitwise

  alias KinoTrace.Base.Name

  @nil_tag 0
  @int 1
  @bigint 2
  @float 3
  @atom 4
  @binary 5
  @bits 6
  @list 7
  @tuple 8
  @map 9
  @ident 10
  @fun 11
  @foreign 12

  # the external term format's tags of what @ident carries
  @pid_ext 88
  @port_ext 89
  @v4_port_ext 120
  @ref_ext 90
  @idents %{@pid_ext => :pid, @port_ext => :port, @v4_port_ext => :port, @ref_ext => :reference}
  @foreign_types %{2 => :pid, 3 => :port, 4 => :reference, 5 => :fun}

  # The deepest a decoded term nests (the native tracer cuts terms much shallower).
  @max_depth 10_000
  # The largest integer, in bytes of magnitude (the native tracer cuts integers of more than
  # its :max_binary bytes).
  @max_bigint 1_048_576

  @typedoc "What decoding may take: at most `items` terms."
  @type budget :: non_neg_integer()

  @doc """
  Encodes `term`.

      iex> alias KinoTrace.File.Codec
      iex> term = {:ok, [1, 2.5, "bin", <<1::3>>], %{a: self()}, -(1 <<< 70)}
      iex> {:ok, ^term, _budget} = term |> Codec.encode() |> IO.iodata_to_binary() |> Codec.decode(100)
  """
  @spec encode(term()) :: iodata()
  def encode([]), do: <<@nil_tag>>

  def encode(i) when is_integer(i) and i >= -(1 <<< 63) and i < 1 <<< 63,
    do: <<@int, i::signed-64>>

  def encode(i) when is_integer(i) do
    mag = :binary.encode_unsigned(abs(i))
    <<@bigint, if(i < 0, do: 1, else: 0), byte_size(mag)::32, mag::binary>>
  end

  def encode(f) when is_float(f), do: <<@float, f::float-64>>
  def encode(a) when is_atom(a), do: atom(Atom.to_string(a))
  def encode(b) when is_binary(b), do: [<<@binary, byte_size(b)::32>>, b]

  def encode(b) when is_bitstring(b) do
    pad = 8 - rem(bit_size(b), 8)
    [<<@bits, bit_size(b)::32>>, <<b::bitstring, 0::size(pad)>>]
  end

  def encode(list) when is_list(list), do: list(list, 0, [])

  def encode(t) when is_tuple(t),
    do: [<<@tuple, tuple_size(t)::32>> | Enum.map(Tuple.to_list(t), &encode/1)]

  def encode(%Name{text: text}) when is_binary(text), do: atom(text)

  def encode(%Kino.Trace.Foreign{type: type, text: text}) when is_binary(text) do
    {code, _} = Enum.find(@foreign_types, fn {_, t} -> t == type end)
    [<<@foreign, code, byte_size(text)::32>>, text]
  end

  def encode(m) when is_map(m) do
    [
      <<@map, map_size(m)::32>>
      | Enum.map(:maps.to_list(m), fn {k, v} -> [encode(k), encode(v)] end)
    ]
  end

  def encode(f) when is_function(f), do: text(@fun, inspect(f))

  def encode(id) when is_pid(id) or is_port(id) or is_reference(id) do
    {tag, pre, node, post} = split_ident(:erlang.term_to_binary(id, minor_version: 2))

    [
      <<@ident, tag, byte_size(pre), pre::binary>>,
      atom(node),
      <<byte_size(post), post::binary>>,
      text(0, inspect(id))
    ]
  end

  @doc "What `encode/1` puts before the `n` encoded elements of a proper list (then `encode([])`)."
  @spec list_head(non_neg_integer()) :: binary()
  def list_head(n), do: <<@list, n::32>>

  defp atom(text), do: [<<@atom, byte_size(text)::32>>, text]
  defp text(tag, text), do: [<<tag, byte_size(text)::32>>, text]

  defp list([h | t], n, acc), do: list(t, n + 1, [encode(h) | acc])
  defp list(tail, n, acc), do: [<<@list, n::32>>, Enum.reverse(acc), encode(tail)]

  # The external format of a pid, port or reference: its tag, what comes before its node's
  # atom (a reference's length), the node's name, and the rest (numbers, creation).
  defp split_ident(<<131, tag, rest::binary>>) when tag in [@pid_ext, @port_ext, @v4_port_ext] do
    {node, post} = ext_atom(rest)
    {tag, <<>>, node, post}
  end

  defp split_ident(<<131, @ref_ext, len::16, rest::binary>>) do
    {node, post} = ext_atom(rest)
    {@ref_ext, <<len::16>>, node, post}
  end

  defp ext_atom(<<119, len, node::binary-size(len), post::binary>>), do: {node, post}
  defp ext_atom(<<118, len::16, node::binary-size(len), post::binary>>), do: {node, post}

  @doc """
  Decodes one term that fills `bin`, with at most `budget` items: `{:ok, term, budget
  left}`, or `{:error, reason, offset}` (the byte offset in `bin`).

      iex> KinoTrace.File.Codec.decode(<<4, 0, 0, 0, 11, "kt_no_such_", 4, 0, 0, 0, 2, "ok">> <> "", 10)
      {:error, "7 bytes after the term", 16}
      iex> KinoTrace.File.Codec.decode(<<4, 0, 0, 0, 11, "kt_no_such_">>, 10)
      {:ok, %KinoTrace.Base.Name{text: "kt_no_such_"}, 9}
      iex> KinoTrace.File.Codec.decode(<<7, 255, 255, 255, 255>>, 10)
      {:error, "a list of 4294967295 elements in 0 bytes", 0}
  """
  @spec decode(binary(), budget()) ::
          {:ok, term(), budget()} | {:error, String.t(), non_neg_integer()}
  def decode(bin, budget) when is_binary(bin) do
    case term(bin, budget, 0) do
      {term, <<>>, left} ->
        {:ok, term, left}

      {_term, rest, _left} ->
        {:error, "#{byte_size(rest)} bytes after the term", byte_size(bin) - byte_size(rest)}
    end
  catch
    {:bad, reason, rest} -> {:error, reason, byte_size(bin) - byte_size(rest)}
  end

  defp term(bin, 0, _depth), do: throw({:bad, "more terms than the caps allow (max_bytes:)", bin})

  defp term(bin, _budget, @max_depth),
    do: throw({:bad, "terms nested deeper than #{@max_depth}", bin})

  defp term(<<@nil_tag, rest::binary>>, b, _d), do: {[], rest, b - 1}
  defp term(<<@int, i::signed-64, rest::binary>>, b, _d), do: {i, rest, b - 1}

  defp term(<<@bigint, sign, len::32, rest::binary>> = bin, b, _d) when sign in [0, 1] do
    if len > @max_bigint, do: throw({:bad, "an integer of #{len} bytes", bin})
    {mag, rest} = take(rest, len, bin)
    i = :binary.decode_unsigned(mag)
    # (a budget item per machine word it takes)
    {if(sign == 1, do: -i, else: i), rest, spend(b, 1 + div(len, 8), bin)}
  end

  defp term(<<@float, f::float-64, rest::binary>>, b, _d), do: {f, rest, b - 1}

  defp term(<<@atom, len::32, rest::binary>> = bin, b, _d) do
    if len > 1020, do: throw({:bad, "an atom name of #{len} bytes", bin})
    {name, rest} = take(rest, len, bin)
    {existing_atom(name, bin), rest, b - 1}
  end

  defp term(<<@binary, len::32, rest::binary>> = bin, b, _d) do
    {data, rest} = take(rest, len, bin)
    # a copy, so a small binary does not keep the whole frame alive
    {:binary.copy(data), rest, spend(b, 1 + div(len, 64), bin)}
  end

  defp term(<<@bits, bits::32, rest::binary>> = bin, b, _d) do
    {data, rest} = take(rest, div(bits + 7, 8), bin)
    <<value::bitstring-size(^bits), _::bitstring>> = data
    {value, rest, spend(b, 1 + div(bits, 512), bin)}
  end

  defp term(<<@list, n::32, rest::binary>> = bin, b, d) do
    # every element takes a byte at least: a count beyond what is left is a lie
    if n > byte_size(rest),
      do: throw({:bad, "a list of #{n} elements in #{byte_size(rest)} bytes", bin})

    {elems, rest, b} = many(rest, n, spend(b, 1, bin), d + 1, [])
    {tail, rest, b} = term(rest, b, d + 1)
    {elems ++ tail, rest, b}
  end

  defp term(<<@tuple, n::32, rest::binary>> = bin, b, d) do
    if n > byte_size(rest),
      do: throw({:bad, "a tuple of #{n} elements in #{byte_size(rest)} bytes", bin})

    {elems, rest, b} = many(rest, n, spend(b, 1, bin), d + 1, [])
    {List.to_tuple(elems), rest, b}
  end

  defp term(<<@map, n::32, rest::binary>> = bin, b, d) do
    if 2 * n > byte_size(rest),
      do: throw({:bad, "a map of #{n} keys in #{byte_size(rest)} bytes", bin})

    {elems, rest, b} = many(rest, 2 * n, spend(b, 1, bin), d + 1, [])
    {elems |> Enum.chunk_every(2) |> Map.new(fn [k, v] -> {k, v} end), rest, b}
  end

  defp term(<<@ident, tag, pre_len, rest::binary>> = bin, b, _d) do
    type = Map.get(@idents, tag) || throw({:bad, "an unknown kind of identifier (#{tag})", bin})
    {pre, rest} = take(rest, pre_len, bin)
    {node, rest} = atom_text(rest, bin)
    <<post_len, rest::binary>> = need(rest, 1, bin)
    {post, rest} = take(rest, post_len, bin)
    {text, rest} = text_of(rest, 0, bin)
    {ident(type, tag, pre, node, post, text, bin), rest, b - 1}
  end

  defp term(<<@fun, _::binary>> = bin, b, _d) do
    {text, rest} = text_of(bin, @fun, bin)
    {%Kino.Trace.Foreign{type: :fun, text: text}, rest, b - 1}
  end

  defp term(<<@foreign, code, len::32, rest::binary>> = bin, b, _d) do
    type =
      Map.get(@foreign_types, code) ||
        throw({:bad, "an unknown kind of foreign term (#{code})", bin})

    if len > 4096, do: throw({:bad, "a foreign term's text of #{len} bytes", bin})
    {text, rest} = take(rest, len, bin)
    {%Kino.Trace.Foreign{type: type, text: :binary.copy(text)}, rest, b - 1}
  end

  defp term(<<tag, _::binary>> = bin, _b, _d) when tag > @foreign,
    do: throw({:bad, "an unknown tag #{tag}", bin})

  defp term(bin, _b, _d), do: throw({:bad, "a term cut short", bin})

  defp many(rest, 0, b, _d, acc), do: {Enum.reverse(acc), rest, b}

  defp many(rest, n, b, d, acc) do
    {t, rest, b} = term(rest, b, d)
    many(rest, n - 1, b, d, [t | acc])
  end

  defp spend(b, cost, _bin) when b > cost, do: b - cost

  defp spend(_b, _cost, bin),
    do: throw({:bad, "more terms than the caps allow (max_bytes:)", bin})

  defp take(rest, len, _bin) when byte_size(rest) >= len do
    <<data::binary-size(^len), rest::binary>> = rest
    {data, rest}
  end

  defp take(_rest, len, bin), do: throw({:bad, "#{len} bytes announced, fewer left", bin})

  defp need(rest, n, bin) when byte_size(rest) < n, do: throw({:bad, "a term cut short", bin})
  defp need(rest, _n, _bin), do: rest

  defp atom_text(<<@atom, len::32, rest::binary>>, bin) when len <= 1020, do: take(rest, len, bin)
  defp atom_text(_rest, bin), do: throw({:bad, "an identifier without its node's name", bin})

  defp text_of(<<_tag, len::32, rest::binary>>, _tag_expected, bin) when len <= 4096 do
    {text, rest} = take(rest, len, bin)
    {:binary.copy(text), rest}
  end

  defp text_of(_rest, _tag, bin),
    do: throw({:bad, "an identifier's text cut short or too long", bin})

  # Never creates an atom: an atom this node does not know stays a name
  # (`KinoTrace.Base.Name`, as in a pattern).
  defp existing_atom(name, bin) do
    case Name.resolve(name) do
      atom when is_atom(atom) ->
        atom

      _name ->
        if utf8?(name),
          do: %Name{text: :binary.copy(name)},
          else: throw({:bad, "an atom name that is not UTF-8", bin})
    end
  end

  # (:unicode's check, in C: a file may hold a million names)
  defp utf8?(text), do: is_binary(:unicode.characters_to_binary(text))

  # A pid, port or reference of a node this node knows by name is itself (built from the
  # external format, whose only atom is that name); else its printed form.
  defp ident(type, tag, pre, node, post, text, bin) do
    case existing_atom(node, bin) do
      node_atom when is_atom(node_atom) and byte_size(post) <= 32 ->
        ext = <<131, tag, pre::binary, ext_node(node)::binary, post::binary>>

        try do
          term = :erlang.binary_to_term(ext, [:safe])
          if ident_type(term) == type, do: term, else: throw({:bad, "a malformed #{type}", bin})
        rescue
          ArgumentError -> throw({:bad, "a malformed #{type}", bin})
        end

      _ ->
        %Kino.Trace.Foreign{type: type, text: text}
    end
  end

  defp ext_node(node) when byte_size(node) < 256, do: <<119, byte_size(node), node::binary>>
  defp ext_node(node), do: <<118, byte_size(node)::16, node::binary>>

  defp ident_type(t) when is_pid(t), do: :pid
  defp ident_type(t) when is_port(t), do: :port
  defp ident_type(t) when is_reference(t), do: :reference
  defp ident_type(_t), do: nil
end
