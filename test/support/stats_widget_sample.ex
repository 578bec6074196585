defmodule KinoTraceTest.StatsWidgetSample do
  @moduledoc false
  # Workload for the stats widget tests: nothing else calls these functions, so a stats
  # session on this module counts only what those tests do.

  def light(n), do: n + 1

  # Runs on the CPU for about `ms` milliseconds.
  def heavy(ms), do: spin(System.monotonic_time(:microsecond) + ms * 1000)

  defp spin(deadline) do
    if System.monotonic_time(:microsecond) < deadline, do: spin(deadline), else: :ok
  end

  # Allocates a list of `n` integers on the process heap.
  def alloc(n), do: Enum.to_list(1..n)

  @doc "Runs `fun` in a new process, waits for it to end, returns its pid."
  def in_process(fun) do
    {pid, ref} = spawn_monitor(fun)

    receive do
      {:DOWN, ^ref, :process, ^pid, _} -> pid
    after
      30_000 -> raise "workload process timed out"
    end
  end
end
