defmodule KinoTrace.Widget.StatsPayloadTest do
  use ExUnit.Case, async: true

  alias Kino.Trace.Stats.Snapshot
  alias KinoTrace.Stats.Table
  alias KinoTrace.Widget.StatsPayload

  doctest KinoTrace.Stats.Options
  doctest KinoTrace.Stats.Targets
  doctest Kino.Trace.Stats.Snapshot
  doctest Kino.Trace.Stats.Row
  doctest KinoTrace.Stats.Table
  doctest KinoTrace.Widget.StatsPayload

  defp a, do: :c.pid(0, 9001, 0)
  defp b, do: :c.pid(0, 9002, 0)

  defp raw do
    {a, b} = {a(), b()}

    [
      {{MyApp.Repo, :get, 2},
       %{
         call_time: [{a, 600, 0, 30_000}, {b, 400, 1, 10_000}],
         call_memory: [{a, 600, 1_200}, {b, 400, 800}]
       }},
      {{MyApp.Repo, :"-get/2-fun-0-", 1},
       %{call_time: [{a, 3, 0, 90}], call_memory: [{a, 3, 0}]}},
      {{:ets, :lookup, 2}, %{call_time: [{b, 10, 0, 10}], call_memory: [{b, 10, 30}]}},
      {{MyApp.Repo, :unused, 0}, %{call_time: [], call_memory: []}},
      {{MyApp.Repo, :gone, 0}, %{call_time: false, call_memory: :undefined}}
    ]
  end

  defp snapshot(opts \\ []),
    do:
      Snapshot.build(
        raw(),
        Keyword.merge(
          [
            id: 7,
            patterns: ["MyApp.Repo", ":ets.lookup/2"],
            elapsed_us: 1_500_000,
            taken_at: 123
          ],
          opts
        )
      )

  describe "Snapshot.build/2" do
    test "sums per process, converts seconds to µs, drops uncalled functions, sorts by time" do
      s = snapshot()

      assert Enum.map(s.rows, & &1.mfa) == [
               {MyApp.Repo, :get, 2},
               {MyApp.Repo, :"-get/2-fun-0-", 1},
               {:ets, :lookup, 2}
             ]

      [get | _] = s.rows
      assert get.calls == 1000
      assert get.time_us == 30_000 + 1_010_000
      assert get.per_call_us == 1040.0
      assert get.memory_words == 2000
      assert get.per_call_words == 2.0
      assert Enum.map(get.processes, & &1.pid) == [b(), a()]
      assert {s.calls, s.time_us, s.memory_words} == {1013, 1_040_100, 2030}
      assert_in_delta Enum.sum(Enum.map(s.rows, & &1.time_share)), 1.0, 1.0e-12
    end

    test "sorts by calls when time is not measured" do
      s = Snapshot.build(raw(), time?: false)
      assert Enum.map(s.rows, & &1.calls) == [1000, 10, 3]
      assert Enum.all?(s.rows, &(&1.time_us == nil and &1.time_share == nil))
      assert s.time_us == nil
    end

    test "counts from call_count when it is the only counter" do
      s =
        Snapshot.build([{{M, :f, 0}, %{call_count: 42}}, {{M, :g, 0}, %{call_count: 0}}],
          time?: false,
          memory?: false
        )

      assert [%{mfa: {M, :f, 0}, calls: 42, processes: []}] = s.rows
    end
  end

  describe "StatsPayload.snapshot/2" do
    test "is JSON-able: only strings, numbers, booleans, nil, lists and atom-keyed maps" do
      payload = StatsPayload.snapshot(snapshot())
      assert json_able?(payload)
      assert payload.measured == %{time: true, memory: true, latency: false}

      assert payload.totals == %{
               calls: 1013,
               functions: 3,
               time_us: 1_040_100,
               memory_words: 2030
             }

      assert payload.rows_omitted == 0

      assert {payload.id, payload.patterns, payload.elapsed_us} ==
               {7, ["MyApp.Repo", ":ets.lookup/2"], 1_500_000}
    end

    test "rows carry the function, figures and shares" do
      [get, fun, ets] = StatsPayload.snapshot(snapshot()).rows

      assert %{
               key: "MyApp.Repo.get/2",
               module: "MyApp.Repo",
               function: "get",
               arity: 2,
               calls: 1000
             } = get

      assert get.time_share == Float.round(1_040_000 / 1_040_100, 4)
      assert get.memory_share == Float.round(2000 / 2030, 4)
      assert fun.key == ~s(MyApp.Repo."-get/2-fun-0-"/1)
      assert fun.name == "anonymous fn/1 in MyApp.Repo.get/2"

      assert %{key: ":ets.lookup/2", module: ":ets", function: "lookup", per_call_words: 3.0} =
               ets
    end

    test "per-process drill-down, with shares of the row and the rest summed" do
      [get | _] = StatsPayload.snapshot(snapshot()).rows
      assert [b, a] = get.processes

      assert b == %{
               pid: "#PID<0.9002.0>",
               name: nil,
               calls: 400,
               time_us: 1_010_000,
               time_share: 0.9712,
               memory_words: 800,
               memory_share: 0.4,
               latency: nil
             }

      assert a.memory_share == 0.6
      assert get.processes_omitted == nil

      [get | _] = StatsPayload.snapshot(snapshot(), processes: 1).rows
      assert [%{pid: "#PID<0.9002.0>"}] = get.processes
      assert get.processes_omitted == %{count: 1, calls: 600, time_us: 30_000, memory_words: 1200}
    end

    test "limits rows" do
      payload = StatsPayload.snapshot(snapshot(), rows: 1)
      assert [%{key: "MyApp.Repo.get/2"}] = payload.rows
      assert payload.rows_omitted == 2
      assert payload.totals.functions == 3
    end

    test "unmeasured figures are nil" do
      [row | _] = StatsPayload.snapshot(snapshot(memory?: false)).rows
      assert %{memory_words: nil, per_call_words: nil, memory_share: nil} = row
      assert Enum.all?(row.processes, &(&1.memory_words == nil and &1.memory_share == nil))
    end

    test "a registered process shows its name" do
      Process.register(self(), :stats_payload_test_proc)
      s = Snapshot.build([{{M, :f, 0}, %{call_time: [{self(), 1, 0, 5}]}}], memory?: false)
      assert [%{processes: [%{name: ":stats_payload_test_proc"}]}] = StatsPayload.snapshot(s).rows
    end
  end

  describe "Table.format/2" do
    test "lists functions by time with a total line" do
      text = Table.format(snapshot())
      lines = String.split(text, "\n")
      assert hd(lines) == "3 functions, 1013 calls in 1.5 s"

      assert Enum.at(lines, 1) =~
               ~r/^FUNCTION\s+CALLS\s+TIME µs\s+PER CALL\s+%TIME\s+MEMORY words\s+PER CALL$/

      assert Enum.at(lines, 2) =~
               ~r/^MyApp.Repo.get\/2\s+1000\s+1040000\s+1040.00\s+99.99\s+2000\s+2.00$/

      assert List.last(lines) =~ ~r/^TOTAL\s+1013\s+1040100\s+100.00\s+2030$/
    end

    test "leaves out columns not measured, limits rows, shows processes on demand" do
      text = Table.format(snapshot(time?: false), limit: 1, processes: true)
      refute text =~ "TIME"
      lines = String.split(text, "\n")
      assert Enum.at(lines, 2) =~ ~r/^MyApp.Repo.get\/2\s+1000\s+2000\s+2.00$/
      assert Enum.at(lines, 3) =~ ~r/^  #PID<0.9001.0>\s+600\s+1200\s+2.00$/
      assert Enum.at(lines, 4) =~ ~r/^  #PID<0.9002.0>\s+400\s+800\s+2.00$/
      assert Enum.at(lines, 5) =~ ~r/^\(2 more\)\s+13\s+30$/
    end

    test "an empty snapshot" do
      assert Table.format(Snapshot.build([], elapsed_us: 2_000)) ==
               "0 functions, 0 calls in 2.0 ms\nFUNCTION  CALLS  TIME µs  PER CALL   %TIME  MEMORY words  PER CALL\nTOTAL         0        0            100.00             0"
    end
  end

  defp json_able?(v) when is_binary(v) or is_number(v) or is_boolean(v) or is_nil(v), do: true
  defp json_able?(v) when is_list(v), do: Enum.all?(v, &json_able?/1)

  defp json_able?(v) when is_map(v) and not is_struct(v),
    do: Enum.all?(v, fn {k, x} -> is_atom(k) and json_able?(x) end)

  defp json_able?(_), do: false
end
