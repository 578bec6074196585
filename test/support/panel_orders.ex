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
