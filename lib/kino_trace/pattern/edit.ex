defmodule KinoTrace.Pattern.Edit do
  @moduledoc false
  # The bounds of pattern text, checked before anything parses it: an edit from a
  # browser (the widget's controller and the smart cell's controller both apply
  # `check/1`, KinoTrace.Widget.Controller.check_pattern_edit/1 documents it), and the
  # bytes of one pattern, which every text pattern meets however it comes (the API's
  # too: `check_pattern/1`, applied by KinoTrace.Pattern.Quoted.parse/1): parsing is
  # linear in them at best, and the literals of a longer text take seconds to build.

  @max_lines 500
  @max_pattern_bytes 4_096
  @max_edit_bytes 65_536

  @spec bounds() :: %{
          lines: pos_integer(),
          pattern_bytes: pos_integer(),
          edit_bytes: pos_integer()
        }
  def bounds,
    do: %{lines: @max_lines, pattern_bytes: @max_pattern_bytes, edit_bytes: @max_edit_bytes}

  @doc """
  Whether one pattern's text (a call or a message pattern) is within the bytes of a
  pattern: `:ok`, or `{:error, message}` naming the bound.

      iex> KinoTrace.Pattern.Edit.check_pattern("Enum.map/2")
      :ok
      iex> KinoTrace.Pattern.Edit.check_pattern("Foo.bar(" <> String.duplicate("1", 5000) <> ")")
      {:error, "the pattern is 5009 bytes long, at most 4096 bytes per pattern"}
  """
  @spec check_pattern(String.t()) :: :ok | {:error, String.t()}
  def check_pattern(text) when byte_size(text) <= @max_pattern_bytes, do: :ok

  def check_pattern(text),
    do:
      {:error,
       "the pattern is #{byte_size(text)} bytes long, at most #{@max_pattern_bytes} bytes per pattern"}

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
