defmodule KinoTrace.Tracer.DecoderTest do
  use ExUnit.Case, async: true

  alias Kino.Trace.Event
  alias KinoTrace.Tracer.Decoder

  doctest Decoder
  doctest KinoTrace.Tracer.RawEvent

  # Raw events as KinoTrace.Tracer.drain/2 returns them.
  defp call(pid, t, {m, f, args}, caller \\ :undefined),
    do: {:call, pid, t, 1, m, f, length(args), args, caller}

  defp ret(pid, t, {m, f, a}, value), do: {:return_from, pid, t, 1, m, f, a, :undefined, value}
  defp exc(pid, t, {m, f, a}, value), do: {:exception_from, pid, t, 1, m, f, a, :undefined, value}

  defp decode(raw), do: Decoder.decode(Decoder.new(), raw) |> elem(0)

  setup do
    %{a: spawn(fn -> :ok end), b: spawn(fn -> :ok end)}
  end

  test "numbers events and pairs a call with its return", %{a: a} do
    [c, r] = decode([call(a, 1_000, {M, :f, [1]}), ret(a, 5_500, {M, :f, 1}, :ok)])

    assert %Event{
             id: 1,
             kind: :call,
             pid: ^a,
             module: M,
             function: :f,
             arity: 1,
             args: [1],
             depth: 0
           } = c

    assert %Event{
             id: 2,
             kind: :return,
             return: :ok,
             call_id: 1,
             duration: 4_500,
             depth: 0,
             arity: 1
           } = r

    assert c.node == node()
    assert c.monotonic == 1_000
    assert c.scheduler == 1
  end

  test "nested calls get increasing depths and pair inside out", %{a: a} do
    raw = [
      call(a, 1, {M, :fact, [2]}),
      call(a, 2, {M, :fact, [1]}),
      call(a, 3, {M, :fact, [0]}),
      ret(a, 4, {M, :fact, 1}, 1),
      ret(a, 6, {M, :fact, 1}, 1),
      ret(a, 9, {M, :fact, 1}, 2)
    ]

    events = decode(raw)

    assert Enum.map(events, &{&1.kind, &1.depth}) == [
             call: 0,
             call: 1,
             call: 2,
             return: 2,
             return: 1,
             return: 0
           ]

    assert Enum.map(Enum.drop(events, 3), &{&1.call_id, &1.duration}) == [{3, 1}, {2, 4}, {1, 8}]
  end

  test "pairing carries over from one batch to the next", %{a: a} do
    {[c], decoder} = Decoder.decode(Decoder.new(), [call(a, 10, {M, :f, []})])
    {[r], decoder} = Decoder.decode(decoder, [ret(a, 25, {M, :f, 0}, :x)])
    assert r.call_id == c.id
    assert r.duration == 15
    assert r.id == c.id + 1
    {[c2], _} = Decoder.decode(decoder, [call(a, 30, {M, :f, []})])
    assert c2.depth == 0
    assert c2.id == 3
  end

  test "each process has its own stack", %{a: a, b: b} do
    events =
      decode([
        call(a, 1, {M, :f, []}),
        call(b, 2, {M, :f, []}),
        call(b, 3, {M, :g, []}),
        ret(a, 4, {M, :f, 0}, :a),
        ret(b, 5, {M, :g, 0}, :bg),
        ret(b, 6, {M, :f, 0}, :bf)
      ])

    assert Enum.map(events, &{&1.pid == a, &1.kind, &1.depth, &1.call_id}) == [
             {true, :call, 0, nil},
             {false, :call, 0, nil},
             {false, :call, 1, nil},
             {true, :return, 0, 1},
             {false, :return, 1, 3},
             {false, :return, 0, 2}
           ]
  end

  test "a batch is ordered by monotonic time first", %{a: a} do
    [c, r] = decode([ret(a, 20, {M, :f, 0}, :ok), call(a, 10, {M, :f, []})])
    assert {c.kind, r.kind} == {:call, :return}
    assert r.call_id == c.id
    assert r.duration == 10
  end

  test "an exception pairs like a return and carries {class, reason}", %{a: a} do
    [c, e] = decode([call(a, 1, {M, :f, [:x]}), exc(a, 3, {M, :f, 1}, {:error, :badarg})])

    assert %Event{
             kind: :exception,
             exception: {:error, :badarg},
             call_id: id,
             duration: 2,
             depth: 0
           } = e

    assert id == c.id
  end

  test "a return unwinds frames whose returns never came", %{a: a} do
    events =
      decode([
        call(a, 1, {M, :outer, []}),
        call(a, 2, {M, :inner, []}),
        ret(a, 5, {M, :outer, 0}, :ok),
        call(a, 6, {M, :next, []})
      ])

    assert [_, _, %Event{kind: :return, call_id: 1, depth: 0}, %Event{kind: :call, depth: 0}] =
             events
  end

  test "a return without its call is kept, unpaired", %{a: a} do
    [r] = decode([ret(a, 5, {M, :f, 0}, :ok)])
    assert %Event{kind: :return, call_id: nil, duration: nil, depth: 0, return: :ok} = r
  end

  test "the caller is kept when it is an MFA", %{a: a} do
    [c1, c2, c3] =
      decode([
        call(a, 1, {M, :f, []}, {Caller, :run, 2}),
        call(a, 2, {M, :g, []}, true),
        call(a, 3, {M, :h, []}, :undefined)
      ])

    assert c1.caller == {Caller, :run, 2}
    assert c2.caller == nil
    assert c3.caller == nil
  end

  test "caller: :line's one-frame stack trace gives the caller with the file and line", %{a: a} do
    frame = fn location -> [{Caller, :run, 2, location}] end
    cut = %Kino.Trace.Cut{kind: :items}

    raw = [
      call(a, 1, {M, :f, []}, frame.(file: ~c"lib/caller.ex", line: 12)),
      # no line information (code compiled without it)
      call(a, 2, {M, :f, []}, frame.([])),
      # a file name longer than :max_items keeps its first characters
      call(a, 3, {M, :f, []}, frame.(file: ~c"lib/ca" ++ [cut], line: 12)),
      # the location nested deeper than :max_depth
      call(a, 4, {M, :f, []}, frame.(%Kino.Trace.Cut{kind: :depth})),
      call(a, 5, {M, :f, []}, frame.(file: ~c"lib/caller_ü.ex", line: 7)),
      # backtrace_depth 0: no frame
      call(a, 6, {M, :f, []}, [])
    ]

    assert Enum.map(decode(raw), & &1.caller) == [
             {Caller, :run, 2, {"lib/caller.ex", 12}},
             {Caller, :run, 2},
             {Caller, :run, 2, {"lib/ca...", 12}},
             {Caller, :run, 2},
             {Caller, :run, 2, {"lib/caller_ü.ex", 7}},
             nil
           ]
  end

  test "time is system time in microseconds" do
    decoder = Decoder.new()
    mono = System.monotonic_time(:nanosecond)
    [c] = Decoder.decode(decoder, [call(self(), mono, {M, :f, []})]) |> elem(0)
    assert c.time == div(mono + :erlang.time_offset(:nanosecond), 1000)
    assert abs(c.time - System.os_time(:microsecond)) < 10_000_000
  end

  test "registered names are looked up, :undefined becomes nil" do
    name = :"kino_trace_decoder_test_#{System.unique_integer([:positive])}"
    Process.register(self(), name)
    [c] = decode([call(self(), 1, {M, :f, []})])
    assert c.name == name

    [e] = decode([{:call, :undefined, 1, 0, :undefined, :undefined, 0, [], :undefined}])
    assert {e.pid, e.module, e.function, e.name} == {nil, nil, nil, nil}
  end

  test "message and process events", %{a: a, b: b} do
    [send, recv, spawn, link, reg, exit] =
      decode([
        {:send, a, 1, 0, :undefined, :undefined, 0, :hello, b},
        {:receive, a, 2, 0, :undefined, :undefined, 0, :hi, :undefined},
        {:spawn, a, 3, 0, :undefined, :undefined, 0, b, {M, :f, [1]}},
        {:link, a, 4, 0, :undefined, :undefined, 0, b, :undefined},
        {:register, a, 5, 0, :undefined, :undefined, 0, :name, :undefined},
        {:exit, a, 6, 0, :undefined, :undefined, 0, :normal, :undefined}
      ])

    assert %Event{kind: :send, data: :hello, peer: ^b} = send
    assert %Event{kind: :receive, data: :hi} = recv
    assert %Event{kind: :spawn, peer: ^b, data: {M, :f, [1]}} = spawn
    assert %Event{kind: :link, peer: ^b} = link
    assert %Event{kind: :register, data: :name} = reg
    assert %Event{kind: :exit, data: :normal} = exit
    assert Event.mfa(send) == nil
  end

  test "an exit forgets the process's open calls", %{a: a} do
    {_, decoder} =
      Decoder.decode(Decoder.new(), [call(a, 1, {M, :f, []}), call(a, 2, {M, :g, []})])

    {_, decoder} =
      Decoder.decode(decoder, [{:exit, a, 3, 0, :undefined, :undefined, 0, :killed, :undefined}])

    assert decoder.stacks == %{}
  end

  test "return_to has the current depth", %{a: a} do
    [_, rt] =
      decode([
        call(a, 1, {M, :f, []}),
        {:return_to, a, 2, 0, M, :caller, 1, :undefined, :undefined}
      ])

    assert %Event{kind: :return_to, module: M, function: :caller, arity: 1, depth: 1} = rt
  end

  test "very deep recursion keeps a bounded stack", %{a: a} do
    calls = for i <- 1..600, do: call(a, i, {M, :f, [i]})
    {events, decoder} = Decoder.decode(Decoder.new(), calls)
    assert List.last(events).depth == 512
    {depth, n, frames} = decoder.stacks[a]
    assert depth == 512 and n == length(frames) and n <= 512
  end

  test "calls of functions traced without returns open no frame; other calls still pair", %{a: a} do
    loop = {M, :loop, 1}
    decoder = Decoder.no_returns(Decoder.new(), MapSet.new([loop]))

    raw =
      [call(a, 1, {M, :f, []})] ++
        for(t <- 2..1_000, do: call(a, t, {M, :loop, [t]})) ++
        [{:return_from, a, 1_001, 0, M, :f, 0, :undefined, :ok}]

    {events, decoder} = Decoder.decode(decoder, raw)

    assert [%Event{kind: :call, depth: 0, id: f_id} | rest] = events
    {loops, [ret]} = Enum.split(rest, -1)
    assert Enum.all?(loops, &(&1.depth == 1))
    assert %Event{kind: :return, call_id: ^f_id, depth: 0, duration: 1_000} = ret
    assert decoder.stacks == %{}
  end

  test "unpair/2 forgets a process's open calls and opens none for its later calls", %{a: a, b: b} do
    {_, decoder} =
      Decoder.decode(Decoder.new(), [call(a, 1, {M, :f, []}), call(b, 2, {M, :f, []})])

    decoder = Decoder.unpair(decoder, a)
    {events, decoder} = Decoder.decode(decoder, for(t <- 3..5, do: call(a, t, {M, :f, []})))
    assert Enum.map(events, & &1.depth) == [0, 0, 0]
    assert Map.keys(decoder.stacks) == [b]
    assert {[^b], _} = Decoder.take_callers(decoder)
  end

  test "take_callers/1 holds a bounded number of processes" do
    raw = for i <- 1..1_000, do: call(:c.pid(0, 10_000 + i, 0), i, {M, :f, []})
    {_, decoder} = Decoder.decode(Decoder.new(pairing: false), raw)
    {callers, decoder} = Decoder.take_callers(decoder)
    assert length(callers) == 256
    assert {[], _} = Decoder.take_callers(decoder)
  end
end
