defmodule KinoTrace.Latency.Histogram do
  @moduledoc false
  # A log-linear histogram of non-negative integers (durations in nanoseconds, in
  # kino_trace), as an HDR histogram keeps them: bounded memory, a stated relative error,
  # merged by adding counts.
  #
  # Buckets. Values below 2^@sub_bits (64) have a bucket each (exact). Above, each power
  # of two [2^e, 2^(e+1)) is cut into 2^@sub_bits (64) equal buckets of width 2^(e-6): a
  # bucket is at most 1/64 of its lowest value wide. A percentile is reported as the
  # middle of its bucket, kept within the exact min and max: it is within 1/128 (0.8 %)
  # of the value of that rank, and the stated error is 1/64 (1.6 %, what the bucket
  # width allows; the tests hold it to that).
  #
  # Bounds. Values above @max_value (2^45 ns, about 9.8 hours) are counted in the top
  # bucket and in `clamped`; so a histogram has at most 2 561 buckets, kept sparse: a map
  # of the rows used (values below 64, then each power of two) to a tuple of their 64
  # buckets' counts (recording one updates one small tuple, which costs about two thirds
  # of a bucket's update in a map of hundreds: it runs for every return with
  # `latency: true`). `min` and `max` are the exact
  # values recorded (`max` unclamped).

  import Bitwise

  @sub_bits 6
  @sub_count 1 <<< @sub_bits
  @max_value 1 <<< 45
  # the bucket of @max_value, the top one
  @max_index @sub_count + (45 - @sub_bits) * @sub_count

  @zeros Tuple.duplicate(0, @sub_count)

  defstruct buckets: %{}, count: 0, min: nil, max: nil, clamped: 0

  @type t :: %__MODULE__{
          buckets: %{non_neg_integer() => tuple()},
          count: non_neg_integer(),
          min: non_neg_integer() | nil,
          max: non_neg_integer() | nil,
          clamped: non_neg_integer()
        }

  @doc "The relative error of a percentile: 1/64."
  @spec relative_error() :: float()
  def relative_error, do: 1 / @sub_count

  @doc "The largest value kept in its own bucket; larger ones are clamped to it (and counted)."
  @spec max_value() :: pos_integer()
  def max_value, do: @max_value

  @doc "The most buckets one histogram can have."
  @spec max_buckets() :: pos_integer()
  def max_buckets, do: @max_index + 1

  @doc """
  An empty histogram.

      iex> h = KinoTrace.Latency.Histogram.new()
      iex> {KinoTrace.Latency.Histogram.count(h), KinoTrace.Latency.Histogram.percentile(h, 50)}
      {0, nil}
  """
  @spec new() :: t()
  def new, do: %__MODULE__{}

  @doc """
  Records one value (a non-negative integer).

      iex> alias KinoTrace.Latency.Histogram
      iex> h = Enum.reduce([5, 1_000, 1_000_000], Histogram.new(), &Histogram.record(&2, &1))
      iex> {Histogram.count(h), Histogram.min(h), Histogram.max(h)}
      {3, 5, 1_000_000}
  """
  @spec record(t(), non_neg_integer()) :: t()
  def record(%__MODULE__{buckets: buckets, count: count, min: min, max: max} = h, value)
      when is_integer(value) and value >= 0 do
    if value > @max_value do
      %{record(h, @max_value) | max: value, clamped: h.clamped + 1}
    else
      {row, sub} = row_sub(value)

      buckets =
        case buckets do
          %{^row => counts} -> %{buckets | row => put_elem(counts, sub, elem(counts, sub) + 1)}
          _ -> Map.put(buckets, row, put_elem(@zeros, sub, 1))
        end

      %{
        h
        | buckets: buckets,
          count: count + 1,
          min: if(min == nil or value < min, do: value, else: min),
          max: if(max == nil or value > max, do: value, else: max)
      }
    end
  end

  @doc """
  Both histograms' values in one (the same as recording them all in one).

      iex> alias KinoTrace.Latency.Histogram
      iex> a = Histogram.record(Histogram.new(), 10)
      iex> b = Histogram.record(Histogram.new(), 20)
      iex> Histogram.merge(a, b) == Histogram.record(a, 20)
      true
  """
  @spec merge(t(), t()) :: t()
  def merge(%__MODULE__{} = a, %__MODULE__{} = b) do
    %__MODULE__{
      buckets: Map.merge(a.buckets, b.buckets, fn _row, x, y -> add_counts(x, y) end),
      count: a.count + b.count,
      min: pick(a.min, b.min, &Kernel.min/2),
      max: pick(a.max, b.max, &Kernel.max/2),
      clamped: a.clamped + b.clamped
    }
  end

  defp add_counts(x, y),
    do: List.to_tuple(Enum.zip_with(Tuple.to_list(x), Tuple.to_list(y), &(&1 + &2)))

  defp pick(nil, y, _fun), do: y
  defp pick(x, nil, _fun), do: x
  defp pick(x, y, fun), do: fun.(x, y)

  @doc "How many values were recorded."
  @spec count(t()) :: non_neg_integer()
  def count(%__MODULE__{count: count}), do: count

  @doc "The smallest value recorded (exact), `nil` when empty."
  @spec min(t()) :: non_neg_integer() | nil
  def min(%__MODULE__{min: min}), do: min

  @doc "The largest value recorded (exact, even above the clamp), `nil` when empty."
  @spec max(t()) :: non_neg_integer() | nil
  def max(%__MODULE__{max: max}), do: max

  @doc """
  The value at percentile `p` (0 to 100, nearest rank: the value of rank ⌈p/100·count⌉
  of the sorted values, at least the first), as the middle of its bucket within the
  exact min and max (the first and last ranks exactly); `nil` when empty. Within `relative_error/0` of the exact value.

      iex> alias KinoTrace.Latency.Histogram
      iex> h = Enum.reduce(1..100, Histogram.new(), &Histogram.record(&2, &1 * 1_000))
      iex> p = Histogram.percentile(h, 90)
      iex> abs(p - 90_000) / 90_000 <= Histogram.relative_error()
      true
      iex> {Histogram.percentile(h, 0), Histogram.percentile(h, 100)}
      {1_000, 100_000}
  """
  @spec percentile(t(), number()) :: number() | nil
  def percentile(%__MODULE__{count: 0}, p) when is_number(p) and p >= 0 and p <= 100, do: nil

  def percentile(%__MODULE__{} = h, p) when is_number(p) and p >= 0 and p <= 100 do
    # (in thousandths of a percent, so 99.9 % of 1 000 values is rank 999 exactly)
    rank = max(1, div(round(p * 1000) * h.count + 99_999, 100_000))

    cond do
      rank == 1 -> h.min
      rank == h.count -> h.max
      true -> middle(h, rank)
    end
  end

  def percentile(%__MODULE__{}, p) do
    raise ArgumentError, "a percentile is a number from 0 to 100, got: #{inspect(p)}"
  end

  # The middle of the bucket that holds the value of `rank`, within min and max.
  defp middle(h, rank) do
    index =
      h
      |> used()
      |> Enum.reduce_while(0, fn {index, n}, seen ->
        if seen + n >= rank, do: {:halt, {:found, index}}, else: {:cont, seen + n}
      end)
      |> then(fn {:found, index} -> index end)

    {low, width} = bucket(index)
    middle = if width == 1, do: low, else: low + (width - 1) / 2
    middle |> Kernel.max(h.min) |> Kernel.min(h.max)
  end

  @doc """
  The buckets used, lowest first: `{bucket_low, count}` (a bucket holds the values from
  its low up to the next power-of-two step, see the module notes).

      iex> alias KinoTrace.Latency.Histogram
      iex> h = Enum.reduce([3, 3, 1_000, 1_010], Histogram.new(), &Histogram.record(&2, &1))
      iex> Histogram.to_list(h)
      [{3, 2}, {1000, 1}, {1008, 1}]
  """
  @spec to_list(t()) :: [{non_neg_integer(), pos_integer()}]
  def to_list(%__MODULE__{} = h) do
    for {index, n} <- used(h), do: {elem(bucket(index), 0), n}
  end

  # The buckets used, lowest first: {index, count} (index: row * 64 + sub).
  defp used(%__MODULE__{buckets: buckets}) do
    for {row, counts} <- Enum.sort(buckets),
        {n, sub} <- Enum.with_index(Tuple.to_list(counts)),
        n > 0,
        do: {row * @sub_count + sub, n}
  end

  # The row and sub-bucket of a value up to @max_value: its bucket is row * 64 + sub.
  defp row_sub(value) when value < @sub_count, do: {0, value}

  defp row_sub(value) do
    shift = log2(value) - @sub_bits
    {shift + 1, (value >>> shift) - @sub_count}
  end

  # A bucket's lowest value and width.
  defp bucket(index) when index < @sub_count, do: {index, 1}

  defp bucket(index) do
    shift = div(index - @sub_count, @sub_count)
    sub = rem(index - @sub_count, @sub_count)
    {(@sub_count + sub) <<< shift, 1 <<< shift}
  end

  # floor(log2(value)) of a positive integer, in a few steps.
  defp log2(value) when value >= 1 <<< 32, do: 32 + log2(value >>> 32)
  defp log2(value) when value >= 1 <<< 16, do: 16 + log2(value >>> 16)
  defp log2(value) when value >= 1 <<< 8, do: 8 + log2(value >>> 8)
  defp log2(value) when value >= 1 <<< 4, do: 4 + log2(value >>> 4)
  defp log2(value) when value >= 1 <<< 2, do: 2 + log2(value >>> 2)
  defp log2(value) when value >= 2, do: 1
  defp log2(_one), do: 0
end
