defmodule KinoTrace.OpenCallsTest do
  # :kino_trace_open_calls, the one rule of a recorder's open calls (issue 37 item 2),
  # on both shapes it is given: decoded events (a session of this node) and raw events'
  # views (kino_trace_trigger:view/2, another node's agent). What real sessions show of
  # it is tested in record_test.exs and record_nodes_test.exs; these are the cases they
  # cannot make at will (drop marks, lost events, exits, the bounds).
  use ExUnit.Case, async: true

  alias Kino.Trace.Event

  defp call(pid, f, id),
    do: %Event{kind: :call, pid: pid, module: M, function: f, arity: 0, id: id}

  defp return(pid, f, id), do: %{call(pid, f, id) | kind: :return}

  defp track(open, events),
    do: Enum.reduce(events, open, &:kino_trace_open_calls.track(&2, &1, &1.id, &1))

  defp open_of(open, pid),
    do: for(e <- :kino_trace_open_calls.overwritten(open, pid, :none), do: e.function)

  # a raw event (kino_trace_raw_event.hrl) as the agent's worker sees it
  defp view(tag, pid, f, mark),
    do: :kino_trace_trigger.view({tag, pid, 0, 0, M, f, 0, [], nil, mark}, {nil, nil})

  test "a return pops its call and every call above it; overwritten/3 gives those before the ring's first" do
    p = self()
    open = :kino_trace_open_calls.new(100_000)
    open = track(open, [call(p, :a, 1), call(p, :b, 2), call(p, :c, 3), call(p, :d, 4)])
    assert open_of(open, p) == [:a, :b, :c, :d]
    assert for(e <- :kino_trace_open_calls.overwritten(open, p, 3), do: e.id) == [1, 2]
    # (d never returned: a tail call out of traced code)
    open = track(open, [return(p, :c, 5)])
    assert open_of(open, p) == [:a, :b]
    # a return with no open call of its function changes nothing
    assert open_of(track(open, [return(p, :x, 6)]), p) == [:a, :b]
    open = track(open, [return(p, :b, 7), return(p, :a, 8)])
    assert open_of(open, p) == []
    assert :kino_trace_open_calls.bytes(open) == 0
  end

  test "a lost event, a changed drop mark or an exit forgets the process's open calls" do
    p = self()
    q = spawn(fn -> :ok end)
    open = track(:kino_trace_open_calls.new(100_000), [call(p, :a, 1), call(q, :a, 2)])
    lost = track(open, [%{return(p, :b, 3) | lost: true}])
    assert {open_of(lost, p), open_of(lost, q)} == {[], [:a]}
    exit = %Event{kind: :exit, pid: p, id: 3}
    assert open_of(track(open, [exit]), p) == []
    assert :kino_trace_open_calls.bytes(track(open, [exit])) < :kino_trace_open_calls.bytes(open)

    # raw views: the mark noted with the first open call
    t = fn open, view -> :kino_trace_open_calls.track(open, view, 0, view) end
    raw = :kino_trace_open_calls.new(100_000)
    raw = t.(raw, view(:call, p, :a, 0))
    raw = t.(raw, view(:call, p, :b, 0))
    assert length(:kino_trace_open_calls.overwritten(raw, p, :none)) == 2
    raw = t.(raw, view(:call, p, :c, 1))
    assert [%{function: :c, mark: 1}] = :kino_trace_open_calls.overwritten(raw, p, :none)
    raw = t.(raw, view(:return_from, p, :c, 1))
    assert :kino_trace_open_calls.overwritten(raw, p, :none) == []
  end

  test "bounded: 32 calls a process (the outermost go), 1 000 processes, and its bytes" do
    p = self()
    deep = track(:kino_trace_open_calls.new(1_000_000), for(i <- 1..40, do: call(p, :"f#{i}", i)))
    assert open_of(deep, p) == for(i <- 9..40, do: :"f#{i}")

    many =
      track(
        :kino_trace_open_calls.new(10_000_000),
        for(i <- 1..1_001, do: call(:c.pid(0, i, 0), :a, i))
      )

    assert open_of(many, :c.pid(0, 1_001, 0)) == [:a]
    assert open_of(many, :c.pid(0, 1, 0)) == []

    one =
      :kino_trace_open_calls.bytes(track(:kino_trace_open_calls.new(1_000_000), [call(p, :a, 1)]))

    small = track(:kino_trace_open_calls.new(3 * one), for(i <- 1..4, do: call(p, :a, i)))
    assert :kino_trace_open_calls.bytes(small) <= 3 * one
    assert open_of(small, p) == []
  end
end
