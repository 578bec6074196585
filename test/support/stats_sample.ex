defmodule KinoTraceTest.StatsSample do
  @moduledoc false
  # Workload for the stats tests. Nothing else calls these functions, so a stats
  # session on this module only counts what a test does.

  # Trivial: almost no time, no memory.
  def tick(n), do: n + 1

  # Runs (on the CPU) for about `ms` milliseconds; the loop is private.
  def busy(ms) do
    spin(System.monotonic_time(:microsecond) + ms * 1000)
  end

  defp spin(deadline) do
    if System.monotonic_time(:microsecond) < deadline, do: spin(deadline), else: :ok
  end

  # Waits `ms` milliseconds without running.
  # the workload: a traced call whose wall time is not CPU time
  def nap(ms), do: Process.sleep(ms)

  # Builds a list of `n` integers (2 words per cell) on the process heap.
  def alloc(n), do: build(n, [])

  defp build(0, acc), do: acc
  defp build(n, acc), do: build(n - 1, [n | acc])

  # Calls a private function.
  def outer(x), do: inner(x) + 1
  defp inner(x), do: x * 2

  @doc "Calls `tick/1` `n` times."
  def ticks(n), do: Enum.each(1..n, &__MODULE__.tick/1)

  @doc "Runs `fun` in a new process and waits for it to end; returns its pid."
  def in_process(fun) do
    {pid, ref} = spawn_monitor(fun)

    receive do
      {:DOWN, ^ref, :process, ^pid, :normal} -> pid
      {:DOWN, ^ref, :process, ^pid, reason} -> raise "workload process failed: #{inspect(reason)}"
    after
      30_000 -> raise "workload process timed out"
    end
  end

  @doc "Starts a process that runs each `fun` sent as `{:run, fun, from}` and replies `{:done, self()}`."
  def worker do
    spawn_link(fn -> worker_loop() end)
  end

  defp worker_loop do
    receive do
      {:run, fun, from} ->
        fun.()
        send(from, {:done, self()})
        worker_loop()
    end
  end

  @doc "Runs `fun` in `worker` and waits for it."
  def run_in(worker, fun) do
    send(worker, {:run, fun, self()})

    receive do
      {:done, ^worker} -> :ok
    after
      30_000 -> raise "worker timed out"
    end
  end
end
