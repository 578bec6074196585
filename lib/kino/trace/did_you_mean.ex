defmodule Kino.Trace.DidYouMean do
  @moduledoc false
  # The "did you mean" of an unknown option: the known option whose name is closest to
  # the one given (`String.jaro_distance/2` above 0.8), when one is close enough.
  # `Kino.Trace.Options` and `Kino.Trace.Stats.Options` word their unknown-option errors
  # with it.

  # How close a known name must be (Jaro similarity) to be suggested.
  @threshold 0.8

  @doc """
  ` (did you mean :known?)` for the known name closest to `given`, or `""` when none is
  close enough (or none is known).

      iex> Kino.Trace.DidYouMean.hint(:limt, [])
      ""

  ## Examples

      iex> Kino.Trace.DidYouMean.hint(:tiem, [:pids, :time, :memory])
      " (did you mean :time?)"
      iex> Kino.Trace.DidYouMean.hint(:colour, [:pids, :time, :memory])
      ""
      iex> Kino.Trace.DidYouMean.unknown_option(:tiem, [:time, :memory])
      "unknown option :tiem (did you mean :time?). Known options: :time, :memory"
  """
  @spec hint(atom(), [atom()]) :: String.t()
  def hint(given, known) when is_list(known) do
    given = to_string(given)

    case Enum.max_by(known, &String.jaro_distance(to_string(&1), given), fn -> nil end) do
      nil ->
        ""

      best ->
        if String.jaro_distance(to_string(best), given) > @threshold,
          do: " (did you mean #{inspect(best)}?)",
          else: ""
    end
  end

  @doc "The error message for the unknown option `given`: its hint and the known options."
  @spec unknown_option(atom(), [atom()]) :: String.t()
  def unknown_option(given, known) when is_list(known) do
    "unknown option #{inspect(given)}" <>
      hint(given, known) <> ". Known options: " <> Enum.map_join(known, ", ", &inspect/1)
  end
end
