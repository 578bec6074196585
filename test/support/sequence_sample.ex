defmodule KinoTraceTest.SequenceSample do
  @moduledoc false
  # A ping-pong workload for the widget's sequence view and message rows.
  #
  # `start/1` starts a pong server and a pinger, both waiting: trace them, then `go/1`.
  # The pinger sends `rounds` pings ({:ping, pinger, i}), waiting for each pong
  # ({:pong, i * 10}, computed by `reply/1` in the server), then stops the server. On
  # :stop the server registers itself, spawns and links a short-lived helper, and exits
  # with {:shutdown, :done}; the pinger tells the caller and exits normally.

  @name :kino_trace_sequence_pong

  def start(rounds) do
    caller = self()
    pong = spawn(fn -> pong_loop() end)
    ping = spawn(fn -> ping(pong, rounds, caller) end)
    %{pong: pong, ping: ping, name: @name}
  end

  def go(%{ping: ping}), do: send(ping, :go)

  @doc "Traces a started sample: the server's reply/1 calls, both processes' messages, the server's lifecycle."
  def trace(%{ping: ping, pong: pong}) do
    Kino.Trace.trace(
      calls: ["KinoTraceTest.SequenceSample.reply/1"],
      messages: [ping, pong],
      processes: [pong]
    )
  end

  @doc "The pong's reply to ping `n`."
  def reply(n), do: n * 10

  defp pong_loop do
    receive do
      {:ping, from, n} ->
        send(from, {:pong, reply(n)})
        pong_loop()

      :stop ->
        Process.register(self(), @name)
        helper = spawn_link(fn -> :ok end)
        Process.unlink(helper)
        exit({:shutdown, :done})
    end
  end

  defp ping(pong, rounds, caller) do
    receive do
      :go -> :ok
    end

    for i <- 1..rounds do
      send(pong, {:ping, self(), i})

      receive do
        {:pong, _} -> :ok
      end
    end

    ref = Process.monitor(pong)
    send(pong, :stop)

    receive do
      {:DOWN, ^ref, :process, _, _} -> :ok
    end

    send(caller, {:sequence_done, self()})
  end
end
