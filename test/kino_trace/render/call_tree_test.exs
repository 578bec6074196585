defmodule KinoTrace.Render.CallTreeTest do
  use ExUnit.Case, async: true

  alias Kino.Trace.Event
  alias KinoTrace.Render.{CallTree, Flame}

  doctest CallTree
  doctest KinoTrace.Render.Source
  doctest KinoTrace.Latency

  defp pid, do: :c.pid(0, 250, 0)

  defp call(id, f, depth, pid \\ pid()),
    do: %Event{id: id, kind: :call, pid: pid, module: M, function: f, arity: 0, depth: depth}

  defp return(id, f, call_id, duration, depth, pid \\ pid()),
    do: %Event{
      id: id,
      kind: :return,
      pid: pid,
      module: M,
      function: f,
      arity: 0,
      call_id: call_id,
      duration: duration,
      depth: depth
    }

  defp shape(nodes), do: Enum.map(nodes, &{elem(&1.mfa, 1), &1.duration, shape(&1.children)})

  test "a window that starts inside calls: the first call is a root, and the calls it makes nest under it" do
    events = [
      call(10, :c, 3),
      call(11, :d, 4),
      return(12, :d, 11, 100, 4),
      return(13, :c, 10, 300, 3),
      call(14, :e, 2)
    ]

    pid = pid()
    assert [{^pid, roots}] = CallTree.build(events)
    assert shape(roots) == [{:c, 300, [{:d, 100, []}]}, {:e, nil, []}]
  end

  test "a call with no open call one level up (its parent forgotten) is a root, not a child of a deeper call" do
    events = [call(1, :a, 0), call(2, :b, 2), call(3, :c, 1)]
    pid = pid()
    assert [{^pid, roots}] = CallTree.build(events)
    assert shape(roots) == [{:a, nil, [{:c, nil, []}]}, {:b, nil, []}]
  end

  test "processes apart, in the order they first called" do
    other = :c.pid(0, 251, 0)

    events = [
      call(1, :a, 0, other),
      call(2, :b, 0),
      return(3, :a, 1, 50, 0, other),
      return(4, :b, 2, 70, 0)
    ]

    pid = pid()
    assert [{^other, [a]}, {^pid, [b]}] = CallTree.build(events)
    assert {a.duration, b.duration} == {50, 70}
  end

  test "self and total: an unknown duration is the known time of what it called" do
    events = [call(1, :a, 0), call(2, :b, 1), return(3, :b, 2, 40, 1)]
    pid = pid()
    assert [{^pid, [a]}] = CallTree.build(events)
    assert {CallTree.total(a), CallTree.self(a)} == {40, 0}
    assert Flame.stacks([{pid, [a]}]) == [{["M.a/0 [no return]", "M.b/0"], 40}]
  end

  test "a frame never holds a separator of the folded format (a line break is escaped)" do
    node = %{mfa: {M, :"a;b\nc", 0}, duration: 1, children: []}
    assert Flame.frame(node) == ~S(M."a,b\nc"/0)
  end
end

defmodule KinoTrace.Stats.LatencyTest do
  use ExUnit.Case, async: true

  alias Kino.Trace.Event
  alias KinoTrace.Latency

  test "at most 2 000 functions are kept; the events of the others are counted" do
    events =
      for a <- 0..2_001, e <- [:call, :return] do
        %Event{
          id: 2 * a + if(e == :call, do: 1, else: 2),
          kind: e,
          module: M,
          function: :f,
          arity: a
        }
        |> then(&if(e == :return, do: %{&1 | call_id: &1.id - 1, duration: 10}, else: &1))
      end

    acc = Latency.add(Latency.new(), events)
    assert map_size(Latency.report(acc)) == 2_000
    assert acc.functions_left_out == 4
  end

  test "a return whose call came before the first event still counts, as a call of the events" do
    events = [
      %Event{
        id: 7,
        kind: :return,
        module: M,
        function: :f,
        arity: 0,
        call_id: 3,
        duration: 2_000
      },
      %Event{id: 8, kind: :call, module: M, function: :f, arity: 0}
    ]

    assert %{{M, :f, 0} => %{count: 1, unknown: 1, p50: 2.0}} =
             Latency.report(Latency.add(Latency.new(), events))
  end
end
