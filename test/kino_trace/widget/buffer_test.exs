defmodule KinoTrace.Widget.BufferTest do
  use ExUnit.Case, async: true

  alias KinoTrace.Widget.{Buffer, Store}

  doctest Buffer
  doctest Store

  test "pushes are spaced by the interval and bounded in size" do
    buffer = Buffer.new(interval: 100, max_batch: 1_000, max_pending: 50_000)
    buffer = Buffer.add(buffer, Enum.to_list(1..2_500))

    {first, buffer} = Buffer.take(buffer, 1_000)
    assert first == Enum.to_list(1..1_000)
    assert Buffer.due_in(buffer, 1_000) == 100
    assert Buffer.due_in(buffer, 1_040) == 60
    {second, buffer} = Buffer.take(buffer, 1_100)
    {third, buffer} = Buffer.take(buffer, 1_200)
    assert second == Enum.to_list(1_001..2_000)
    assert third == Enum.to_list(2_001..2_500)
    assert Buffer.due_in(buffer, 1_300) == nil
    assert buffer.dropped == 0
  end

  test "a flood keeps the newest events and counts the rest" do
    buffer = Buffer.new(max_pending: 1_000)

    buffer =
      Enum.reduce(1..100, buffer, fn i, b ->
        Buffer.add(b, Enum.to_list((i * 100 - 99)..(i * 100)))
      end)

    assert buffer.size == 1_000
    assert buffer.dropped == 9_000
    {batch, _} = Buffer.take(buffer, 0)
    assert hd(batch) == 9_001
  end

  test "clear empties but keeps the count of drops" do
    buffer = Buffer.new(max_pending: 1) |> Buffer.add([1, 2]) |> Buffer.clear()
    assert {buffer.size, buffer.dropped, Buffer.due_in(buffer, 0)} == {0, 1, nil}
  end

  test "the store forgets the oldest and ignores ids it has" do
    store = Store.new(capacity: 3)
    store = Store.add(store, for(i <- 1..5, do: {%{id: i}, {:event, i}}))
    store = Store.add(store, [{%{id: 5}, :again}])

    assert Enum.map(Store.rows(store), & &1.id) == [3, 4, 5]
    assert Store.fetch(store, 5) == {:ok, {:event, 5}}
    assert Store.fetch(store, 2) == :error
    assert Store.rows(Store.clear(store)) == []
  end

  # Their options go through KinoTrace.Options, as every front end's (issue 35); the
  # store's size is `capacity:` (`max_events:` names a trace's limit of events).
  test "bad options raise an ArgumentError naming the option" do
    for {new, opts, message} <- [
          {&Buffer.new/1, [max_batch: 0],
           "invalid value for :max_batch: expected a positive integer, got: 0"},
          {&Buffer.new/1, [interval: :soon],
           "invalid value for :interval: expected a positive integer, got: :soon"},
          {&Buffer.new/1, [max_pendin: 5],
           "unknown option :max_pendin (did you mean :max_pending?). Known options: :interval, :max_batch, :max_pending"},
          {&Store.new/1, [capacity: -1],
           "invalid value for :capacity: expected a positive integer, got: -1"},
          {&Store.new/1, [max_events: 5], "unknown option :max_events. Known options: :capacity"}
        ] do
      assert_raise ArgumentError, message, fn -> new.(opts) end
    end

    assert Store.new().capacity == 10_000
  end
end
