defmodule KinoTrace.File.Fetch do
  @moduledoc false
  # Another node's trace file (the `to:` option's files of its events stay there), read
  # over `:erpc` with OTP's `:file` alone (that node needs nothing of kino_trace): its
  # size is checked against the cap before any of it is read, and again after (a file
  # that grew meanwhile), so no more than the cap comes here. Its bytes are then read as
  # a file here is (`KinoTrace.File.Format.read/2` with `{:ram, bytes}`): untrusted input.

  @timeout 30_000

  @doc """
  The bytes of `path` on `node`, at most `max_bytes`: `{:ok, bytes}`, or `{:error,
  reason, nil}` (as `KinoTrace.File.Format.read/2` gives errors).
  """
  @spec bytes(node(), Path.t(), pos_integer()) :: {:ok, binary()} | {:error, String.t(), nil}
  def bytes(node, path, max_bytes) do
    with {:ok, size} <- remote(node, :read_file_info, [path]),
         :ok <- within(size, max_bytes),
         {:ok, bytes} <- remote(node, :read_file, [path]),
         :ok <- within(byte_size(bytes), max_bytes) do
      {:ok, bytes}
    end
  end

  defp within(size, max) when size <= max, do: :ok

  defp within(size, max),
    do:
      {:error,
       "a file of #{size} bytes there, more than the #{max} open/2 fetches (its max_bytes:)", nil}

  defp remote(node, fun, args) do
    case :erpc.call(node, :file, fun, args, @timeout) do
      # (the file_info record: its size, its type)
      {:ok, info} when elem(info, 0) == :file_info and elem(info, 2) == :regular ->
        {:ok, elem(info, 1)}

      {:ok, info} when elem(info, 0) == :file_info ->
        {:error, "not a regular file there (#{elem(info, 2)})", nil}

      {:ok, bytes} when is_binary(bytes) ->
        {:ok, bytes}

      {:error, posix} ->
        {:error, :file.format_error(posix) |> to_string(), nil}
    end
  catch
    :error, {:erpc, reason} ->
      {:error, "node #{inspect(node)} did not answer (#{reason})", nil}

    :error, {:exception, reason, _stack} ->
      {:error, "could not read it there: #{inspect(reason, limit: 5)}", nil}
  end
end
