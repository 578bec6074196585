defmodule KinoTrace.Remote.Holding do
  @moduledoc false
  # Holding back for a backlogged subscriber, for a `KinoTrace.Remote.Coordinator`
  # (never waiting: it answers requests meanwhile). A batch goes to the subscribers at
  # once unless one of them is backlogged (KinoTrace.Server.Delivery) or batches are held
  # already (they keep their order); held batches are offered again every few
  # milliseconds (the coordinator's `:relay` message). The sessions count what is held
  # as the coordinator's unread messages (Delivery.held/1): past their allowance they
  # send no more.
  #
  # Works on the coordinator's state: its `subscribers`, `held`, `held_events` and
  # `relay_due` fields.

  alias KinoTrace.Server.Delivery

  # How soon batches held for a backlogged subscriber are offered again.
  @relay_ms 5

  @doc "Passes a batch of `events` on to the subscribers, or holds it (see above)."
  @spec pass_on(map(), [Kino.Trace.Event.t()]) :: map()
  def pass_on(state, events) do
    if :queue.is_empty(state.held) and not Delivery.backlogged?(state.subscribers, :relay) do
      Delivery.notify(state.subscribers, {:events, events})
      state
    else
      put_held(
        %{state | held_events: state.held_events + length(events)},
        :queue.in(events, state.held)
      )
      |> relay_later()
    end
  end

  @doc "Lets held batches through, oldest first, while no subscriber is backlogged."
  @spec relay(map()) :: map()
  def relay(state) do
    case :queue.out(state.held) do
      {:empty, _} ->
        state

      {{:value, events}, held} ->
        if Delivery.backlogged?(state.subscribers, :relay) do
          relay_later(state)
        else
          Delivery.notify(state.subscribers, {:events, events})
          relay(put_held(%{state | held_events: state.held_events - length(events)}, held))
        end
    end
  end

  @doc """
  Every held batch, now: before a status, and to answer a request for events or a
  sync (the caller asked for them).
  """
  @spec release(map()) :: map()
  def release(state) do
    for events <- :queue.to_list(state.held),
        do: Delivery.notify(state.subscribers, {:events, events})

    put_held(%{state | held_events: 0}, :queue.new())
  end

  defp put_held(state, held) do
    Delivery.held(:queue.len(held))
    %{state | held: held}
  end

  defp relay_later(%{relay_due: true} = state), do: state

  defp relay_later(state) do
    Process.send_after(self(), :relay, @relay_ms)
    %{state | relay_due: true}
  end
end
