defmodule KinoTrace.Render.PairsTest do
  # One send/receive (spawn, link) pairing rule, KinoTrace.Render.Pairs, for both sequence
  # views: Mermaid's diagram draws a pair once, and the widget's payload names each
  # event's earlier side (`pair`), which the sequence tab draws. The same sequences run
  # through both here; assets/test/fixtures/pairs.json carries them, with the rows the
  # payload gives and what the diagram drew, to assets/test/pairs.test.js, which checks
  # that the sequence tab draws the same.
  use ExUnit.Case, async: true

  alias Kino.Trace.Event
  alias KinoTrace.Render.Pairs
  alias KinoTrace.Widget.Payload

  @fixture Path.expand("../../../assets/test/fixtures/pairs.json", __DIR__)

  # (pids cannot be module attributes used in functions)
  defp a, do: :c.pid(0, 64_001, 0)
  defp b, do: :c.pid(0, 64_002, 0)
  defp c, do: :c.pid(0, 64_003, 0)
  @t 1_700_000_000_000_000

  # name -> events, each {kind, pid, fields}; ids and times (10 µs apart) are added
  defp sequences do
    [
      {"send then receive", [{:send, a(), peer: b(), data: :ping}, {:receive, b(), data: :ping}]},
      {"receive a little before its send",
       [{:receive, b(), data: :go}, {:send, a(), peer: b(), data: :go, time: -5}]},
      {"receive long before an equal send: not its receive",
       [{:receive, b(), data: :go}, {:send, a(), peer: b(), data: :go, time: 500_000}]},
      {"equal messages, first in first out, per receiver",
       [
         {:send, a(), peer: b(), data: :tick},
         {:send, a(), peer: b(), data: :tick},
         {:send, a(), peer: c(), data: :tick},
         {:receive, c(), data: :tick},
         {:receive, b(), data: :tick},
         {:receive, b(), data: :tick},
         {:receive, b(), data: :tick}
       ]},
      {"messages that differ only past the rendering limits",
       [
         {:send, a(), peer: b(), data: Enum.to_list(1..30)},
         {:send, a(), peer: b(), data: Enum.to_list(1..31)},
         {:receive, b(), data: Enum.to_list(1..31)},
         {:receive, b(), data: Enum.to_list(1..30)}
       ]},
      {"a send to a process that did not exist pairs with nothing",
       [{:send_to_non_existing, a(), peer: b(), data: :hello}, {:receive, b(), data: :hello}]},
      {"spawn, then spawned",
       [
         {:spawn, a(), peer: b(), data: {Enum, :sum, [[1]]}},
         {:spawned, b(), peer: a(), data: {Enum, :sum, [[1]]}}
       ]},
      {"spawned, then spawn",
       [
         {:spawned, b(), peer: a(), data: {Enum, :sum, [[1]]}},
         {:spawn, a(), peer: b(), data: {Enum, :sum, [[1]]}}
       ]},
      {"links and unlinks, either side first",
       [
         {:getting_linked, b(), peer: a()},
         {:link, a(), peer: b()},
         {:unlink, a(), peer: b()},
         {:getting_unlinked, b(), peer: a()},
         {:link, a(), peer: c()}
       ]}
    ]
  end

  defp events(specs) do
    specs
    |> Enum.with_index(1)
    |> Enum.map(fn {{kind, pid, fields}, id} ->
      {offset, fields} = Keyword.pop(fields, :time, 0)
      struct!(Event, [id: id, kind: kind, pid: pid, time: @t + id * 10 + offset] ++ fields)
    end)
  end

  # The widget's rows, in batches of `size`, with the pairing state carried over.
  defp rows(events, size) do
    {rows, _pairs} =
      events
      |> Enum.chunk_every(size)
      |> Enum.flat_map_reduce(Pairs.new(), &Payload.paired(&1, [], &2))

    rows
  end

  # What the diagram drew: arrows between processes, found receives, spawns and links.
  defp drawn(source) do
    lines = String.split(source, "\n")
    count = fn regex -> Enum.count(lines, &(&1 =~ regex)) end

    %{
      "message" => count.(~r/^  P\d+(->>|-x)P\d+: /),
      "found" => count.(~r/^  Note over P\d+: receive /),
      "spawn" => count.(~r/^  Note over P\d+(,P\d+)?: spawn/),
      "link" => count.(~r/^  Note over P\d+(,P\d+)?: (link|unlink|getting_)/)
    }
  end

  defp fixture do
    for {name, specs} <- sequences() do
      events = events(specs)

      rows =
        for row <- rows(events, length(events)),
            do:
              row |> Map.put(:peer_name, nil) |> Map.new(fn {k, v} -> {Atom.to_string(k), v} end)

      %{"name" => name, "rows" => rows, "drawn" => drawn(Kino.Trace.Mermaid.diagram(events))}
    end
  end

  test "the widget's rows pair the same events however the trace's batches fall" do
    for {name, specs} <- sequences() do
      events = events(specs)
      whole = rows(events, length(events)) |> Enum.map(& &1.pair)

      for size <- 1..3 do
        assert Enum.map(rows(events, size), & &1.pair) == whole, "#{name}, in batches of #{size}"
      end
    end
  end

  test "the pairs the widget is given are the pairs the diagram draws once" do
    for {name, specs} <- sequences() do
      events = events(specs)
      pairs = events |> rows(length(events)) |> Enum.count(& &1.pair)
      drawn = drawn(Kino.Trace.Mermaid.diagram(events))
      assert Enum.sum(Map.values(drawn)) == length(events) - pairs, name
    end
  end

  test "the rule's cases" do
    pairs = fn specs -> specs |> events() |> rows(1) |> Enum.map(& &1.pair) end

    assert pairs.([{:send, a(), peer: b(), data: :ping}, {:receive, b(), data: :ping}]) == [
             nil,
             1
           ]

    # a receive just before its send (another clock) pairs, one long before does not
    assert pairs.([{:receive, b(), data: :go}, {:send, a(), peer: b(), data: :go, time: -5}]) == [
             nil,
             1
           ]

    assert pairs.([{:receive, b(), data: :go}, {:send, a(), peer: b(), data: :go, time: 500_000}]) ==
             [nil, nil]

    # terms, not their text: lists that render alike pair with their own
    long = Enum.to_list(1..30)
    longer = Enum.to_list(1..31)

    assert pairs.([
             {:send, a(), peer: b(), data: long},
             {:send, a(), peer: b(), data: longer},
             {:receive, b(), data: longer},
             {:receive, b(), data: long}
           ]) == [nil, nil, 2, 1]

    assert pairs.([{:spawned, b(), peer: a()}, {:spawn, a(), peer: b()}]) == [nil, 1]

    assert pairs.([
             {:link, a(), peer: b()},
             {:link, a(), peer: b()},
             {:getting_linked, b(), peer: a()}
           ]) ==
             [nil, nil, 1]
  end

  test "two sides more than 10 000 events apart do not pair, and the state stays bounded" do
    send = %Event{id: 1, kind: :send, pid: a(), peer: b(), data: :late}
    others = for id <- 2..30_001, do: %Event{id: id, kind: :send, pid: a(), peer: c(), data: id}
    receive = %Event{id: 30_002, kind: :receive, pid: b(), data: :late}

    {partners, pairs} =
      Pairs.pair(Pairs.new(), Enum.map([send | others] ++ [receive], &{&1.id, &1}))

    assert List.last(partners) == nil
    assert pairs.waiting |> Map.values() |> Enum.map(&:queue.len/1) |> Enum.sum() <= 20_000
  end

  test "assets/test/fixtures/pairs.json is up to date (KINO_TRACE_WRITE_FIXTURES=1 rewrites it)" do
    fixture = fixture()

    if System.get_env("KINO_TRACE_WRITE_FIXTURES") == "1" do
      File.mkdir_p!(Path.dirname(@fixture))
      File.write!(@fixture, "[\n" <> Enum.map_join(fixture, ",\n", &JSON.encode!/1) <> "\n]\n")
    end

    assert JSON.decode!(File.read!(@fixture)) == JSON.decode!(JSON.encode!(fixture)),
           "run KINO_TRACE_WRITE_FIXTURES=1 mix test #{Path.relative_to_cwd(__ENV__.file)}"
  end
end
