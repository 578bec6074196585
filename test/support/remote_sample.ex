defmodule KinoTraceTest.Remote.Echo do
  @moduledoc false
  # A function to trace on other nodes, and a process that echoes messages back.
  def double(x), do: x * 2

  def start_echo do
    spawn(fn -> loop() end)
  end

  defp loop do
    receive do
      {from, msg} -> send(from, {:echo, msg})
    end

    loop()
  end
end
