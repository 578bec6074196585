defmodule KinoTrace.History do
  @moduledoc false
  # The last events of a trace, at most `max` of them, for `Kino.Trace.events/2`.
  #
  # Events arrive in batches and are kept as those batches, in a private ETS table of the
  # process that made the history (a session): adding one is O(1), trimming drops whole
  # batches (splitting at most one), and the events kept stay off that process's heap, so
  # its garbage collections do not copy them again and again (on the heap, a history of
  # 10 000 events made the session's decoding several times slower).
  #
  # It is also a recorder's ring (`Kino.Trace.record/2`): the newest events, at most
  # `max` of them and, with `max_bytes`, at most that many bytes (each event's flat size
  # in words times the word size: what it takes in the table), counting every event it
  # overwrote (`overwritten/1`). One home for "the newest events, bounded", on every
  # backend: the session keeps it where its events are decoded.

  defstruct [
    :table,
    max: 1,
    max_bytes: nil,
    size: 0,
    bytes: 0,
    overwritten: 0,
    next: 0,
    batches: :queue.new()
  ]

  @opaque t :: %__MODULE__{
            table: :ets.tid(),
            max: pos_integer(),
            max_bytes: pos_integer() | nil,
            size: non_neg_integer(),
            bytes: non_neg_integer(),
            overwritten: non_neg_integer(),
            next: non_neg_integer(),
            batches: :queue.queue({non_neg_integer(), pos_integer(), non_neg_integer()})
          }

  @doc """
  An empty history that keeps at most `max` events.

  ## Examples

      iex> history = KinoTrace.History.new(3)
      iex> history = history |> KinoTrace.History.push([1, 2]) |> KinoTrace.History.push([3, 4])
      iex> KinoTrace.History.take(history, 10)
      [2, 3, 4]
      iex> KinoTrace.History.take(history, 2)
      [3, 4]
      iex> KinoTrace.History.size(history)
      3

  Only the process that made it can use it, and the table goes with that process.
  """
  @spec new(pos_integer(), pos_integer() | nil) :: t()
  def new(max, max_bytes \\ nil)
      when is_integer(max) and max > 0 and
             (max_bytes == nil or (is_integer(max_bytes) and max_bytes > 0)) do
    %__MODULE__{table: :ets.new(__MODULE__, [:set, :private]), max: max, max_bytes: max_bytes}
  end

  @doc """
  Adds a batch of events (oldest first), dropping (overwriting) the oldest beyond `max`
  events and `max_bytes` bytes.

      iex> ring = KinoTrace.History.new(10, 3 * KinoTrace.History.bytes_of({1}))
      iex> ring = KinoTrace.History.push(ring, [{1}, {2}, {3}, {4}, {5}])
      iex> {KinoTrace.History.take(ring, 10), KinoTrace.History.overwritten(ring)}
      {[{3}, {4}, {5}], 2}
  """
  @spec push(t(), [term()]) :: t()
  def push(history, []), do: history

  def push(%__MODULE__{table: table, next: seq} = history, events) do
    n = length(events)
    bytes = if history.max_bytes, do: Enum.reduce(events, 0, &(bytes_of(&1) + &2)), else: 0
    :ets.insert(table, {seq, events})

    trim(%{
      history
      | size: history.size + n,
        bytes: history.bytes + bytes,
        next: seq + 1,
        batches: :queue.in({seq, n, bytes}, history.batches)
    })
  end

  @doc "What one event takes in the table, in bytes: its flat size in words times the word size."
  @spec bytes_of(term()) :: non_neg_integer()
  def bytes_of(event), do: :erts_debug.flat_size(event) * :erlang.system_info(:wordsize)

  @doc "The last `n` events, oldest first."
  @spec take(t(), non_neg_integer()) :: [term()]
  def take(%__MODULE__{table: table, batches: batches}, n) do
    batches
    |> :queue.to_list()
    |> Enum.reverse()
    |> Enum.reduce_while({[], 0}, fn {seq, count, _bytes}, {acc, got} ->
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
  it is more than #{@max_walk} events back). For `KinoTrace.Latency.SlowCalls`.

      iex> alias Kino.Trace.Event
      iex> [p, q] = [:c.pid(0, 250, 0), :c.pid(0, 251, 0)]
      iex> history = KinoTrace.History.new(10) |> KinoTrace.History.push(
      ...>   [%Event{id: 1, pid: p}, %Event{id: 2, pid: p}, %Event{id: 3, pid: q}])
      iex> history = KinoTrace.History.push(history, [%Event{id: 4, pid: p}])
      iex> KinoTrace.History.call_events(history, 2, %Event{id: 4, pid: p}) |> Enum.map(& &1.id)
      [2, 4]
      iex> KinoTrace.History.call_events(KinoTrace.History.new(1), 2, %Event{id: 4, pid: p})
      nil
  """
  @spec call_events(t(), pos_integer(), Kino.Trace.Event.t()) :: [Kino.Trace.Event.t()] | nil
  def call_events(%__MODULE__{table: table, batches: batches}, call_id, %{id: end_id, pid: pid}) do
    batches
    |> :queue.to_list()
    |> Enum.reverse()
    |> Enum.reduce_while({[], 0}, fn {seq, count, _bytes}, {acc, walked} ->
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

      iex> history = KinoTrace.History.new(5) |> KinoTrace.History.push([1, 2, 3])
      iex> history = KinoTrace.History.reject(history, &(&1 == 2))
      iex> {KinoTrace.History.take(history, 5), KinoTrace.History.size(history)}
      {[1, 3], 2}
  """
  @spec reject(t(), (term() -> boolean())) :: t()
  def reject(%__MODULE__{table: table, batches: batches} = history, fun) do
    kept =
      batches
      |> :queue.to_list()
      |> Enum.flat_map(fn {seq, _n, _bytes} ->
        [{^seq, events}] = :ets.lookup(table, seq)

        case Enum.reject(events, fun) do
          [] ->
            :ets.delete(table, seq)
            []

          left ->
            :ets.insert(table, {seq, left})

            [
              {seq, length(left),
               if(history.max_bytes, do: Enum.reduce(left, 0, &(bytes_of(&1) + &2)), else: 0)}
            ]
        end
      end)

    %{
      history
      | batches: :queue.from_list(kept),
        size: kept |> Enum.map(&elem(&1, 1)) |> Enum.sum(),
        bytes: kept |> Enum.map(&elem(&1, 2)) |> Enum.sum()
    }
  end

  @doc "How many events it holds."
  @spec size(t()) :: non_neg_integer()
  def size(%__MODULE__{size: size}), do: size

  @doc "How many bytes its events take (counted only with `max_bytes`, else 0)."
  @spec bytes(t()) :: non_neg_integer()
  def bytes(%__MODULE__{bytes: bytes}), do: bytes

  @doc "How many events it dropped to keep within its bounds, since it was made."
  @spec overwritten(t()) :: non_neg_integer()
  def overwritten(%__MODULE__{overwritten: n}), do: n

  @doc "What its table takes in memory, in bytes."
  @spec memory(t()) :: non_neg_integer()
  def memory(%__MODULE__{table: table}),
    do: :ets.info(table, :memory) * :erlang.system_info(:wordsize)

  defp over?(%{size: size, max: max, bytes: bytes, max_bytes: max_bytes}),
    do: size > max or (max_bytes != nil and bytes > max_bytes)

  # Drops the oldest events until within both bounds: whole batches while a bound needs
  # all of the oldest one gone, else the fewest of its first events that do.
  defp trim(history) do
    if over?(history), do: trim_oldest(history), else: history
  end

  defp trim_oldest(%{table: table} = history) do
    {{:value, {seq, n, bytes}}, rest} = :queue.out(history.batches)
    over = history.size - history.max
    over_bytes = if history.max_bytes, do: history.bytes - history.max_bytes, else: 0

    # (the whole batch when a bound needs all of it gone)
    whole? = n <= over or (history.max_bytes != nil and bytes <= over_bytes)
    [{^seq, events}] = if whole?, do: [{seq, nil}], else: :ets.lookup(table, seq)

    {k, dropped_bytes} =
      if events,
        do: prefix(events, max(over, 0), over_bytes, history.max_bytes != nil),
        else: {n, bytes}

    if k == n do
      :ets.delete(table, seq)

      trim(%{
        history
        | size: history.size - n,
          bytes: history.bytes - bytes,
          overwritten: history.overwritten + n,
          batches: rest
      })
    else
      :ets.insert(table, {seq, Enum.drop(events, k)})

      %{
        history
        | size: history.size - k,
          bytes: history.bytes - dropped_bytes,
          overwritten: history.overwritten + k,
          batches: :queue.in_r({seq, n - k, bytes - dropped_bytes}, rest)
      }
    end
  end

  # The fewest first events that are at least `count` events and (sized?) `bytes` bytes.
  defp prefix(events, count, bytes, sized?) do
    Enum.reduce_while(events, {0, 0}, fn event, {k, b} ->
      if k >= count and b >= bytes,
        do: {:halt, {k, b}},
        else: {:cont, {k + 1, if(sized?, do: b + bytes_of(event), else: 0)}}
    end)
  end
end
