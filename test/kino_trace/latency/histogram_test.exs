defmodule KinoTrace.Latency.HistogramTest do
  use ExUnit.Case, async: true

  alias KinoTrace.Latency.Histogram

  doctest Histogram

  # The nearest-rank percentile of a sorted list (the definition the histogram keeps).
  defp exact(sorted, p) do
    n = length(sorted)
    rank = max(1, div(round(p * 1000) * n + 99_999, 100_000))
    Enum.at(sorted, rank - 1)
  end

  defp record_all(values), do: Enum.reduce(values, Histogram.new(), &Histogram.record(&2, &1))

  # Random data of several shapes, from a fixed seed: uniform, log-uniform over 9
  # decades, and a few clusters (as sleeps of 1, 5 and 20 ms would give).
  defp samples(seed) do
    :rand.seed(:exsss, {seed, seed * 7, seed * 13})
    n = 1 + :rand.uniform(5_000)

    case rem(seed, 3) do
      0 ->
        for _ <- 1..n, do: :rand.uniform(1_000_000)

      1 ->
        for _ <- 1..n, do: trunc(:math.pow(10, 9 * :rand.uniform()))

      2 ->
        for _ <- 1..n,
            do: Enum.random([1_000_000, 5_000_000, 20_000_000]) + :rand.uniform(300_000)
    end
  end

  test "percentiles are within the stated relative error of the exact ones" do
    for seed <- 1..60 do
      values = samples(seed)
      sorted = Enum.sort(values)
      h = record_all(values)

      assert Histogram.count(h) == length(values)
      assert Histogram.min(h) == hd(sorted)
      assert Histogram.max(h) == List.last(sorted)

      for p <- [0, 1, 10, 25, 50, 75, 90, 99, 99.9, 100] do
        want = exact(sorted, p)
        got = Histogram.percentile(h, p)

        assert abs(got - want) <= want * Histogram.relative_error(),
               "seed #{seed}, p#{p}: #{got} against #{want}"
      end
    end
  end

  test "the stated error is at most 2 %" do
    assert Histogram.relative_error() <= 0.02
  end

  test "small values are exact" do
    h = record_all([0, 1, 2, 63, 63])
    assert Histogram.to_list(h) == [{0, 1}, {1, 1}, {2, 1}, {63, 2}]
    assert Histogram.percentile(h, 50) == 2
    assert Histogram.percentile(h, 100) == 63
  end

  test "merging equals recording everything in one" do
    for seed <- 1..20 do
      values = samples(seed)
      {a, b} = Enum.split(values, div(length(values), 3))
      merged = Histogram.merge(record_all(a), record_all(b))
      assert merged == record_all(values)
      assert Histogram.merge(Histogram.new(), merged) == merged
      assert Histogram.merge(merged, Histogram.new()) == merged
    end
  end

  test "memory is bounded: values past the max are clamped into the top bucket and counted" do
    top = Histogram.max_value()
    values = [top + 1, top * 1_000, 3, top]
    h = record_all(values)
    assert h.clamped == 2
    assert Histogram.max(h) == top * 1_000
    assert [{3, 1}, {^top, 3}] = Histogram.to_list(h)

    everything = record_all(for e <- 0..60, d <- [0, 1, 3], do: Bitwise.bsl(1, e) + d)
    assert length(Histogram.to_list(everything)) <= Histogram.max_buckets()
    # (its rows: the values below 64, and each power of two up to the clamp)
    assert map_size(everything.buckets) <= div(Histogram.max_buckets(), 64) + 1
  end

  test "bucket lows are increasing and each holds the values recorded into it" do
    values = samples(4)
    h = record_all(values)
    lows = Enum.map(Histogram.to_list(h), &elem(&1, 0))
    assert lows == Enum.sort(Enum.uniq(lows))
    assert Enum.sum(Enum.map(Histogram.to_list(h), &elem(&1, 1))) == length(values)
  end

  test "a bad percentile is refused with a clear error" do
    assert_raise ArgumentError, ~r/from 0 to 100, got: 101/, fn ->
      Histogram.percentile(Histogram.new(), 101)
    end

    assert_raise ArgumentError, ~r/got: :p50/, fn ->
      Histogram.percentile(Histogram.new(), :p50)
    end
  end
end
