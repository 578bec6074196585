defmodule PatternCompilerTarget do
  @moduledoc false
  # Functions these tests trace. The name must not start with Kino.Trace: those
  # modules are refused as tracer internals.
  def f(a), do: a
  def f(a, b), do: {a, b}
end

defmodule KinoTrace.Pattern.CompilerTest do
  # The pattern compiler against Elixir's own semantics: what Elixir matches, the
  # match spec matches, on real traces where it matters.
  use ExUnit.Case, async: true

  import KinoTraceTest.Helpers, only: [events_after: 2, calls: 1]

  alias KinoTrace.Pattern
  alias KinoTrace.Plan.{Functions, MessagePattern}

  doctest KinoTrace.Plan.MessagePattern

  defp parse!(text) do
    assert {:ok, %Pattern{} = pattern} = Pattern.parse(text)
    pattern
  end

  defp error(text) do
    assert {:error, message} = Pattern.parse(text)
    message
  end

  # Whether the match spec accepts a call with `args`, as the VM decides for a trace.
  defp matches?(%Pattern{} = pattern, args) do
    assert {:ok, result, [], []} =
             :erlang.match_spec_test(args, Pattern.match_spec(pattern, []), :trace)

    result == true
  end

  defp matches?(text, args) when is_binary(text), do: matches?(parse!(text), args)

  # What Elixir itself says: a function with this head and guard, compiled by Elixir.
  defp elixir_matches?(call, args) do
    "PatternCompilerTarget.f" <> head = call

    # (an unused variable in the head would warn)
    {fun, _} =
      ExUnit.CaptureIO.with_io(:stderr, fn ->
        Code.eval_string("""
        import Bitwise, warn: false
        fn
          #{head} -> true
          #{Enum.map_join(args, ", ", fn _ -> "_" end)} -> false
        end
        """)
      end)
      |> elem(0)

    apply(fun, args)
  end

  # The compiled pattern agrees with Elixir on every sample.
  defp agrees_with_elixir(call, samples) do
    pattern = parse!(call)

    for args <- samples do
      assert matches?(pattern, args) == elixir_matches?(call, args),
             "#{call} on #{inspect(args)}: match spec says #{matches?(pattern, args)}"
    end
  end

  defp message_matches?(text, message) do
    assert {:ok, specs} = MessagePattern.compile(text, false)
    assert {:ok, result, [], []} = :erlang.match_spec_test([self(), message], specs.send, :trace)

    assert {:ok, ^result, [], []} =
             :erlang.match_spec_test([node(), self(), message], specs.recv, :trace)

    result == true
  end

  describe "input the compiler cannot handle" do
    test "map update syntax is an error naming it, in guards, patterns and message patterns" do
      assert error("PatternCompilerTarget.f(m) when m == %{m | a: 1}") =~
               "map update syntax is not supported in trace patterns: %{m | a: 1}"

      assert error("PatternCompilerTarget.f(%URI{u | host: h})") =~
               "map update syntax is not supported in trace patterns: %URI{u | host: h}"

      assert {:error, message} = MessagePattern.compile("%URI{u | host: h}", false)
      assert message =~ "map update syntax is not supported in trace patterns: %URI{u | host: h}"

      assert_raise ArgumentError, ~r/map update syntax/, fn ->
        Pattern.parse_all!(["PatternCompilerTarget.f(%{m | a: 1})"])
      end

      assert_raise ArgumentError, ~r/map update syntax/, fn ->
        Kino.Trace.messages(:all, pattern: "%URI{u | host: h}")
      end
    end

    test "a struct literal in a guard is refused (Elixir would compare the whole struct)" do
      assert error("PatternCompilerTarget.f(u) when u == %URI{host: \"h\"}") =~
               "a struct in a guard is not supported in trace patterns"
    end

    test "set_patterns marks a line it cannot compile and the trace keeps running" do
      trace = Kino.Trace.calls(["PatternCompilerTarget.f/1"], pids: self(), return: false)
      session = trace.session

      assert [
               {"PatternCompilerTarget.f(x) when x > 1", :ok},
               {"PatternCompilerTarget.f(%URI{u | host: h})", {:error, message}}
             ] =
               Kino.Trace.set_patterns(trace, [
                 "PatternCompilerTarget.f(x) when x > 1",
                 "PatternCompilerTarget.f(%URI{u | host: h})"
               ])

      assert message =~ "map update syntax"
      assert Process.alive?(session)

      PatternCompilerTarget.f(1)
      PatternCompilerTarget.f(2)
      assert calls(events_after(trace, self())) == [{:f, [2]}]
      Kino.Trace.stop(trace)
    end
  end

  describe "several when clauses" do
    test "a guard that raises fails its own clause only, as in Elixir" do
      call = "PatternCompilerTarget.f(x) when hd(x) == 1 when is_atom(x)"
      pattern = parse!(call)
      assert length(Pattern.match_spec(pattern, [])) == 2
      assert matches?(pattern, [:a])
      assert matches?(pattern, [[1]])
      refute matches?(pattern, [[2]])
      refute matches?(pattern, ["a"])
      agrees_with_elixir(call, [[:a], [[1]], [[2]], ["a"], [[]]])
    end

    test "on a real trace, merged with another pattern of the same function" do
      trace =
        Kino.Trace.calls(
          [
            "PatternCompilerTarget.f(x) when hd(x) == 1 when is_atom(x)",
            "PatternCompilerTarget.f(x) when x == \"s\""
          ],
          pids: self()
        )

      for arg <- [:a, [1], [2], "s", 5], do: PatternCompilerTarget.f(arg)
      assert calls(events_after(trace, self())) == [{:f, [:a]}, {:f, [[1]]}, {:f, ["s"]}]
      Kino.Trace.stop(trace)
    end

    test "the plan keeps every clause of every pattern covering a target" do
      {patterns, []} =
        Pattern.parse_all!([
          "PatternCompilerTarget.f(x) when hd(x) == 1 when is_atom(x)",
          "PatternCompilerTarget.f(x) when x == 5 when x == 6",
          "PatternCompilerTarget.f(x, _) when x == 7"
        ])

      plan = Functions.build(patterns, [{:return_trace}], [])
      {_target, spec} = List.keyfind(plan.steps, {PatternCompilerTarget, :f, 1}, 0)
      assert length(spec) == 4

      for {arg, expected} <- [{:a, true}, {[1], true}, {5, true}, {6, true}, {7, false}] do
        assert {:ok, result, _, _} = :erlang.match_spec_test([arg], spec, :trace)
        assert result != false == expected, inspect(arg)
      end
    end

    test "in message patterns" do
      assert message_matches?("x when hd(x) == 1 when is_atom(x)", :a)
      assert message_matches?("x when hd(x) == 1 when is_atom(x)", [1])
      refute message_matches?("x when hd(x) == 1 when is_atom(x)", "a")

      # the :distributed preset applies to every clause: these are local messages
      assert {:ok, specs} = MessagePattern.compile("x when hd(x) == 1 when is_atom(x)", true)
      assert {:ok, false, [], []} = :erlang.match_spec_test([self(), :a], specs.send, :trace)
    end
  end

  describe "guards as Elixir has them" do
    test "ranges with negative bounds, decreasing ranges and steps" do
      samples =
        for x <- [-7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 1.0, :a], do: [x]

      for range <-
            ~w(-5..5 -5..-1 5..1 5..-5//-1 1..10//3 10..1//-3 -5..-1//2 1..1 3..3//2 1..10//-1 -1..-7//-2) do
        agrees_with_elixir("PatternCompilerTarget.f(x) when x in #{range}", samples)
        agrees_with_elixir("PatternCompilerTarget.f(x) when x not in #{range}", samples)
      end

      refute matches?("PatternCompilerTarget.f(x) when x in 1..10//3", [2])
      assert matches?("PatternCompilerTarget.f(x) when x in -5..5", [-5])
    end

    test "is_exception/1,2, is_struct/2 and is_non_struct_map/1" do
      samples = [
        [%ArgumentError{message: "m"}],
        [%RuntimeError{message: "m"}],
        [%{__struct__: "s", __exception__: true}],
        [%{__struct__: ArgumentError, __exception__: false}],
        [URI.parse("/")],
        [%{__struct__: "s"}],
        [%{}],
        [:a]
      ]

      for guard <- [
            "is_exception(x)",
            "is_exception(x, ArgumentError)",
            "not is_exception(x, 1)",
            "is_struct(x, URI)",
            "not is_struct(x, 1)",
            "is_non_struct_map(x)",
            "is_struct(x)"
          ] do
        agrees_with_elixir("PatternCompilerTarget.f(x) when #{guard}", samples)
      end

      refute matches?("PatternCompilerTarget.f(x) when is_exception(x)", [
               %{__struct__: "s", __exception__: true}
             ])
    end

    test "%_{} and %name{} only match an atom __struct__" do
      samples = [[URI.parse("/")], [%{__struct__: "s"}], [%{}], [%{__struct__: :a, k: 1}]]
      agrees_with_elixir("PatternCompilerTarget.f(%_{})", samples)
      agrees_with_elixir("PatternCompilerTarget.f(%name{})", samples)
      agrees_with_elixir("PatternCompilerTarget.f(%name{}) when name == URI", samples)
      refute matches?("PatternCompilerTarget.f(%_{})", [%{__struct__: "s"}])
    end

    test "Bitwise operators and functions" do
      samples = for x <- [0, 1, 2, 3, 5, 8, -1, 1.0], do: [x]

      for guard <- [
            "(x &&& 1) == 1",
            "(x ||| 2) == 3",
            "bxor(x, 3) == 0",
            "Bitwise.band(x, 4) == 0",
            "(x <<< 2) == 8",
            "(x >>> 1) == 1",
            "~~~x == -2",
            "Bitwise.bnot(x) == -2"
          ] do
        agrees_with_elixir("PatternCompilerTarget.f(x) when #{guard}", samples)
      end
    end
  end

  describe "atoms that match specs read as variables" do
    test "literal :\"$gen_call\" and :\"$gen_cast\" in message patterns" do
      pattern = ~S|{:"$gen_call", _, {:fetch, _}}|
      assert message_matches?(pattern, {:"$gen_call", {self(), make_ref()}, {:fetch, 1}})
      refute message_matches?(pattern, {:other, {self(), make_ref()}, {:fetch, 1}})
      assert message_matches?(~S|{:"$gen_cast", x} when x > 1|, {:"$gen_cast", 2})
      refute message_matches?(~S|{:"$gen_cast", x} when x > 1|, {:"$gen_cast", 1})
    end

    test "a literal :\"$1\" or :_ matches only that atom" do
      assert matches?(~S|PatternCompilerTarget.f(:"$1")|, [:"$1"])
      refute matches?(~S|PatternCompilerTarget.f(:"$1")|, [5])
      assert matches?(~S|PatternCompilerTarget.f(x, :"$1")|, [5, :"$1"])
      refute matches?(~S|PatternCompilerTarget.f(x, :"$1")|, [5, 5])
      refute matches?(~S|PatternCompilerTarget.f({:_, x}) when x > 0|, [{5, 1}])
      assert matches?(~S|PatternCompilerTarget.f({:_, x}) when x > 0|, [{:_, 1}])
      assert matches?(~S|PatternCompilerTarget.f(~w($1 $$)a)|, [[:"$1", :"$$"]])
      refute matches?(~S|PatternCompilerTarget.f(~w($1 $$)a)|, [[1, :"$$"]])
      assert matches?(~S|PatternCompilerTarget.f(%:"$1"{})|, [%{__struct__: :"$1"}])
      refute matches?(~S|PatternCompilerTarget.f(%:"$1"{})|, [%{__struct__: :b}])
    end

    test "as a map key it is an error naming it" do
      assert error(~S|PatternCompilerTarget.f(%{:"$1" => v})|) =~
               ~S|the atom :"$1" cannot be a map key in a trace pattern|
    end
  end
end
