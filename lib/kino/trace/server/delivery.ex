defmodule Kino.Trace.Server.Delivery do
  @moduledoc false
  # How a trace server (Kino.Trace.Server) sends its subscribers what they subscribed
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
  # one of its own subscribers is backlogged it holds the batches it relays (at most
  # @allowance events, the rest dropped and counted, see Kino.Trace.Remote.Coordinator).
  # So its subscribers' limit is smaller, @relay_backlog messages (3 200 events): what
  # it holds plus what they have unread stays about one allowance, as behind a session.
  @allowance 64_000
  @batch_events 100
  @backlog %{session: div(@allowance, @batch_events), relay: 32}

  @type subscribers :: %{pid() => {reference(), Kino.Trace.Server.tag()}}

  @doc "The most events a server sends in one message."
  @spec batch_events() :: pos_integer()
  def batch_events, do: @batch_events

  @doc "The most events a subscriber may fall behind (a coordinator holds at most as many)."
  @spec allowance() :: pos_integer()
  def allowance, do: @allowance

  @doc "Sends `notice` to every subscriber, tagged as it subscribed."
  @spec notify(subscribers(), Kino.Trace.Server.notice()) :: :ok
  def notify(subscribers, notice) do
    for {pid, {_ref, tag}} <- subscribers, do: send(pid, {:kino_trace, tag, notice})
    :ok
  end

  @doc """
  Whether a subscriber on this node has more unread messages than a `:session` or a
  `:relay` (a coordinator) lets it have (see the allowance above).
  """
  @spec backlogged?(subscribers(), :session | :relay) :: boolean()
  def backlogged?(subscribers, kind) do
    limit = Map.fetch!(@backlog, kind)

    Enum.any?(subscribers, fn {pid, _} ->
      case node(pid) == node() and Process.info(pid, :message_queue_len) do
        {:message_queue_len, n} -> n > limit
        _ -> false
      end
    end)
  end
end
