defmodule KinoTrace.TracerTest do
  # The native tracer through real OTP trace sessions: no Elixir session process here.
  use ExUnit.Case, async: true

  import KinoTraceTest.Helpers, only: [wait_until: 1, drain_all: 1, trace_delivered: 1]

  alias Kino.Trace.Cut
  alias KinoTrace.Tracer

  defmodule Target do
    def add(a, b), do: a + b
    def echo(x), do: x
    def boom(x), do: raise(ArgumentError, "boom #{inspect(x)}")
  end

  # Starts a native + OTP session tracing `pids` (calls to Target), owned by the test.
  defp start(pids, limits \\ %{}, opts \\ []) do
    resource = Tracer.new_session(self(), limits)
    session = :trace.session_create(:tracer_test, {:kino_trace_tracer, resource}, [])
    for pid <- List.wrap(pids), do: :trace.process(session, pid, true, [:call, :scheduler_id])
    body = Keyword.get(opts, :body, [])
    :trace.function(session, {Target, :_, :_}, [{:_, [], body}], [:local])
    on_exit(fn -> :trace.session_destroy(session) end)
    {resource, session}
  end

  # Runs fun in a fresh process (started untraced, traced before it runs fun).
  defp traced_process(session, fun) do
    parent = self()
    pid = spawn(fn -> receive(do: (:go -> send(parent, {:done, self(), fun.()}))) end)
    :trace.process(session, pid, true, [:call, :scheduler_id])
    send(pid, :go)
    assert_receive {:done, ^pid, _result}, 5_000
    pid
  end

  defp balanced?(c), do: c.accepted == c.delivered + c.queued + c.discarded

  test "calls in several processes arrive with their pids, MFAs and args" do
    {resource, session} = start([])
    pids = for i <- 1..4, do: traced_process(session, fn -> Target.add(i, 10 * i) end)
    Enum.each(pids, &trace_delivered/1)

    events = drain_all(resource)
    assert length(events) == 4

    for {pid, i} <- Enum.with_index(pids, 1) do
      assert [{:call, ^pid, t, sched, Target, :add, 2, [^i, b], :undefined, _}] =
               Enum.filter(events, &(elem(&1, 1) == pid))

      assert b == 10 * i
      assert is_integer(t) and is_integer(sched) and sched >= 1
    end

    assert_received {:kino_trace, _id, :ready}
    assert balanced?(Tracer.counters(resource))
  end

  test "return values and exceptions arrive" do
    {resource, session} = start([], %{}, body: [{:exception_trace}])

    pid =
      traced_process(session, fn -> {Target.echo({:ok, [1, 2]}), catch_error(Target.boom(:x))} end)

    trace_delivered(pid)

    assert [
             {:call, ^pid, _, _, Target, :echo, 1, [{:ok, [1, 2]}], :undefined, _},
             {:return_from, ^pid, _, _, Target, :echo, 1, :undefined, {:ok, [1, 2]}, _},
             {:call, ^pid, _, _, Target, :boom, 1, [:x], :undefined, _},
             {:exception_from, ^pid, _, _, Target, :boom, 1, :undefined,
              {:error, %ArgumentError{message: "boom :x"}}, _}
           ] = drain_all(resource)
  end

  test "timestamps are monotonic nanoseconds, in order within a process" do
    {resource, session} = start([])
    before = System.monotonic_time(:nanosecond)
    pid = traced_process(session, fn -> for i <- 1..50, do: Target.echo(i) end)
    trace_delivered(pid)
    times = resource |> drain_all() |> Enum.map(&elem(&1, 2))
    assert length(times) == 50
    assert times == Enum.sort(times)
    assert hd(times) >= before and List.last(times) <= System.monotonic_time(:nanosecond)
  end

  test "limit N gives exactly N, closes the session and tells the owner" do
    {resource, session} = start([], %{limit: 7})
    pid = traced_process(session, fn -> for i <- 1..100, do: Target.echo(i) end)
    trace_delivered(pid)

    events = drain_all(resource)
    assert Enum.map(events, fn e -> e |> elem(7) |> hd() end) == Enum.to_list(1..7)
    assert_received {:kino_trace, _id, :limit_reached}

    c = Tracer.counters(resource)
    assert c.accepted == 7 and c.delivered == 7 and c.closed and c.limit_reached
    assert balanced?(c)
  end

  test "a closed session traces nothing more and leaves nothing in session_info" do
    {resource, session} = start([])
    pid = traced_process(session, fn -> Target.echo(1) end)
    trace_delivered(pid)
    assert [_] = drain_all(resource)

    Tracer.close(resource)
    pid2 = traced_process(session, fn -> for i <- 1..10, do: Target.echo(i) end)
    trace_delivered(pid2)
    assert drain_all(resource) == []
    c = Tracer.counters(resource)
    assert c.closed and c.accepted == 1

    weak = elem(session, 1)
    assert weak in :trace.session_info(:all)
    :trace.session_destroy(session)
    refute weak in :trace.session_info(:all)
  end

  test "rate limit throttles, counts the drops and keeps running" do
    {resource, session} = start([], %{rate: {10, 60_000}})
    pid = traced_process(session, fn -> for i <- 1..1_000, do: Target.echo(i) end)
    trace_delivered(pid)
    assert length(drain_all(resource)) == 10

    c = Tracer.counters(resource)
    assert c.accepted == 10 and c.dropped_rate == 990 and not c.closed
    assert balanced?(c)
  end

  test "rate limit refills over time" do
    # 40 ms per token: the 20 calls of a burst take far less, even on a loaded machine.
    {resource, session} = start([], %{rate: {5, 200}})
    pid = traced_process(session, fn -> for i <- 1..20, do: Target.echo(i) end)
    trace_delivered(pid)
    assert length(drain_all(resource)) == 5
    # time is the subject: the bucket refills at one token per 40 ms
    Process.sleep(450)
    pid2 = traced_process(session, fn -> for i <- 1..20, do: Target.echo(i) end)
    trace_delivered(pid2)
    assert length(drain_all(resource)) == 5
  end

  test "a flood with a small queue drops and counts without growing memory" do
    {resource, session} = start([], %{queue: [events: 100]})
    pid = traced_process(session, fn -> for i <- 1..200_000, do: Target.echo(i) end)
    trace_delivered(pid)

    c = Tracer.counters(resource)
    # The cap is split between the schedulers' shards (and the fallback's): the process
    # fills its scheduler's part, or the parts of those it ran on.
    assert c.queued == c.accepted and c.accepted in div(100, System.schedulers() + 1)..100
    assert c.dropped_queue_full == 200_000 - c.accepted
    assert c.bytes_queued < 100 * 1024
    assert balanced?(c)
    assert length(drain_all(resource)) == c.accepted
  end

  test "queue cap in bytes" do
    {resource, session} = start([], %{queue: [bytes: 20_000]})

    pid =
      traced_process(session, fn -> for _ <- 1..1_000, do: Target.echo(:binary.copy("x", 400)) end)

    trace_delivered(pid)
    c = Tracer.counters(resource)
    assert c.accepted > 0 and c.dropped_queue_full > 0
    assert c.accepted + c.dropped_queue_full == 1_000
    assert c.bytes_queued <= 20_000
  end

  test "wakes the owner once per empty-to-non-empty transition, not per event" do
    {resource, session} = start([])
    pid = traced_process(session, fn -> for i <- 1..500, do: Target.echo(i) end)
    trace_delivered(pid)
    assert_received {:kino_trace, _, :ready}
    refute_received {:kino_trace, _, :ready}
    assert Tracer.counters(resource).wakeups == 1

    assert length(drain_all(resource)) == 500
    pid2 = traced_process(session, fn -> Target.echo(1) end)
    trace_delivered(pid2)
    assert_received {:kino_trace, _, :ready}
  end

  test "drain hands out bounded batches and says when more remain" do
    {resource, session} = start([])
    pid = traced_process(session, fn -> for i <- 1..2_500, do: Target.echo(i) end)
    trace_delivered(pid)
    assert {batch1, true} = Tracer.drain(resource, 1_000)
    assert {batch2, true} = Tracer.drain(resource, 1_000)
    # the drain that empties the queue puts it to sleep
    assert {batch3, :recheck} = Tracer.drain(resource, 1_000)
    assert Enum.map([batch1, batch2, batch3], &length/1) == [1_000, 1_000, 500]
    c = Tracer.counters(resource)
    assert c.delivered == 2_500 and c.queued == 0
  end

  # The producer's path has no fence: a drain that puts the queue to sleep says
  # :recheck, for an event whose wake-up was missed (c_src/core/session_core.hpp,
  # "Wake-up"; the miss itself is made to happen in c_src/tests/session_core_test.cpp).
  test "a drain that puts the queue to sleep says :recheck; the recheck and an idle drain say false" do
    {resource, session} = start([])
    assert Tracer.drain(resource, 10) == {[], false}

    pid = traced_process(session, fn -> Target.echo(1) end)
    trace_delivered(pid)
    assert_received {:kino_trace, _, :ready}
    assert {[_], :recheck} = Tracer.drain(resource, 10)
    assert Tracer.drain(resource, 10) == {[], false}
    assert Tracer.drain(resource, 10) == {[], false}

    # asleep since: the next event wakes the owner, and its drain asks for a recheck again
    pid2 = traced_process(session, fn -> Target.echo(2) end)
    trace_delivered(pid2)
    assert_received {:kino_trace, _, :ready}
    decoder = KinoTrace.Tracer.NativeDecoder.new()
    assert {[_], :recheck} = KinoTrace.Tracer.NativeDecoder.drain(decoder, resource, 10)
    assert {[], false} = KinoTrace.Tracer.NativeDecoder.drain(decoder, resource, 10)
    assert Tracer.counters(resource).wakeups == 2
  end

  test "owner death closes the native session" do
    parent = self()

    owner =
      spawn(fn ->
        resource = Tracer.new_session(self(), %{})
        send(parent, {:resource, resource})
        receive do: (:never -> :ok)
      end)

    assert_receive {:resource, resource}
    refute Tracer.counters(resource).closed
    Process.exit(owner, :kill)
    wait_until(fn -> Tracer.counters(resource).closed end)
  end

  test "20 sessions at once each see only their own events" do
    sessions = for _ <- 1..20, do: start([])

    procs =
      for {{_resource, session}, i} <- Enum.with_index(sessions) do
        Task.async(fn ->
          traced_process(session, fn -> for _ <- 1..50, do: Target.add(i, i) end)
        end)
      end
      |> Enum.map(&Task.await/1)

    Enum.each(procs, &trace_delivered/1)

    for {{resource, _}, {pid, i}} <- Enum.zip(sessions, Enum.with_index(procs)) do
      events = drain_all(resource)
      assert length(events) == 50
      assert Enum.all?(events, &match?({:call, ^pid, _, _, Target, :add, 2, [^i, ^i], _, _}, &1))
    end
  end

  test "the structs the NIF builds have the keys of their defstruct" do
    table = Tracer.struct_keys()

    assert Enum.sort(Enum.map(table, &elem(&1, 0))) ==
             Enum.sort([Cut, ArgumentError, RuntimeError, Kino.Trace.Event])

    for {module, keys} <- table do
      assert Enum.sort([:__struct__ | keys]) == Enum.sort(Map.keys(struct(module))),
             "the NIF builds #{inspect(module)} with #{inspect(keys)}: update c_src/nif/structs.hpp"
    end

    # And what it builds is that struct.
    assert {%Cut{kind: :tuple, value: [1], size: 3}, _} =
             Tracer.roundtrip({1, 2, 3}, %{max_items: 1})

    error = assert_raise ArgumentError, fn -> Tracer.new_session(:not_a_pid, %{}) end
    assert Map.keys(error) |> Enum.sort() == Map.keys(%ArgumentError{}) |> Enum.sort()
    # The native decoder's event tuples: the fields in defstruct order.
    {Kino.Trace.Event, event_fields} = List.keyfind(table, Kino.Trace.Event, 0)
    assert event_fields == KinoTrace.Tracer.NativeDecoder.fields()
    assert event_fields == Enum.map(Kino.Trace.Event.__info__(:struct), & &1.field)
  end

  test "bad arguments are rejected with a message naming them" do
    assert_raise ArgumentError, "expected the owner to be a local pid", fn ->
      Tracer.new_session(:not_a_pid, %{})
    end

    assert_raise ArgumentError, "expected the limits to be a map", fn ->
      Tracer.new_session(self(), limit: 1)
    end

    # The limits are named and shaped as the options are; the errors say so in their terms.
    for {limits, message} <- [
          {%{limit: -1}, "invalid value for :limit: expected nil or a non-negative integer"},
          {%{limit: 2 ** 64}, "invalid value for :limit: expected at most 18446744073709551615"},
          {%{max_depth: 101}, "invalid value for :max_depth: expected at most 100"},
          {%{max_items: :many}, "invalid value for :max_items: expected a non-negative integer"},
          {%{rate: {1, :soon}},
           "invalid value for :rate: expected nil or {count, period_ms} with non-negative integers"},
          {%{rate: 5},
           "invalid value for :rate: expected nil or {count, period_ms} with non-negative integers"},
          {%{rate: {1_000_000_001, 1}},
           "invalid value for :rate: expected a count of at most 1000000000"},
          {%{rate: {1, 86_400_001}},
           "invalid value for :rate: expected a period of at most 86400000 ms"},
          {%{queue: [events: 2 ** 64]},
           "invalid value for :queue: expected :events of at most 18446744073709551615"},
          {%{queue: [bytes: 2 ** 64]},
           "invalid value for :queue: expected :bytes of at most 18446744073709551615"},
          {%{queue: [size: 1]},
           "invalid value for :queue: expected a keyword list with :events and/or :bytes as non-negative integers"},
          {%{queue: [{:events, 1} | :tail]},
           "invalid value for :queue: expected a keyword list with :events and/or :bytes as non-negative integers"},
          {%{skip_returns: :yes}, "invalid value for :skip_returns: expected a boolean"}
        ] do
      assert_raise ArgumentError, message, fn -> Tracer.new_session(self(), limits) end
    end

    assert_raise ArgumentError, "invalid value for :max_items: expected at most 4294967295", fn ->
      Tracer.roundtrip([1], %{max_items: 2 ** 32})
    end

    # A struct with these keys will do; other keys are ignored.
    Tracer.close(
      Tracer.new_session(self(), %{__struct__: SomeLimits, limit: nil, rate: nil, other: :ignored})
    )

    resource = Tracer.new_session(self(), %{})
    assert_raise ArgumentError, fn -> Tracer.drain(resource, 0) end
    assert_raise ArgumentError, fn -> Tracer.drain(make_ref(), 10) end
  end

  describe "term copying" do
    @caps %{}

    test "round-trips every kind of term exactly when under the caps" do
      {:ok, port} = :gen_udp.open(0)
      on_exit(fn -> :gen_udp.close(port) end)

      remote_pid =
        :erlang.binary_to_term(
          <<131, 88, 100, 0, 9, "other@host", 1::32, 2::32, 3::32>>
          |> fix_node()
        )

      terms = [
        self(),
        remote_pid,
        port,
        make_ref(),
        &Enum.map/2,
        fn x -> x + 1 end,
        1.5,
        -0.0,
        12_345_678_901_234_567_890_123,
        -(2 ** 70),
        2 ** 62,
        -(2 ** 63),
        %{a: 1, b: [2, 3], c: %{d: {4}}},
        Map.new(1..40, &{&1, &1}),
        [1, 2 | 3],
        [1 | :tail],
        {},
        [],
        %{},
        "binary",
        <<1, 2, 3>>,
        <<1::3>>,
        :atom,
        {:nested, [{:deep, %{"k" => ["v"]}}]},
        ~c"charlist"
      ]

      for term <- terms do
        {copy, _bytes} = Tracer.roundtrip(term, @caps)
        assert copy === term, "round trip changed #{inspect(term)} into #{inspect(copy)}"
      end
    end

    test "cuts lists, tuples, maps and binaries at max_items / max_binary" do
      caps = %{max_items: 3, max_binary: 4}
      {list, _} = Tracer.roundtrip(Enum.to_list(1..10), caps)
      {tuple, _} = Tracer.roundtrip(List.to_tuple(Enum.to_list(1..10)), caps)
      {map, _} = Tracer.roundtrip(Map.new(1..10, &{&1, &1}), caps)
      {binary, _} = Tracer.roundtrip(String.duplicate("a", 100), caps)
      assert [1, 2, 3, %Cut{kind: :items}] = list
      assert %Cut{kind: :tuple, value: [1, 2, 3], size: 10} = tuple
      assert %Cut{kind: :map, value: kept, size: 10} = map
      assert map_size(kept) == 3 and Enum.all?(kept, fn {k, v} -> k == v and k in 1..10 end)
      assert %Cut{kind: :binary, value: "aaaa", size: 100} = binary
      copy = {list, tuple, binary}
      assert inspect(copy) =~ "[1, 2, 3, ...]"
      assert inspect(copy) =~ "{1, 2, 3, ...}"
      assert inspect(copy) =~ ~s("aaaa" <> ...)
    end

    test "cuts at max_depth" do
      {copy, _} = Tracer.roundtrip([[[[[:deep]]]]], %{max_depth: 2})
      assert [[%Cut{kind: :depth}]] = copy
      assert inspect(copy) == "[[...]]"
    end

    test "the byte budget bounds every event" do
      big = for i <- 1..1_000, do: {i, String.duplicate("x", 100)}

      {copy, bytes} =
        Tracer.roundtrip(big, %{max_items: 10_000, max_binary: 10_000, max_bytes: 2_000})

      assert bytes < 2_000 + 200
      assert Cut.cut?(copy)
    end

    test "a 10 MB argument costs about what a small one costs" do
      big = Enum.to_list(1..1_300_000)
      small = Enum.to_list(1..60)
      {big_copy, big_bytes} = Tracer.roundtrip(big, %{})
      {_small_copy, small_bytes} = Tracer.roundtrip(small, %{})
      assert length(big_copy) == 51
      assert big_bytes <= small_bytes + 16

      # Time is noisy here: compare many runs of each, with a wide margin.
      t_big = time(fn -> Tracer.roundtrip(big, %{}) end)
      t_small = time(fn -> Tracer.roundtrip(small, %{}) end)
      assert t_big < t_small * 20 + 1_000_000, "big: #{t_big} ns, small: #{t_small} ns"
    end
  end

  defp time(fun) do
    {us, _} = :timer.tc(fn -> for _ <- 1..200, do: fun.() end)
    us * 1000 / 200
  end

  defp fix_node(<<131, 88, 100, len::16, node::binary-size(len), rest::binary>>),
    do: <<131, 88, 119, len, node::binary, rest::binary>>
end
