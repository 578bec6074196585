defmodule KinoTrace.Session.History do
  @moduledoc false
  # The last events of a trace, at most `max` of them, for `Kino.Trace.events/2`.
  #
  # Events arrive in batches and are kept as those batches, in a private ETS table of the
  # process that made the history (a session): adding one is O(1), trimming drops whole
  # batches (splitting at most one), and the events kept stay off that process's heap, so
  # its garbage collections do not copy them again and again (on the heap, a history of
  # 10 000 events made the session's decoding several times slower).

  defstruct [:table, max: 1, size: 0, next: 0, batches: :queue.new()]

  @opaque t :: %__MODULE__{
            table: :ets.tid(),
            max: pos_integer(),
            size: non_neg_integer(),
            next: non_neg_integer(),
            batches: :queue.queue({non_neg_integer(), pos_integer()})
          }

  @doc """
  An empty history that keeps at most `max` events.

  ## Examples

      iex> history = KinoTrace.Session.History.new(3)
      iex> history = history |> KinoTrace.Session.History.push([1, 2]) |> KinoTrace.Session.History.push([3, 4])
      iex> KinoTrace.Session.History.take(history, 10)
      [2, 3, 4]
      iex> KinoTrace.Session.History.take(history, 2)
      [3, 4]
      iex> KinoTrace.Session.History.size(history)
      3

  Only the process that made it can use it, and the table goes with that process.
  """
  @spec new(pos_integer()) :: t()
  def new(max) when is_integer(max) and max > 0 do
    %__MODULE__{table: :ets.new(__MODULE__, [:set, :private]), max: max}
  end

  @doc "Adds a batch of events (oldest first), dropping the oldest beyond `max`."
  @spec push(t(), [term()]) :: t()
  def push(history, []), do: history

  def push(%__MODULE__{table: table, next: seq} = history, events) do
    n = length(events)

    if n >= history.max do
      :ets.delete_all_objects(table)
      :ets.insert(table, {seq, Enum.take(events, -history.max)})

      %{
        history
        | size: history.max,
          next: seq + 1,
          batches: :queue.from_list([{seq, history.max}])
      }
    else
      :ets.insert(table, {seq, events})

      trim(%{
        history
        | size: history.size + n,
          next: seq + 1,
          batches: :queue.in({seq, n}, history.batches)
      })
    end
  end

  @doc "The last `n` events, oldest first."
  @spec take(t(), non_neg_integer()) :: [term()]
  def take(%__MODULE__{table: table, batches: batches}, n) do
    batches
    |> :queue.to_list()
    |> Enum.reverse()
    |> Enum.reduce_while({[], 0}, fn {seq, count}, {acc, got} ->
      [{^seq, events}] = :ets.lookup(table, seq)
      taken = {[events | acc], got + count}
      if got + count >= n, do: {:halt, taken}, else: {:cont, taken}
    end)
    |> elem(0)
    |> Enum.concat()
    |> Enum.take(-n)
  end

  # The most events call_events/3 looks through.
  @max_walk 100_000

  @doc """
  The events of a call's process from its call (`call_id`) to its end (`end_event`,
  the newest kept), oldest first; `nil` when the history no longer holds the call (or
  it is more than #{@max_walk} events back). For `KinoTrace.Stats.SlowCalls`.

      iex> alias Kino.Trace.Event
      iex> [p, q] = [:c.pid(0, 250, 0), :c.pid(0, 251, 0)]
      iex> history = KinoTrace.Session.History.new(10) |> KinoTrace.Session.History.push(
      ...>   [%Event{id: 1, pid: p}, %Event{id: 2, pid: p}, %Event{id: 3, pid: q}])
      iex> history = KinoTrace.Session.History.push(history, [%Event{id: 4, pid: p}])
      iex> KinoTrace.Session.History.call_events(history, 2, %Event{id: 4, pid: p}) |> Enum.map(& &1.id)
      [2, 4]
      iex> KinoTrace.Session.History.call_events(KinoTrace.Session.History.new(1), 2, %Event{id: 4, pid: p})
      nil
  """
  @spec call_events(t(), pos_integer(), Kino.Trace.Event.t()) :: [Kino.Trace.Event.t()] | nil
  def call_events(%__MODULE__{table: table, batches: batches}, call_id, %{id: end_id, pid: pid}) do
    batches
    |> :queue.to_list()
    |> Enum.reverse()
    |> Enum.reduce_while({[], 0}, fn {seq, count}, {acc, walked} ->
      [{^seq, events}] = :ets.lookup(table, seq)
      mine = for %{pid: ^pid, id: id} = e <- events, id >= call_id and id <= end_id, do: e

      case events do
        _ when walked + count > @max_walk -> {:halt, nil}
        [%{id: first} | _] when first <= call_id -> {:halt, {:found, [mine | acc]}}
        _ -> {:cont, {[mine | acc], walked + count}}
      end
    end)
    |> case do
      {:found, parts} -> Enum.concat(parts)
      _ -> nil
    end
  end

  @doc """
  Leaves out the events `fun` is true of, wherever they are.

      iex> history = KinoTrace.Session.History.new(5) |> KinoTrace.Session.History.push([1, 2, 3])
      iex> history = KinoTrace.Session.History.reject(history, &(&1 == 2))
      iex> {KinoTrace.Session.History.take(history, 5), KinoTrace.Session.History.size(history)}
      {[1, 3], 2}
  """
  @spec reject(t(), (term() -> boolean())) :: t()
  def reject(%__MODULE__{table: table, batches: batches} = history, fun) do
    kept =
      batches
      |> :queue.to_list()
      |> Enum.flat_map(fn {seq, _n} ->
        [{^seq, events}] = :ets.lookup(table, seq)

        case Enum.reject(events, fun) do
          [] ->
            :ets.delete(table, seq)
            []

          left ->
            :ets.insert(table, {seq, left})
            [{seq, length(left)}]
        end
      end)

    %{
      history
      | batches: :queue.from_list(kept),
        size: kept |> Enum.map(&elem(&1, 1)) |> Enum.sum()
    }
  end

  @doc "How many events it holds."
  @spec size(t()) :: non_neg_integer()
  def size(%__MODULE__{size: size}), do: size

  defp trim(%{size: size, max: max} = history) when size <= max, do: history

  defp trim(%{size: size, max: max, table: table} = history) do
    {{:value, {seq, n}}, rest} = :queue.out(history.batches)
    over = size - max

    if n <= over do
      :ets.delete(table, seq)
      trim(%{history | size: size - n, batches: rest})
    else
      [{^seq, events}] = :ets.lookup(table, seq)
      :ets.insert(table, {seq, Enum.drop(events, over)})
      %{history | size: max, batches: :queue.in_r({seq, n - over}, rest)}
    end
  end
end
