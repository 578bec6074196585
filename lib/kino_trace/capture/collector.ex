defmodule KinoTrace.Capture.Collector do
  @moduledoc false
  # The subscriber that keeps every event of a capture (`Kino.Trace.capture/3`): an
  # ordinary subscriber of the capture's trace, in its own process so the block's
  # processes stay traced.

  @doc """
  Starts a collector for `owner` (the calling process); it ends when `owner` does.

  ## Examples

      iex> collector = KinoTrace.Capture.Collector.start()
      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> :ok = Kino.Trace.subscribe(trace, collector)
      iex> Enum.sum([1, 2])
      iex> collector |> KinoTrace.Capture.Collector.collect(trace) |> Enum.map(& &1.kind)
      [:call, :return]
      iex> Kino.Trace.stop(trace)
      iex> KinoTrace.Capture.Collector.stop(collector)
      :ok
  """
  @spec start(pid()) :: pid()
  def start(owner \\ self()) do
    pid =
      spawn(fn ->
        ref = Process.monitor(owner)
        loop(ref, [])
      end)

    KinoTrace.Internal.register(pid)
    pid
  end

  @doc """
  Every event of `trace` queued so far, oldest first: the trace delivers its whole queue
  to the collector, then the collector answers with all it has received.
  """
  @spec collect(pid(), Kino.Trace.t()) :: [Kino.Trace.Event.t()]
  def collect(collector, %{session: session} = trace) when is_pid(session) do
    ref = Process.monitor(collector)
    send(collector, {:collect, self(), ref, trace})

    receive do
      {^ref, events} ->
        Process.demonitor(ref, [:flush])
        events

      {:DOWN, ^ref, :process, _, reason} ->
        raise RuntimeError, "the capture's collector ended: #{inspect(reason)}"
    end
  end

  @doc "Ends the collector."
  @spec stop(pid()) :: :ok
  def stop(collector) do
    Process.exit(collector, :kill)
    :ok
  end

  defp loop(owner_ref, acc) do
    receive do
      {:kino_trace, _id, {:events, events}} ->
        loop(owner_ref, Enum.reverse(events, acc))

      {:collect, from, ref, trace} ->
        # the session sends its events before its answer, so they are in the mailbox now
        :ok = KinoTrace.Client.flush(trace)
        acc = take_events(trace.id, acc)
        send(from, {ref, Enum.reverse(acc)})
        loop(owner_ref, [])

      {:DOWN, ^owner_ref, :process, _, _} ->
        :ok

      _other ->
        loop(owner_ref, acc)
    end
  end

  defp take_events(id, acc) do
    receive do
      {:kino_trace, ^id, {:events, events}} -> take_events(id, Enum.reverse(events, acc))
    after
      0 -> acc
    end
  end
end
