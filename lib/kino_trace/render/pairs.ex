defmodule KinoTrace.Render.Pairs do
  @moduledoc false
  # The one rule for which events are two sides of one thing, shared by the sequence
  # views: Kino.Trace.Mermaid draws such a pair once (KinoTrace.Render.Sequence), and the
  # widget's payload names each event's earlier side (`pair`, KinoTrace.Widget.Payload)
  # for the sequence tab (assets/src/sequence.js), which draws what it is given.
  #
  # The pairs, a side :a and a side :b:
  #
  #   * a message: the :send (a) to a process and that process's :receive (b) of the same
  #     term (a send to a process alias is first sent to the alias's owner,
  #     KinoTrace.Tracer.Aliases); a :send_to_non_existing pairs with nothing;
  #   * a spawn: the parent's :spawn (a) and the child's :spawned (b);
  #   * a link or unlink: the :link / :unlink (a) and the other process's
  #     :getting_linked / :getting_unlinked (b).
  #
  # Either side may come first: processes, and nodes, are traced by their own clocks.
  # Sides wait in order of arrival and pair first come, first served. Two sides pair
  # only when at most @max_apart events apart; a receive that came before its send pairs
  # with it only when their times (when both have one) are at most @early_us apart, so
  # a receive of a message from a process not traced is not taken for the receive of a
  # later send of the same term.
  #
  # pair/2 takes events in order, in batches (a running trace's events come in batches),
  # each with a tag (an index, an event id) and answers, for each, the tag of the earlier
  # side it pairs with, or nil. The state carries over to the next batch; it is bounded.

  alias Kino.Trace.Event

  @max_apart 10_000
  @early_us 100_000

  defstruct waiting: %{}, seq: 0, count: 0

  @type t :: %__MODULE__{}
  @type side :: :a | :b

  @spec new() :: t()
  def new, do: %__MODULE__{}

  # For each {tag, event}, the tag of the earlier event it is the second side of, or nil.
  @spec pair(t(), [{term(), Event.t()}]) :: {[term() | nil], t()}
  def pair(%__MODULE__{} = state, tagged) when is_list(tagged) do
    {partners, state} = Enum.map_reduce(tagged, state, &pair_one/2)
    {partners, sweep(state)}
  end

  # The indexes of `events` (one batch) that are the :b side of a pair, the side a view
  # that draws a pair once leaves out.
  @spec b_sides([Event.t()]) :: MapSet.t(non_neg_integer())
  def b_sides(events) when is_list(events) do
    {partners, _state} =
      pair(new(), Enum.with_index(events, fn event, index -> {index, event} end))

    events
    |> Enum.zip(partners)
    |> Enum.with_index()
    |> Enum.reduce(MapSet.new(), fn
      {{_event, nil}, _index}, acc ->
        acc

      {{event, first}, index}, acc ->
        MapSet.put(acc, if(side(event) == :b, do: index, else: first))
    end)
  end

  # Which side of a pair an event is, or nil for an event that pairs with nothing.
  @spec side(Event.t()) :: side() | nil
  def side(event) do
    case key(event) do
      {side, _key} -> side
      nil -> nil
    end
  end

  defp pair_one({tag, event}, %{seq: seq} = state) do
    state = %{state | seq: seq + 1}

    case key(event) do
      nil -> {nil, state}
      {side, key} -> match(state, side, key, {tag, seq, event.time})
    end
  end

  # `count` counts the sides put to wait since the last sweep: at least as many as wait.
  defp match(state, side, key, {_tag, seq, time} = entry) do
    other = {other(side), key}

    case take(Map.get(state.waiting, other, :queue.new()), seq, side, key, time) do
      {{first, _seq, _time}, rest} ->
        {first, %{state | waiting: put_queue(state.waiting, other, rest)}}

      {nil, rest} ->
        waiting = put_queue(state.waiting, other, rest)
        queue = Map.get(waiting, {side, key}, :queue.new())

        {nil,
         %{
           state
           | waiting: Map.put(waiting, {side, key}, :queue.in(entry, queue)),
             count: state.count + 1
         }}
    end
  end

  # The oldest waiting side that pairs with this one, dropping those too far behind.
  defp take(queue, seq, side, key, time) do
    case :queue.out(queue) do
      {:empty, queue} ->
        {nil, queue}

      {{:value, {_tag, first_seq, _time}}, rest} when seq - first_seq > @max_apart ->
        take(rest, seq, side, key, time)

      {{:value, {_tag, _seq, first_time} = first}, rest} ->
        cond do
          not early_receive?(side, key) -> {first, rest}
          time == nil or first_time == nil -> {first, rest}
          abs(time - first_time) <= @early_us -> {first, rest}
          # a receive long before this send: not its receive, nor any later one's
          time - first_time > @early_us -> take(rest, seq, side, key, time)
          true -> {nil, queue}
        end
    end
  end

  # A send (side :a of a message) taking a receive that came before it.
  defp early_receive?(side, {kind, _, _}), do: side == :a and kind == :message

  defp put_queue(waiting, key, queue) do
    if :queue.is_empty(queue), do: Map.delete(waiting, key), else: Map.put(waiting, key, queue)
  end

  defp other(:a), do: :b
  defp other(:b), do: :a

  # Forgets the sides too far behind to pair any more, once they are many.
  defp sweep(%{count: count} = state) when count <= 2 * @max_apart, do: state

  defp sweep(%{seq: seq} = state) do
    waiting =
      for {key, queue} <- state.waiting,
          kept = :queue.filter(fn {_tag, s, _time} -> seq - s <= @max_apart end, queue),
          not :queue.is_empty(kept),
          into: %{},
          do: {key, kept}

    %{
      state
      | waiting: waiting,
        count: waiting |> Map.values() |> Enum.map(&:queue.len/1) |> Enum.sum()
    }
  end

  defp key(%Event{kind: :send, peer: peer, data: data}) when not is_nil(peer),
    do: {:a, {:message, peer, data}}

  defp key(%Event{kind: :receive, pid: pid, data: data}), do: {:b, {:message, pid, data}}

  defp key(%Event{kind: :spawn, pid: pid, peer: peer}) when not is_nil(peer),
    do: {:a, {:spawn, pid, peer}}

  defp key(%Event{kind: :spawned, pid: pid, peer: peer}) when not is_nil(peer),
    do: {:b, {:spawn, peer, pid}}

  defp key(%Event{kind: kind, pid: pid, peer: peer})
       when kind in [:link, :unlink] and not is_nil(peer),
       do: {:a, {kind, pid, peer}}

  defp key(%Event{kind: :getting_linked, pid: pid, peer: peer}) when not is_nil(peer),
    do: {:b, {:link, peer, pid}}

  defp key(%Event{kind: :getting_unlinked, pid: pid, peer: peer}) when not is_nil(peer),
    do: {:b, {:unlink, peer, pid}}

  defp key(_event), do: nil
end
