defmodule KinoTrace.Widget.PayloadTest do
  use ExUnit.Case, async: true

  alias Kino.Trace.{Cut, Event}
  alias KinoTrace.Widget.Payload

  doctest Payload

  defp call(fields) do
    struct!(
      %Event{
        id: 1,
        kind: :call,
        node: :nonode@nohost,
        pid: self(),
        module: MyApp.Cache,
        function: :fetch,
        arity: 2,
        args: [:users, 42],
        time: 1_700_000_000_123_456,
        monotonic: 10
      },
      fields
    )
  end

  describe "event/2" do
    test "a call renders as Elixir code with node, pid and depth" do
      row = Payload.event(call(depth: 2, name: :cache))

      assert row.call == "MyApp.Cache.fetch(:users, 42)"
      assert row.mfa == "MyApp.Cache.fetch/2"
      assert row.node == "nonode@nohost"
      assert row.pid == inspect(self())
      assert row.name == ":cache"
      assert row.depth == 2
      assert row.time == 1_700_000_000_123_456
      assert row.truncated == false
      assert row.lost == false
      assert Payload.event(%{call(depth: 0) | lost: true}).lost == true
      assert row.result == nil and row.exception == nil
    end

    test "Erlang modules and operator-like names render as code" do
      row = Payload.event(call(module: :ets, function: :insert, args: [:t, {:k, 1}]))
      assert row.call == ":ets.insert(:t, {:k, 1})"
      assert row.mfa == ":ets.insert/2"

      row = Payload.event(call(module: Kernel, function: :+, arity: 2, args: [1, 2]))
      assert row.call == "Kernel.+(1, 2)"

      row = Payload.event(call(module: M, function: :"with space", arity: 0, args: []))
      assert row.call == ~S{M."with space"()}
    end

    test "a return carries its value, call id and duration" do
      row =
        Payload.event(%Event{
          id: 2,
          kind: :return,
          module: MyApp.Cache,
          function: :fetch,
          arity: 2,
          return: {:ok, %{id: 42}},
          call_id: 1,
          duration: 38_000,
          depth: 0
        })

      assert row.kind == "return"
      assert row.result == "{:ok, %{id: 42}}"
      assert row.call_id == 1
      assert row.duration == 38_000
      assert row.call == nil
    end

    test "an exception renders as a banner" do
      row =
        Payload.event(%Event{
          id: 3,
          kind: :exception,
          module: M,
          function: :f,
          arity: 1,
          exception: {:error, :badarg},
          call_id: 1,
          duration: 5
        })

      assert row.exception == "** (ArgumentError) argument error"

      row = Payload.event(%Event{id: 4, kind: :exception, exception: {:throw, :oops}})
      assert row.exception =~ "throw"
      assert row.exception =~ ":oops"
    end

    test "native cuts mark the row as truncated" do
      args = [[1, 2, %Cut{kind: :items}], %Cut{kind: :binary, value: "abc", size: 9000}]
      row = Payload.event(call(args: args))

      assert row.call == ~S{MyApp.Cache.fetch([1, 2, ...], "abc" <> ...)}
      assert row.truncated
    end

    test "collections over the inspect limit mark the row as truncated" do
      row = Payload.event(call(args: [Enum.to_list(1..50), :x]), limit: 10)
      assert row.call =~ "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...]"
      assert row.truncated

      row = Payload.event(call(args: [String.duplicate("a", 300), :x]))
      assert row.truncated

      row = Payload.event(call(args: [%{a: Enum.to_list(1..21)}, :x]))
      assert row.truncated

      row = Payload.event(call(args: [{1, [2, [3, [4]]]}, "short"]))
      refute row.truncated
    end

    test "long renderings are cut to max_chars" do
      big = for i <- 1..15, do: String.duplicate("x", 100) <> "#{i}"
      row = Payload.event(call(args: [big, :x]), max_chars: 200)

      assert String.length(row.call) < 260
      assert String.ends_with?(row.call, " ...)")
      assert row.truncated
    end

    test "message and process events carry data and peer" do
      row =
        Payload.event(%Event{
          id: 9,
          kind: :send,
          pid: self(),
          data: {:hello, "world"},
          peer: self()
        })

      assert row.kind == "send"
      assert row.data == ~S({:hello, "world"})
      assert row.peer == inspect(self())
      assert row.mfa == nil and row.call == nil
    end

    # issue 25 item 4: a function the compiler made reads as Elixir writes an anonymous
    # function; the raw name stays in :mfa (the details, the stats row's identity)
    test "a compiler-made function from a real trace reads as an anonymous fn" do
      trace = Kino.Trace.calls([~S(Enum."-sum/1-lists^foldl/2-0-"/2), "Enum.sum/1"])
      on_exit(fn -> Kino.Trace.stop(trace) end)
      task = Task.async(fn -> Enum.sum([1, 2, 3]) end)
      Task.await(task)
      :ok = Kino.Trace.flush(trace)
      # the task's calls alone: the trace is of every process, and other tests sum too
      rows =
        trace |> Kino.Trace.events() |> Enum.filter(&(&1.pid == task.pid)) |> Payload.events()

      [first | _] = inner = Enum.filter(rows, &(&1.kind == "call" and &1.mfa_label != nil))
      assert length(inner) == 4
      assert first.call == "anonymous fn([1, 2, 3], 0) in Enum.sum/1"
      assert first.mfa == ~S(Enum."-sum/1-lists^foldl/2-0-"/2)
      assert first.mfa_label == "anonymous fn/2 in Enum.sum/1"

      sum = Enum.find(rows, &(&1.kind == "call" and &1.mfa == "Enum.sum/1"))
      assert sum.call == "Enum.sum([1, 2, 3])" and sum.mfa_label == nil
      assert Kino.Trace.Stats.Row.name({Enum, :"-sum/1-lists^foldl/2-0-", 2}) == first.mfa_label
    end

    test "caller renders as an MFA" do
      row = Payload.event(call(caller: {Enum, :map, 2}))
      assert row.caller == "Enum.map/2"
    end

    test "rows are JSON-able: only maps, strings, numbers, booleans and nil" do
      row = Payload.event(call(args: [self(), make_ref(), fn -> 1 end, <<1, 2, 3>>]))
      assert json_able?(row)
    end
  end

  describe "full/2" do
    test "renders every argument in full, pretty-printed" do
      args = [Enum.to_list(1..100), String.duplicate("y", 500)]
      full = Payload.full(call(id: 5, args: args))

      assert full.id == 5
      assert full.mfa == "MyApp.Cache.fetch/2"
      [list, string] = full.args
      assert list =~ "100]"
      assert string =~ String.duplicate("y", 500)
      refute full.cut
      assert json_able?(full)
    end

    test "returns, exceptions and native cuts" do
      full = Payload.full(%Event{id: 6, kind: :return, return: [1, %Cut{kind: :items}]})
      assert full.result == "[1, ...]"
      assert full.cut

      full = Payload.full(%Event{id: 7, kind: :exception, exception: {:exit, :normal}})
      assert full.exception == "** (exit) :normal"
      assert full.exception_raw == "{:exit, :normal}"
    end

    test "is capped" do
      full = Payload.full(call(args: [Enum.to_list(1..10_000)]), max_chars: 1000)
      assert String.length(hd(full.args)) <= 1004
    end
  end

  test "counters/2 names every drop reason" do
    info = %{
      status: :limit_reached,
      delivered: 100,
      accepted: 120,
      queued: 0,
      dropped: %{rate: 0, queue_full: 20, max_events: 3, closed: 0},
      rate: 12.5,
      limit: 100
    }

    counters = Payload.counters(info, 7)
    assert counters.status == "limit_reached"

    assert counters.dropped == %{
             "rate" => 0,
             "queue_full" => 20,
             "max_events" => 3,
             "closed" => 0,
             "display" => 7
           }

    assert counters.limit == 100
  end

  test "pattern_results/2 keeps the order of the lines" do
    payload =
      Payload.pattern_results(
        [{"A.b/1", :ok}, {"Nope", {:error, "unknown module Nope"}}, {{M, :f, 1}, :ok}],
        ["A.b/1", "M.f/1"]
      )

    assert Enum.map(payload.results, & &1.ok) == [true, false, true]
    assert Enum.at(payload.results, 1).error == "unknown module Nope"
    assert Enum.at(payload.results, 2).input == "{M, :f, 1}"
  end

  defp json_able?(value) when is_map(value) do
    Enum.all?(value, fn {k, v} -> (is_atom(k) or is_binary(k)) and json_able?(v) end)
  end

  defp json_able?(value) when is_list(value), do: Enum.all?(value, &json_able?/1)
  defp json_able?(value) when is_binary(value), do: String.valid?(value)

  defp json_able?(value),
    do: is_number(value) or is_boolean(value) or is_nil(value) or (is_atom(value) and false)

  test "a spawn's function reads as Mod.fun/arity, rendered here for the sequence tab" do
    spawn = fn data ->
      Payload.event(%Event{id: 1, kind: :spawn, pid: self(), peer: self(), data: data}).spawn_mfa
    end

    assert spawn.({Enum, :sum, [[1, 2]]}) == "Enum.sum/1"

    assert spawn.({KinoTraceTest.Sample, :"-pong/0-fun-0-", []}) ==
             "anonymous fn/0 in KinoTraceTest.Sample.pong/0"

    assert spawn.({Enum, :sum, [1 | 2]}) == nil
    assert spawn.(:weird) == nil

    assert Payload.event(%Event{id: 2, kind: :send, pid: self(), data: {Enum, :sum, [1]}}).spawn_mfa ==
             nil
  end
end
