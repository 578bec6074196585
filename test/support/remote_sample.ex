defmodule KinoTraceTest.Remote.Echo do
  @moduledoc false
  # A function to trace on other nodes, and a process that echoes messages back.
  def double(x), do: x * 2

  # Any term back (a payload for trace files).
  def echo(x), do: x

  # Raises for a negative `x` (an exception for a recorder's trigger).
  def checked(x) when x >= 0, do: double(x)
  def checked(x), do: :erlang.error({:negative, x})

  # Nested calls, nested -> outer -> inner, that wait inside for `:go`, then call
  # `checked(x)` (which raises for a negative `x`, caught by `nested/2`): the calls that
  # lead to a recorder's trigger. `inner/2` tells `parent` `{:inside, pid}` first.
  def nested(parent, x) do
    outer(parent, x)
  catch
    :error, reason -> {:raised, reason}
  end

  def outer(parent, x), do: {:ok, inner(parent, x)}

  def inner(parent, x) do
    send(parent, {:inside, self()})

    receive do
      :go -> checked(x)
    end
  end

  # A call that takes `ms` (for slower_than:).
  # time is the subject: a call slower than a recorder's threshold
  def slow(ms), do: Process.sleep(ms)

  # A fun to run on another node (it must come from a module that node has loaded).
  def double_fun(x), do: fn -> double(x) end

  # Suspends `pid` for as long as the process that suspended it lives (a hung process).
  def hang(pid) do
    parent = self()

    spawn(fn ->
      true = :erlang.suspend_process(pid)
      send(parent, :hung)
      Process.sleep(:infinity)
    end)

    receive do
      :hung -> :ok
    end
  end

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
