defmodule Kino.Trace.FileError do
  @moduledoc """
  Raised by `Kino.Trace.open/2` for a file it cannot open: missing or unreadable, not a
  trace file, of a format version it does not read, corrupt, or over its caps. The
  message names the file (and its node, `node`, for another node's file: `open({node,
  path})`) and, when the fault is in its content, the byte offset of the frame or term
  where it was found (`offset`).

      iex> error = %Kino.Trace.FileError{path: "orders.ktrace", offset: 9, reason: "a frame whose checksum does not match"}
      iex> Exception.message(error)
      "cannot open the trace file orders.ktrace: a frame whose checksum does not match (at byte 9)"
  """

  defexception [:path, :offset, :reason, node: nil]

  @type t :: %__MODULE__{
          path: String.t(),
          node: node() | nil,
          offset: non_neg_integer() | nil,
          reason: String.t()
        }

  @impl true
  def message(%{path: path, node: node, offset: offset, reason: reason}) do
    file = if node, do: "#{path} on node #{inspect(node)}", else: path
    at = if offset, do: " (at byte #{offset})", else: ""
    "cannot open the trace file #{file}: #{reason}#{at}"
  end
end
