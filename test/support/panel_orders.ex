defmodule KinoTraceTest.PanelOrders do
  @moduledoc false
  # What the recorder panel's tests trace (test/kino_trace/widget/recorder_panel_test.exs,
  # test/kino/trace/widget/recorder_browser_test.exs): nested calls that raise, and noise.
  def handle(f), do: {:ok, process(f)}
  def process(f), do: f.()
  def fail(reason), do: raise(ArgumentError, reason)
  def noise(n), do: n
end
