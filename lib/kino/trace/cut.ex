defmodule Kino.Trace.Cut do
  @moduledoc """
  Marks the part of a traced term that was too large to copy.

  The native tracer copies arguments, return values and messages out of the traced
  process within caps (nesting depth, items per collection, bytes per binary, bytes per
  event). Where it stops, the decoded term holds a `Kino.Trace.Cut`:

    * `kind: :depth` - a term nested too deep (`value` and `size` are `nil`)
    * `kind: :bytes` - the event's byte budget ran out here
    * `kind: :items` - the last element of a list that had more elements than kept
    * `kind: :binary` - a binary cut short: `value` holds the first bytes, `size` the full size
    * `kind: :tuple` - a tuple with too many elements: `value` is the list of the first
      elements, `size` the tuple's arity
    * `kind: :map` - a map with too many keys: `value` is a map of some of them, `size` the
      map's size. A struct with more fields than kept is such a map, with its
      `:__struct__` key (the first kept key of a struct of up to 32 fields): it shows as
      the struct, `%MyApp.State{cells: [...], ...}`, whether or not its module exists on
      this node
    * `kind: :bitstring` - a bitstring (not a whole number of bytes) cut short: `value`
      holds its first whole bytes, `size` its full size in bits
    * `kind: :integer` - an integer too large to copy: `value` is its leading bits, with
      its sign (57 to 60 bits, so that in hex they are its first digits), `size` its size
      in bits
    * `kind: :fun` - a fun whose captured values were too large to copy: `value` is
      `%{module: m, index: i, uniq: u, arity: a}` (Elixir shows a fun as
      `#Function<i.u/a in m...>`), `size` how many captured values were left out

  Binaries, bitstrings, integers and a fun's captured values are copied whole up to the
  `:max_binary` cap, so the cost of tracing a call stays the same whatever its arguments.

  `inspect/2` shows each as Elixir code with `...` where something was left out:

      iex> inspect([1, 2, %Kino.Trace.Cut{kind: :items}])
      "[1, 2, ...]"
      iex> inspect(%Kino.Trace.Cut{kind: :tuple, value: [:ok, 1], size: 5})
      "{:ok, 1, ...}"
      iex> inspect(%Kino.Trace.Cut{kind: :binary, value: "abc", size: 1000})
      ~S("abc" <> ...)
      iex> inspect(%Kino.Trace.Cut{kind: :bitstring, value: "abc", size: 8003})
      ~S("abc" <> ...)
      iex> inspect(%Kino.Trace.Cut{kind: :integer, value: -0x1F0000000000000, size: 4_000_001})
      "-0x1F0000000000000... (4000001 bits)"
      iex> inspect(%Kino.Trace.Cut{kind: :map, value: %{__struct__: MyApp.State, cells: [1]}, size: 60})
      "%MyApp.State{cells: [1], ...}"
      iex> identity = %{module: MyApp.Worker, index: 3, uniq: 1234, arity: 1}
      iex> inspect(%Kino.Trace.Cut{kind: :fun, value: identity, size: 2})
      "#Function<3.1234/1 in MyApp.Worker, ...>"
  """

  @type t :: %__MODULE__{
          kind: :depth | :bytes | :items | :binary | :tuple | :map | :bitstring | :integer | :fun,
          value: term(),
          size: non_neg_integer() | nil
        }

  defstruct [:kind, :value, :size]

  @doc """
  Returns true when `term` contains a cut anywhere.

      iex> Kino.Trace.Cut.cut?({:ok, [1, %Kino.Trace.Cut{kind: :items, size: 48}]})
      true
      iex> Kino.Trace.Cut.cut?({:ok, [1, 2]})
      false
  """
  @spec cut?(term()) :: boolean()
  def cut?(%__MODULE__{}), do: true
  def cut?(list) when is_list(list), do: any_cut_in_list?(list)
  def cut?(tuple) when is_tuple(tuple), do: tuple |> Tuple.to_list() |> any_cut_in_list?()
  def cut?(%_{} = struct), do: struct |> Map.from_struct() |> cut?()
  def cut?(map) when is_map(map), do: Enum.any?(map, fn {k, v} -> cut?(k) or cut?(v) end)
  def cut?(_), do: false

  defp any_cut_in_list?([h | t]), do: cut?(h) or any_cut_in_list?(t)
  defp any_cut_in_list?([]), do: false
  defp any_cut_in_list?(improper_tail), do: cut?(improper_tail)

  defimpl Inspect do
    import Inspect.Algebra

    def inspect(%{kind: kind, value: prefix}, opts)
        when kind in [:binary, :bitstring] and is_binary(prefix) do
      concat([to_doc(prefix, opts), " <> ..."])
    end

    def inspect(%{kind: :integer, value: lead, size: bits}, _opts)
        when is_integer(lead) and is_integer(bits) do
      sign = if lead < 0, do: "-", else: ""
      "#{sign}0x#{Integer.to_string(abs(lead), 16)}... (#{bits} bits)"
    end

    def inspect(%{kind: :fun, value: %{module: m, index: i, uniq: u, arity: a}}, opts) do
      concat(["#Function<#{i}.#{u}/#{a} in ", to_doc(m, opts), ", ...>"])
    end

    def inspect(%{kind: :tuple, value: elems}, opts) when is_list(elems) do
      container_doc("{", elems ++ [:__kino_trace_more__], "}", opts, &item/2, separator: ",")
    end

    # A struct cut short is a map that still has its :__struct__ key (and so is no
    # Enumerable, and its own Inspect would miss fields): shown as the struct, whether or
    # not its module exists on this node.
    def inspect(%{kind: :map, value: %{__struct__: module} = map}, opts) when is_atom(module) do
      fields = (map |> Map.delete(:__struct__) |> sorted()) ++ [:__kino_trace_more__]

      container_doc(
        "%" <> Macro.inspect_atom(:literal, module) <> "{",
        fields,
        "}",
        opts,
        &field/2,
        separator: ","
      )
    end

    def inspect(%{kind: :map, value: map}, opts) when is_map(map) do
      pairs = sorted(map) ++ [:__kino_trace_more__]
      container_doc("%{", pairs, "}", opts, &pair/2, separator: ",")
    end

    def inspect(_cut, _opts), do: "..."

    # In key order, as Elixir shows a map.
    defp sorted(map), do: :maps.to_list(:maps.iterator(map, :ordered))

    defp item(:__kino_trace_more__, _opts), do: "..."
    defp item(term, opts), do: to_doc(term, opts)

    defp pair(:__kino_trace_more__, _opts), do: "..."

    defp pair({key, value}, opts) do
      concat([to_doc(key, opts), " => ", to_doc(value, opts)])
    end

    defp field(:__kino_trace_more__, _opts), do: "..."

    defp field({key, value}, opts) when is_atom(key) do
      concat([Macro.inspect_atom(:key, key), " ", to_doc(value, opts)])
    end

    defp field(pair, opts), do: pair(pair, opts)
  end
end
