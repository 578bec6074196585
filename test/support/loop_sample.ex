defmodule KinoTraceTest.Sample.Loop do
  @moduledoc false
  # Loops that never return, for the stack tests. Each iteration counts itself in
  # `counter` (a :counters reference), so a test can tell the loop runs and how fast.
  # Nothing else calls them.

  # Self tail-recursive (issue 12: `def loop(n), do: loop(n + 1)`).
  def spin(counter) do
    :counters.add(counter, 1, 1)
    spin(counter)
  end

  # Mutually tail-recursive, one way through a remote call to the module itself.
  def ping(counter) do
    :counters.add(counter, 1, 1)
    __MODULE__.pong(counter)
  end

  def pong(counter), do: ping(counter)

  # A loop across two modules: no module's code shows it.
  def bounce(counter) do
    :counters.add(counter, 1, 1)
    KinoTraceTest.Sample.Loop.Other.bounce(counter)
  end

  # A tail-recursive loop that ends.
  def count_down(0), do: :done
  def count_down(n), do: count_down(n - 1)

  # Spawns `fun.(counter)` and returns {pid, counter}.
  def start(fun) do
    counter = :counters.new(1, [])
    {spawn(fn -> fun.(counter) end), counter}
  end
end

defmodule KinoTraceTest.Sample.Loop.Other do
  @moduledoc false
  def bounce(counter), do: KinoTraceTest.Sample.Loop.bounce(counter)
end
