defmodule KinoTrace.Tracer.Aliases do
  @moduledoc false
  # The process a message sent to a process alias went to: the one rule that
  # Kino.Trace.Mermaid and the widget's payload (KinoTrace.Widget.Controller) both use,
  # so that the views draw such a message to the same process.
  #
  # Since OTP 24 a gen call (GenServer.call/3, Agent.get/3, :gen_statem.call/3...) makes
  # an alias for its reply and the server sends the reply to that reference: the traced
  # send's destination (its :peer) is a reference, which names no process. Its owner is
  # learnt from, in this order of trust:
  #
  #   1. the request, sent or received: `{:"$gen_call", {owner, [:alias | ref]}, _}`
  #      (the tag of GenServer.call/3 and every gen call since OTP 24);
  #   2. the receive of a reply `{[:alias | ref], _}` (a gen reply names its alias);
  #   3. the receive of the very message that was sent to the alias, by the same
  #      message's value (any alias, not only a gen call's).
  #
  # resolve/2 learns from a whole batch first, then resolves each send in it: a request or
  # receive later in the batch resolves a send before it. The state carries over to the
  # next batch (a running trace's events come in batches); it is bounded.

  alias Kino.Trace.Event

  # Owners remembered, at most (the oldest are forgotten first); as many unresolved sends
  # (all are forgotten past that).
  @max_entries 10_000

  defstruct owners: %{}, order: :queue.new(), sent: %{}

  @type t :: %__MODULE__{}

  @spec new() :: t()
  def new, do: %__MODULE__{}

  # The events with each send to an alias whose owner is known sent to the owner instead
  # (its :peer the owner's pid), and the state to resolve the next batch with.
  @spec resolve(t(), [Event.t()]) :: {[Event.t()], t()}
  def resolve(%__MODULE__{} = state, events) when is_list(events) do
    state = Enum.reduce(events, state, &learn(&2, &1))
    {Enum.map(events, &to_owner(&1, state)), state}
  end

  defp to_owner(%Event{kind: kind, peer: ref} = event, %{owners: owners})
       when kind in [:send, :send_to_non_existing] and is_reference(ref) do
    case owners do
      %{^ref => owner} -> %Event{event | peer: owner}
      _ -> event
    end
  end

  defp to_owner(event, _state), do: event

  # 1. a gen call's request, on either side
  defp learn(state, %Event{kind: kind, data: {:"$gen_call", {owner, [:alias | ref]}, _request}})
       when kind in [:send, :receive] and is_pid(owner) and is_reference(ref),
       do: own(state, ref, owner)

  # 2. a gen call's reply, received by the caller
  defp learn(state, %Event{kind: :receive, pid: owner, data: {[:alias | ref], _reply}})
       when is_pid(owner) and is_reference(ref),
       do: own(state, ref, owner)

  # 3. a message sent to an alias not known yet, then received
  defp learn(state, %Event{kind: :send, peer: ref, data: data}) when is_reference(ref) do
    if Map.has_key?(state.owners, ref), do: state, else: remember_sent(state, data, ref)
  end

  defp learn(%{sent: sent} = state, %Event{kind: :receive, pid: owner, data: data})
       when is_pid(owner) and map_size(sent) > 0 do
    case sent do
      %{^data => ref} -> own(%{state | sent: Map.delete(sent, data)}, ref, owner)
      _ -> state
    end
  end

  defp learn(state, _event), do: state

  defp own(%{owners: owners} = state, ref, owner) do
    if Map.has_key?(owners, ref) do
      state
    else
      owners = Map.put(owners, ref, owner)
      order = :queue.in(ref, state.order)

      if map_size(owners) > @max_entries do
        {{:value, oldest}, order} = :queue.out(order)
        %{state | owners: Map.delete(owners, oldest), order: order}
      else
        %{state | owners: owners, order: order}
      end
    end
  end

  defp remember_sent(%{sent: sent} = state, data, ref) when map_size(sent) >= @max_entries,
    do: %{state | sent: %{data => ref}}

  defp remember_sent(state, data, ref), do: %{state | sent: Map.put(state.sent, data, ref)}
end
