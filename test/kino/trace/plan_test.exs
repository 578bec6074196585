defmodule Kino.Trace.PlanTest do
  use ExUnit.Case, async: true

  alias Kino.Trace.Plan

  doctest Kino.Trace.Plan
  doctest KinoTrace.History
  doctest KinoTrace.Plan.Nodes
  doctest KinoTrace.Remote

  # The plan is opaque to users (new!/3, check/2, summary/1); these are the engine's
  # functions and fields, which were its public docs' examples before (issue 35.4).
  describe "the engine's view of a plan" do
    test "its fields: calls, messages, limits, nodes" do
      plan = Plan.new!([calls: ["Enum.sum/1"]], return: false, exceptions: false, limit: 10)

      assert {Enum.map(plan.calls.patterns, &KinoTrace.Pattern.to_string/1), plan.calls.pids,
              plan.calls.flags} == {["Enum.sum/1"], [:all], [:call, :scheduler_id]}

      assert plan.calls.functions.steps == [{{Enum, :sum, 1}, [{:_, [], []}]}]
      assert plan.limits.limit == 10
      assert plan.nodes == [node()]
      assert {plan.what, plan.options[:limit]} == {[calls: ["Enum.sum/1"]], 10}

      plan = Plan.new!([messages: self()], pattern: "{:ok, _}")

      assert {plan.calls, plan.messages.targets, plan.messages.flags} ==
               {nil, [self()], [:send, :receive, :scheduler_id]}
    end

    test "part/2 and node_part!/3" do
      plan = Plan.new!([calls: ["Enum.sum/1"]], limit: 10)
      assert Plan.part(plan, node()) == %{plan | nodes: [node()]}

      part = Plan.node_part!(plan, node())
      assert part.nodes == [node()]
      assert part.calls.functions == plan.calls.functions
      assert part.limits == plan.limits
    end

    test "counters_parts!/2" do
      assert [{node, [_pattern], mfas, pids}] =
               Plan.counters_parts!(["Enum.sum/1"], pids: :all, local: true, force: false)

      assert {node, mfas, pids} == {node(), [{Enum, :sum, 1}], [:all]}
    end

    test "for_node/2 and remote?/1" do
      plan = Plan.new!([calls: ["Enum.sum/1"]], limit: 5)
      {what, options} = Plan.for_node(plan, history: 1)

      assert {what, options[:limit], options[:history], options[:nodes]} ==
               {[calls: ["Enum.sum/1"]], 5, 1, nil}

      refute Plan.remote?(plan)
    end

    test "put_patterns/2, process_flags/1 and pattern_opts/1" do
      plan = Plan.new!([calls: ["Enum.sum/1"]], [])
      {:ok, pattern} = KinoTrace.Pattern.parse("Enum.map/2")

      assert Enum.map(Plan.put_patterns(plan, [pattern]).calls.patterns, & &1.source) == [
               "Enum.map/2"
             ]

      plan = Plan.new!([calls: ["Enum.sum/1"], processes: self()], pids: :new)

      assert Plan.process_flags(plan) ==
               [{[:new], [:call, :scheduler_id]}, {[self()], [:procs, :scheduler_id]}]

      plan = Plan.new!([calls: ["Enum.sum/1"]], force: true)

      assert plan |> Plan.pattern_opts() |> Keyword.take([:force, :local, :max_bytes]) ==
               [force: true, local: true, max_bytes: 16384]
    end
  end
end
