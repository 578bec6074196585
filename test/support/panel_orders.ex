defmodule KinoTraceTest.PanelOrders do
  @moduledoc false
  # What the recorder panel's tests trace (test/kino_trace/widget/recorder_panel_test.exs,
  # test/kino/trace/widget/recorder_browser_test.exs): nested calls that raise, and noise.
  def handle(f), do: {:ok, process(f)}
  def process(f), do: f.()
  def fail(reason), do: raise(ArgumentError, reason)
  def noise(n), do: n
end

defmodule KinoTraceTest.OrderRuns do
  @moduledoc false
  # What the recorder tests run against an orders module (KinoTraceTest.PanelOrders, or
  # a module with the same calls), from a module of their own: the funs here are no
  # traced module's.

  alias KinoTraceTest.Sample.Worker

  @doc """
  A worker (stopped when the test ends) and a recorder of its calls of
  KinoTraceTest.PanelOrders, with a ring of 6 events and the triggers `on`: what the
  recorder panel's tests watch. Returns `{worker, rec}`.
  """
  def recorder(on) do
    worker = KinoTraceTest.Helpers.start_worker()
    {worker, Kino.Trace.record(["KinoTraceTest.PanelOrders"], pids: worker, events: 6, on: on)}
  end

  @doc """
  What the recorder panel's tests record: `worker` makes 10 calls of noise/1 (more than
  their ring of 6 keeps), then an order that fails once (`fail_once/1`); returns once the
  recorder `rec` has taken in all their events.
  """
  def noise_then_fail(rec, worker) do
    Worker.run(worker, fn -> for n <- 1..10, do: KinoTraceTest.PanelOrders.noise(n) end)
    fail_once(worker)
    KinoTraceTest.Helpers.trace_delivered(worker)
    :ok = Kino.Trace.flush(rec)
  end

  @doc """
  Runs in `worker` an order that raises inside two calls of `orders` (handle/1, then
  process/1), rescued there; returns the exception.
  """
  def fail_once(worker, orders \\ KinoTraceTest.PanelOrders) do
    Worker.run(worker, fn ->
      try do
        orders.handle(fn -> orders.fail("no stock") end)
      rescue
        e -> e
      end
    end)
  end
end
