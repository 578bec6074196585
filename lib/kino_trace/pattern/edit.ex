defmodule KinoTrace.Pattern.Edit do
  @moduledoc false
  # The bounds of a pattern edit from a browser, checked before anything parses it: the
  # widget's controller and the smart cell's controller both apply them
  # (KinoTrace.Widget.Controller.check_pattern_edit/1 documents them).

  @max_lines 500
  @max_pattern_bytes 4_096
  @max_edit_bytes 65_536

  @spec bounds() :: %{lines: pos_integer(), pattern_bytes: pos_integer(), edit_bytes: pos_integer()}
  def bounds, do: %{lines: @max_lines, pattern_bytes: @max_pattern_bytes, edit_bytes: @max_edit_bytes}

  @spec check([String.t()]) :: :ok | {:error, String.t()}
  def check(lines) do
    count = length(lines)
    total = Enum.reduce(lines, 0, &(byte_size(&1) + &2))
    long = Enum.find(lines, &(byte_size(&1) > @max_pattern_bytes))

    cond do
      count > @max_lines ->
        {:error, "not applied: #{count} patterns sent, at most #{@max_lines} at once"}

      long ->
        {:error,
         "not applied: the pattern starting #{inspect(String.slice(long, 0, 40) <> "...")} " <>
           "is #{byte_size(long)} bytes long, at most #{@max_pattern_bytes} bytes per pattern"}

      total > @max_edit_bytes ->
        {:error,
         "not applied: the patterns are #{total} bytes in all, at most #{@max_edit_bytes} at once"}

      true ->
        :ok
    end
  end
end
