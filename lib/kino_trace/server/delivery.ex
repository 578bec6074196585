defmodule KinoTrace.Server.Delivery do
  @moduledoc false
  # How a trace server (KinoTrace.Server) sends its subscribers what they subscribed
  # to, and the one backpressure rule: when a subscriber falls behind, the server holds
  # back, so what does not fit is dropped and counted rather than piling up in memory.
  #
  # Subscribers are a map `pid => {monitor, tag}`; each gets `{:kino_trace, tag, notice}`.
  #
  # The allowance: a subscriber may fall @allowance events behind. A session sends them
  # in messages of at most @batch_events (its drain batch), so it is backlogged past
  # @allowance / @batch_events = 640 messages; then it stops draining, its native queue
  # fills and the tracer drops and counts (cheaply, in the traced process). 64 000 events
  # let a printer or a widget catch up after a burst and keep a mailbox to tens of MB.
  #
  # A coordinator relays: it is itself a subscriber of each node's session, and while
  # one of its own subscribers is backlogged it holds the batches it relays in its state
  # (it never waits: it answers requests meanwhile). What it holds counts as unread: it
  # says how many batches in its process dictionary (@held_key, read with
  # process_info/2 as the mailbox's length is), so past 640 of them the sessions stop
  # draining, as for any subscriber, and the native queues drop and count, per node.
  # Its own subscribers' limit is smaller, 32 messages (3 200 events): what it holds
  # plus what they have unread stays about one allowance, as behind a session.
  @allowance 64_000
  @batch_events 100
  @backlog %{session: div(@allowance, @batch_events), relay: 32}
  @held_key :"$kino_trace_held"

  @type subscribers :: %{pid() => {reference(), KinoTrace.Server.tag()}}

  @doc "The most events a server sends in one message."
  @spec batch_events() :: pos_integer()
  def batch_events, do: @batch_events

  @doc "The most events a subscriber may fall behind."
  @spec allowance() :: pos_integer()
  def allowance, do: @allowance

  @doc "Sends `notice` to every subscriber, tagged as it subscribed."
  @spec notify(subscribers(), KinoTrace.Server.notice()) :: :ok
  def notify(subscribers, notice) do
    for {pid, {_ref, tag}} <- subscribers, do: send(pid, {:kino_trace, tag, notice})
    :ok
  end

  @doc """
  Whether a subscriber on this node has more unread messages (in its mailbox, or held
  for its own subscribers: `held/1`) than a `:session` or a `:relay` (a coordinator)
  lets it have (see the allowance above).
  """
  @spec backlogged?(subscribers(), :session | :relay) :: boolean()
  def backlogged?(subscribers, kind) do
    limit = Map.fetch!(@backlog, kind)

    Enum.any?(subscribers, fn {pid, _} ->
      case node(pid) == node() and
             Process.info(pid, [:message_queue_len, {:dictionary, @held_key}]) do
        [{:message_queue_len, n}, {{:dictionary, @held_key}, held}] -> n + count(held) > limit
        _ -> false
      end
    end)
  end

  defp count(n) when is_integer(n), do: n
  defp count(_undefined), do: 0

  @doc """
  Says, in the calling process, that it holds `batches` messages for its own
  subscribers: the servers it subscribes to count them as unread (`backlogged?/2`).
  """
  @spec held(non_neg_integer()) :: :ok
  def held(0) do
    Process.delete(@held_key)
    :ok
  end

  def held(batches) do
    Process.put(@held_key, batches)
    :ok
  end
end
