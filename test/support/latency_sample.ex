defmodule KinoTraceTest.Sample.Timing do
  @moduledoc false
  # Functions of known shape for the latency and flame tests: waits of known times, a
  # nested call pattern, an exception and a tail-call loop. Nothing else calls them.

  # the workload: waits `ms` milliseconds (durations are at least `ms`)
  def wait(ms), do: Process.sleep(ms)

  # run -> a, a, b; a -> leaf; b -> leaf, leaf. Each waits a little, so every frame has
  # a self time well above the clock's resolution.
  def run do
    # the workload: run's own time
    Process.sleep(1)
    a()
    a()
    b(1)
    :ok
  end

  def a do
    # the workload: a's own time
    Process.sleep(1)
    leaf()
  end

  def b(n) do
    # the workload: b's own time
    Process.sleep(n)
    leaf()
    leaf()
  end

  # the workload: leaf's own time
  def leaf, do: Process.sleep(1)

  # Raises after waiting `ms`.
  def fail(ms) do
    # the workload: the time before the exception
    Process.sleep(ms)
    raise ArgumentError, "failed on purpose"
  end

  # Calls a tail-recursive loop (traced without returns: KinoTrace.Plan.TailCalls).
  def looping(n) do
    count_down(n)
    :ok
  end

  def count_down(0), do: :done
  def count_down(n), do: count_down(n - 1)
end
