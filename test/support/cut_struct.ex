defmodule KinoTraceTest.CutStruct do
  @moduledoc false
  # A struct with more fields than the tracer's :max_items, and a function taking one
  # (issue 23 item 5: test/kino/trace/cut_struct_test.exs and the widget's browser test).
  defstruct [:a, :b, :c, :d, :e, :f, :g, :h, :i, :j, :k, :l]

  def new,
    do: %__MODULE__{
      a: 1,
      b: [2],
      c: "c",
      d: :d,
      e: 5,
      f: 6,
      g: 7,
      h: 8,
      i: 9,
      j: 10,
      k: 11,
      l: 12
    }

  @doc "A struct of a module this node does not have (as a peer node's struct is)."
  def unknown do
    Map.put(Map.from_struct(new()), :__struct__, KinoTraceTest.NoSuchStruct)
  end

  def take(state), do: {:took, map_size(state)}

  @doc """
  How a cut struct with these kept fields reads: `%Module{field: value, ..., ...}`, fields
  in order (which fields the tracer keeps is the VM's order of the map's keys).
  """
  def shown(%{__struct__: module} = kept) do
    fields =
      kept
      |> Map.delete(:__struct__)
      |> Enum.sort()
      |> Enum.map_join(", ", fn {k, v} -> "#{k}: #{inspect(v)}" end)

    "%#{inspect(module)}{#{fields}, ...}"
  end
end
