defmodule Kino.Trace.Foreign do
  @moduledoc """
  A term of a trace file (`Kino.Trace.open/2`) that cannot be itself on this node.

  Opening a file never makes a fun, and never creates an atom (not even a node's name),
  so some terms of a file written elsewhere come back as this struct, which inspects as
  the term was printed where it was traced:

    * `type: :pid`, `:port`, `:reference` - one of a node that this node does not know
      by name (one of a known node is a real pid, port or reference)
    * `type: :fun` - every fun: `text` is how it was printed

  (An atom this node does not know comes back as its name, which inspects as the atom.)
  Two foreign terms are equal when they were equal where the file was written, so
  grouping by process or matching a reference still works.

      iex> inspect(%Kino.Trace.Foreign{type: :pid, text: "#PID<12345.210.0>"})
      "#PID<12345.210.0>"
  """

  @enforce_keys [:type, :text]
  defstruct [:type, :text]

  @type t :: %__MODULE__{type: :pid | :port | :reference | :fun, text: String.t()}

  defimpl Inspect do
    def inspect(%{text: text}, _opts) when is_binary(text), do: text
    def inspect(_foreign, _opts), do: "#Kino.Trace.Foreign<>"
  end
end
