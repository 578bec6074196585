defmodule KinoTrace.Widget.Buffer do
  @moduledoc false
  # Coalesces event batches for the widget: at most one push per `:interval`, each push
  # at most `:max_batch` events, and never more than `:max_pending` events held.
  #
  # The trace delivers events in many small batches, sometimes thousands a second. The
  # browser wants few, bounded updates. Events are added as they arrive; `take/2` hands
  # out the next push. When more than `:max_pending` wait (the browser side cannot keep
  # up), the oldest are dropped and counted in `dropped`.
  #
  # It is a plain data structure: the caller keeps the time (`System.monotonic_time/1`
  # in milliseconds) and arms its own timer for `due_in/2` milliseconds.

  alias KinoTrace.Options

  @enforce_keys [:interval, :max_batch, :max_pending]
  defstruct [
    :interval,
    :max_batch,
    :max_pending,
    queue: :queue.new(),
    size: 0,
    dropped: 0,
    last_take: nil
  ]

  @type t :: %__MODULE__{
          interval: pos_integer(),
          max_batch: pos_integer(),
          max_pending: pos_integer(),
          queue: :queue.queue(),
          size: non_neg_integer(),
          dropped: non_neg_integer(),
          last_take: integer() | nil
        }

  @doc """
  A new, empty buffer.

  Options (`options/0`): `:interval` (ms between pushes, default 100, so at most 10
  pushes a second), `:max_batch` (events per push, default 1 000), `:max_pending`
  (events held, default 10 000). A bad option raises an `ArgumentError` naming it.

  ## Examples

      iex> alias KinoTrace.Widget.Buffer
      iex> buffer = Buffer.new(interval: 100, max_batch: 2, max_pending: 3)
      iex> buffer = Buffer.add(buffer, [:a, :b, :c, :d])
      iex> {buffer.size, buffer.dropped}
      {3, 1}
      iex> Buffer.due_in(buffer, 0)
      0
      iex> {batch, buffer} = Buffer.take(buffer, 0)
      iex> batch
      [:b, :c]
      iex> Buffer.due_in(buffer, 30)
      70
      iex> {batch, buffer} = Buffer.take(buffer, 100)
      iex> {batch, Buffer.due_in(buffer, 100)}
      {[:d], nil}
  """
  @spec new(keyword()) :: t()
  def new(opts \\ []) do
    opts = Options.validate!(opts, options())
    struct!(__MODULE__, opts)
  end

  @doc """
  The options of `new/1`, their defaults and checks (`KinoTrace.Options`).

      iex> KinoTrace.Widget.Buffer.new(max_batch: 0)
      ** (ArgumentError) invalid value for :max_batch: expected a positive integer, got: 0
  """
  @spec options() :: Options.schema()
  def options do
    count = Options.pos_integer()
    [interval: {100, count}, max_batch: {1_000, count}, max_pending: {10_000, count}]
  end

  @doc "Adds events (in order) to the buffer, dropping the oldest beyond `:max_pending`."
  @spec add(t(), list()) :: t()
  def add(%__MODULE__{} = buffer, events) when is_list(events) do
    {queue, size} =
      Enum.reduce(events, {buffer.queue, buffer.size}, fn e, {q, n} ->
        {:queue.in(e, q), n + 1}
      end)

    over = max(size - buffer.max_pending, 0)
    queue = if over > 0, do: drop(queue, over), else: queue
    %{buffer | queue: queue, size: size - over, dropped: buffer.dropped + over}
  end

  @doc """
  Milliseconds until the next push is due at time `now`, or `nil` when nothing waits.
  """
  @spec due_in(t(), integer()) :: non_neg_integer() | nil
  def due_in(%__MODULE__{size: 0}, _now), do: nil
  def due_in(%__MODULE__{last_take: nil}, _now), do: 0
  def due_in(%__MODULE__{} = buffer, now), do: max(buffer.last_take + buffer.interval - now, 0)

  @doc """
  Takes the next push (up to `:max_batch` events, oldest first) at time `now`.
  """
  @spec take(t(), integer()) :: {list(), t()}
  def take(%__MODULE__{} = buffer, now) do
    n = min(buffer.size, buffer.max_batch)
    {taken, rest} = :queue.split(n, buffer.queue)
    {:queue.to_list(taken), %{buffer | queue: rest, size: buffer.size - n, last_take: now}}
  end

  @doc "Empties the buffer (the widget's clear button), keeping the drop count."
  @spec clear(t()) :: t()
  def clear(%__MODULE__{} = buffer), do: %{buffer | queue: :queue.new(), size: 0}

  defp drop(queue, n) do
    {_dropped, rest} = :queue.split(n, queue)
    rest
  end
end
