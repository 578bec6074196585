defmodule KinoTrace.Plan.FunctionsTest do
  use ExUnit.Case, async: true

  alias KinoTrace.Pattern
  alias KinoTrace.Plan.Functions

  doctest Functions
  doctest KinoTrace.Pattern.Generated

  defp parse!(input), do: input |> Pattern.parse() |> elem(1)

  # A plan without tail-call cycles anywhere, to test the covering merge alone.
  defp build(patterns, returns \\ [{:return_trace}]),
    do:
      Functions.build(Enum.map(patterns, &parse!/1), returns, [],
        cycles: fn _ -> MapSet.new() end
      )

  test "each target gets the clauses of every pattern that covers it, broadest first" do
    plan = build(["M.f(1)", "M", "M.f/1", "M.g(x) when x > 1", "N.h/2"])

    assert [{{M, :_, :_}, _} | rest] = plan.steps
    targets = Enum.map(rest, &elem(&1, 0))
    assert Enum.sort(targets) == Enum.sort([{M, :f, 1}, {M, :g, 1}, {N, :h, 2}])

    {_, f1} = List.keyfind(plan.steps, {M, :f, 1}, 0)
    assert Enum.sort(f1) == Enum.sort([{:_, [], [{:return_trace}]}, {[1], [], [{:return_trace}]}])

    {_, g1} = List.keyfind(plan.steps, {M, :g, 1}, 0)
    assert {[:"$1"], [{:>, :"$1", 1}], [{:return_trace}]} in g1
    assert {:_, [], [{:return_trace}]} in g1
  end

  test "one step per distinct target, whatever the number of patterns" do
    # 2 000 texts parsed once, each given ten times: parsing (~0.4 ms a text) is not what
    # is measured here, and 20 000 parses took over the test's minute on a loaded machine
    parsed = for i <- 1..2_000, do: parse!("M.f(#{i})")
    patterns = List.flatten(List.duplicate(parsed, 10))
    plan = Functions.build(patterns, [{:return_trace}], [], cycles: fn _ -> MapSet.new() end)
    assert [{{M, :f, 1}, spec}] = plan.steps
    assert length(spec) == 2_000
  end

  test "the cycles of each module are looked up once" do
    me = self()
    patterns = for m <- [A, B], f <- 1..500, do: parse!({m, :"f#{f}", 1})

    Functions.build(patterns, [{:exception_trace}], [],
      cycles: fn m ->
        send(me, {:looked_up, m})
        MapSet.new([{:f1, 1}])
      end
    )

    assert_received {:looked_up, A}
    assert_received {:looked_up, B}
    refute_received {:looked_up, _}
  end

  test "functions on a tail-call cycle get no return actions unless named with force: true" do
    cycles = fn M -> MapSet.new([{:loop, 1}, {:loop, 2}]) end
    patterns = Enum.map(["M", "M.loop/1"], &parse!/1)

    plan =
      Functions.build(patterns, [{:exception_trace}], [{:message, {:caller}}], cycles: cycles)

    assert plan.steps == [
             {{M, :_, :_}, [{:_, [], [{:exception_trace}, {:message, {:caller}}]}]},
             {{M, :loop, 1}, [{:_, [], [{:message, {:caller}}]}]},
             {{M, :loop, 2}, [{:_, [], [{:message, {:caller}}]}]}
           ]

    assert plan.no_returns == MapSet.new([{M, :loop, 1}, {M, :loop, 2}])

    forced = Functions.build(patterns, [{:exception_trace}], [], cycles: cycles, force: true)

    assert {_, [{:_, [], [{:exception_trace}]}, {:_, [], []}]} =
             List.keyfind(forced.steps, {M, :loop, 1}, 0)

    # loop/2 is not named
    assert {_, [{:_, [], []}]} = List.keyfind(forced.steps, {M, :loop, 2}, 0)
    assert forced.no_returns == MapSet.new([{M, :loop, 2}])

    # a name without arity names every arity
    by_name =
      Functions.build([parse!({M, :loop, :_})], [{:return_trace}], [],
        cycles: cycles,
        force: true
      )

    assert by_name.no_returns == MapSet.new()
  end

  test "without return actions nothing is looked up and nothing is overridden" do
    plan = Functions.build([parse!("M")], [], [], cycles: fn _ -> flunk("looked up") end)
    assert plan.steps == [{{M, :_, :_}, [{:_, [], []}]}]
    assert plan.no_returns == MapSet.new()
  end

  test "a module whose code is unknown is traced with returns" do
    plan =
      Functions.build([parse!("M.loop/1")], [{:return_trace}], [], cycles: fn _ -> :unknown end)

    assert plan.steps == [{{M, :loop, 1}, [{:_, [], [{:return_trace}]}]}]
  end
end
