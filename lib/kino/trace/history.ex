defmodule Kino.Trace.History do
  @moduledoc """
  The last events of a trace, at most `max` of them, for `Kino.Trace.events/2`.

  Events arrive in batches and are kept as those batches: adding one is O(1), and
  trimming drops whole batches (splitting at most one), not one event at a time.

      iex> history = Kino.Trace.History.new(3)
      iex> history = history |> Kino.Trace.History.push([1, 2]) |> Kino.Trace.History.push([3, 4])
      iex> Kino.Trace.History.take(history, 10)
      [2, 3, 4]
      iex> Kino.Trace.History.take(history, 2)
      [3, 4]
      iex> Kino.Trace.History.size(history)
      3
  """

  defstruct max: 1, size: 0, batches: :queue.new()

  @opaque t :: %__MODULE__{max: pos_integer(), size: non_neg_integer(), batches: :queue.queue([term()])}

  @doc "An empty history that keeps at most `max` events."
  @spec new(pos_integer()) :: t()
  def new(max) when is_integer(max) and max > 0, do: %__MODULE__{max: max}

  @doc "Adds a batch of events (oldest first), dropping the oldest beyond `max`."
  @spec push(t(), [term()]) :: t()
  def push(history, []), do: history

  def push(%__MODULE__{} = history, events) do
    n = length(events)

    if n >= history.max do
      %{history | size: history.max, batches: :queue.from_list([Enum.take(events, -history.max)])}
    else
      trim(%{history | size: history.size + n, batches: :queue.in(events, history.batches)})
    end
  end

  @doc "The last `n` events, oldest first."
  @spec take(t(), non_neg_integer()) :: [term()]
  def take(%__MODULE__{} = history, n) do
    history.batches |> :queue.to_list() |> Enum.concat() |> Enum.take(-n)
  end

  @doc "How many events it holds."
  @spec size(t()) :: non_neg_integer()
  def size(%__MODULE__{size: size}), do: size

  defp trim(%{size: size, max: max} = history) when size <= max, do: history

  defp trim(%{size: size, max: max} = history) do
    {{:value, oldest}, rest} = :queue.out(history.batches)
    over = size - max
    n = length(oldest)

    if n <= over do
      trim(%{history | size: size - n, batches: rest})
    else
      %{history | size: max, batches: :queue.in_r(Enum.drop(oldest, over), rest)}
    end
  end
end
