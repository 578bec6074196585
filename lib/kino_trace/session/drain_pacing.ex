defmodule KinoTrace.Session.DrainPacing do
  @moduledoc false
  # When a consumer of the native queue drains after a wake-up: at once, or a moment later.
  #
  # The tracer wakes its consumer with one message when the queue goes from empty to
  # non-empty. A consumer that drains at once on every wake-up chases the traced
  # processes: under a steady stream of calls it takes events one or two at a time, and
  # the queue's memory moves between the traced process's core and its own on every
  # event, which the traced process pays for (`make bench`, the native layer in one run:
  # 706 ns per call with a drain on every wake-up, row 3u, against 574 ns paced, row 3n).
  #
  # So once a drain has emptied the queue, the next one waits until `interval_ms` have
  # passed since. A queue that does not empty is drained without pause, so a flood is
  # drained as fast as before; an event waits at most `interval_ms` longer to be seen.
  # Times are the VM's monotonic time in microseconds.

  # kino_trace's sessions drain at most this often while the queue keeps emptying
  @interval_ms 1

  @enforce_keys [:interval_us]
  defstruct [:interval_us, emptied_at: nil]

  @type t :: %__MODULE__{interval_us: non_neg_integer(), emptied_at: integer() | nil}

  @doc """
  Pacing with at least `interval_ms` between emptying the queue and draining again
  (#{@interval_ms} ms, what kino_trace's sessions use, when not given).

  ## Examples

      iex> alias KinoTrace.Session.DrainPacing
      iex> pacing = DrainPacing.new(1)
      iex> DrainPacing.ready(pacing, 5_000)
      :now
      iex> pacing = DrainPacing.emptied(pacing, 5_000)
      iex> DrainPacing.ready(pacing, 5_200)
      {:after, 1}
      iex> DrainPacing.ready(pacing, 6_000)
      :now
  """
  @spec new(non_neg_integer()) :: t()
  def new(interval_ms \\ @interval_ms) when is_integer(interval_ms) and interval_ms >= 0,
    do: %__MODULE__{interval_us: interval_ms * 1000}

  @doc "A drain found the queue empty at `now_us`."
  @spec emptied(t(), integer()) :: t()
  def emptied(%__MODULE__{} = pacing, now_us), do: %{pacing | emptied_at: now_us}

  @doc """
  What to do on a wake-up at `now_us`: drain `:now`, or `{:after, ms}` (a whole number of
  milliseconds, at least 1, as timers take them).
  """
  @spec ready(t(), integer()) :: :now | {:after, pos_integer()}
  def ready(%__MODULE__{emptied_at: nil}, _now_us), do: :now

  def ready(%__MODULE__{interval_us: interval, emptied_at: emptied}, now_us) do
    case emptied + interval - now_us do
      wait when wait > 0 -> {:after, div(wait + 999, 1000)}
      _ -> :now
    end
  end

  @doc "The VM's monotonic time in microseconds, as `ready/2` and `emptied/2` take it."
  @spec now() :: integer()
  def now, do: System.monotonic_time(:microsecond)
end
