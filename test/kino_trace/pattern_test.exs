defmodule PatternTestTarget do
  @moduledoc false
  # Functions the tests trace and check against. The name must not start with
  # Kino.Trace: those modules are refused as tracer internals.

  def fetch(table, key), do: {table, key}
  def pair(left, right), do: {left, right}
  def one(term), do: term
  def one(term, _other), do: term
  def calls_secret(term), do: secret(term)
  def local_capture, do: &one/1

  defmacro shout(term), do: term

  defp secret(term), do: term
end

defmodule KinoTrace.PatternTest do
  use ExUnit.Case, async: true

  alias KinoTrace.Pattern

  doctest KinoTrace.Pattern

  defp parse!(input) do
    assert {:ok, %Pattern{} = pattern} = Pattern.parse(input)
    pattern
  end

  defp spec(input), do: input |> parse!() |> Pattern.match_spec([])

  defp error(input) do
    assert {:error, message} = Pattern.parse(input)
    message
  end

  defp check(input, opts \\ []) do
    with {:ok, pattern} <- Pattern.parse(input), do: Pattern.check(pattern, opts)
  end

  defp check_error(input, opts \\ []) do
    assert {:error, message} = check(input, opts)
    message
  end

  # For each {m, f, a}: the call a module compiled here makes when its code calls
  # m.f(args) with plain variables, as its object code (disassembled) has it: {m, f, a}
  # itself, another function or BIF, or :no_call.
  defp compiled_calls(mfas) do
    name = Module.concat(__MODULE__, "InlineProbe#{System.unique_integer([:positive])}")

    defs =
      for {{m, f, a}, i} <- Enum.with_index(mfas) do
        args = Macro.generate_arguments(a, __MODULE__)

        quote do:
                def(unquote(:"probe#{i}")(unquote_splicing(args)),
                  do: unquote(m).unquote(f)(unquote_splicing(args))
                )
      end

    [{^name, beam}] = Code.compile_quoted(quote(do: defmodule(unquote(name), do: unquote(defs))))
    :code.purge(name)
    :code.delete(name)
    {:beam_file, ^name, _exports, _attributes, _info, code} = :beam_disasm.file(beam)

    for i <- 0..(length(mfas) - 1) do
      probe = :"probe#{i}"
      [instructions] = for {:function, ^probe, _, _, instructions} <- code, do: instructions

      # the last call makes the result (elem/2's index + 1 comes first); raising a
      # badmap error is not one
      case instructions
           |> Enum.flat_map(&called/1)
           |> Enum.reject(&match?({:erlang, :error, _}, &1)) do
        [] -> :no_call
        calls -> List.last(calls)
      end
    end
  end

  # What an instruction calls: another module's function, or a BIF.
  defp called({call, _arity, {:extfunc, m, f, a}}) when call in [:call_ext, :call_ext_only],
    do: [{m, f, a}]

  defp called({:call_ext_last, _arity, {:extfunc, m, f, a}, _frame}), do: [{m, f, a}]
  defp called({:bif, name, _fail, args, _dst}), do: [{:erlang, name, length(args)}]
  defp called({:gc_bif, name, _fail, _live, args, _dst}), do: [{:erlang, name, length(args)}]
  defp called(_instruction), do: []

  defp warnings(input, opts \\ []) do
    assert {:ok, %Pattern{}, warnings} = check(input, opts)
    warnings
  end

  # Whether the pattern's match spec accepts a call with these arguments,
  # evaluated by the VM exactly as for a trace.
  defp matches?(%Pattern{} = pattern, args) do
    assert {:ok, result, [], []} =
             :erlang.match_spec_test(args, Pattern.match_spec(pattern, []), :trace)

    result == true
  end

  defp matches?(input, args), do: matches?(parse!(input), args)

  # The guards of a pattern with one clause.
  defp clause_guards(%Pattern{guards: [guards]}), do: guards

  describe "parse/1 with strings" do
    test "module only" do
      assert %Pattern{module: Enum, function: :_, arity: :_, head: :_, guards: []} =
               parse!("Enum")

      assert %Pattern{module: MyApp.Cache, function: :_, arity: :_} = parse!("MyApp.Cache")
      assert %Pattern{module: :ets, function: :_, arity: :_} = parse!(":ets")
      assert %Pattern{module: Enum, function: :_, arity: :_} = parse!("Enum.*")
      assert %Pattern{module: Elixir.Enum} = parse!("Elixir.Enum")
    end

    test "function without arity means every arity" do
      assert %Pattern{module: Enum, function: :map, arity: :_, head: :_} = parse!("Enum.map")
      assert %Pattern{module: :ets, function: :insert, arity: :_} = parse!(":ets.insert")
      assert %Pattern{module: Enum, function: :map, arity: :_} = parse!("Enum.map/*")
      assert %Pattern{module: Enum, function: :map, arity: :_} = parse!("Enum.map/_")
    end

    test "function with arity" do
      assert %Pattern{module: Enum, function: :map, arity: 2, head: :_, guards: []} =
               parse!("Enum.map/2")

      assert %Pattern{module: :ets, function: :insert, arity: 2} = parse!(":ets.insert/2")
      assert %Pattern{module: Kernel, function: :+, arity: 2} = parse!("Kernel.+/2")
      assert %Pattern{module: File, function: :exists?, arity: 1} = parse!("File.exists?/1")
      assert %Pattern{module: Map, function: :fetch!, arity: 2} = parse!("Map.fetch!/2")
      assert %Pattern{module: Foo, function: :"odd name", arity: 1} = parse!(~s(Foo."odd name"/1))
      assert %Pattern{module: Enum, function: :map, arity: 2} = parse!("&Enum.map/2")
      assert %Pattern{module: Enum, function: :map, arity: 2} = parse!("  Enum.map/2  ")
    end

    test "a trailing comment is ignored" do
      assert %Pattern{module: Enum, function: :map, arity: 2} = parse!("Enum.map/2 # the mapper")
      assert %Pattern{module: Enum, function: :map, arity: :_} = parse!("Enum.map/* # all")
      assert %Pattern{module: Enum, function: :_} = parse!("Enum.* # everything in Enum")
    end

    test "the source is kept" do
      assert parse!(" Enum.map/2").source == " Enum.map/2"
    end

    test "everything" do
      for input <- ["*", "_"] do
        assert %Pattern{module: :_, function: :_, arity: :_} = parse!(input)
      end
    end

    test "call with no arguments is arity 0" do
      assert %Pattern{module: Foo, function: :bar, arity: 0, head: :_} = parse!("Foo.bar()")
    end

    test "arguments that are all _ without a guard are the plain arity" do
      assert %Pattern{arity: 2, head: :_, guards: [], call_text: nil} = parse!("Foo.bar(_, _)")
      assert Pattern.to_string(parse!("Foo.bar(_, _)")) == "Foo.bar/2"
    end

    test "syntax errors" do
      assert error("") == "empty pattern"
      assert error("Enum.map(") == "syntax error at column 9: missing terminator: )"

      assert error("Enum.map/2 + 1") =~
               "expected Mod, Mod.fun, Mod.fun/arity or Mod.fun(args) when guard"

      assert error("1") ==
               ~s|expected Mod, Mod.fun, Mod.fun/arity or Mod.fun(args) when guard, got: "1"|

      assert error("Enum.map/-1") == "the arity must be a non-negative integer or *, got: -1"
    end

    test "lowercase module names need a colon" do
      assert error("ets.insert/2") ==
               "ets is not a module name; write :ets for an Erlang module or Ets for an Elixir alias"
    end

    test "a guard needs argument patterns" do
      assert error("Enum.map/2 when x") ==
               "a guard needs argument patterns to refer to: write Mod.fun(a, b) when ... instead of Mod.fun/2 when ..."
    end
  end

  describe "parse/1 with terms" do
    test "module atoms" do
      assert %Pattern{module: Enum, function: :_, arity: :_, source: Enum} = parse!(Enum)
      assert %Pattern{module: :ets, function: :_, arity: :_} = parse!(:ets)
      assert %Pattern{module: :_, function: :_, arity: :_} = parse!(:_)
    end

    test "external function captures" do
      assert %Pattern{module: Enum, function: :map, arity: 2} = parse!(&Enum.map/2)
      assert %Pattern{module: :ets, function: :insert, arity: 2} = parse!(&:ets.insert/2)
    end

    test "captures of local functions inside a module" do
      assert %Pattern{module: PatternTestTarget, function: :one, arity: 1} =
               parse!(PatternTestTarget.local_capture())
    end

    test "anonymous functions are rejected" do
      fun = fn x -> x end

      assert error(fun) ==
               "anonymous functions cannot be traced (#{inspect(fun)}); pass a capture of a named " <>
                 ~s(function such as &Enum.map/2, or a string such as "Enum.map/2")
    end

    test "tuples" do
      assert %Pattern{module: Enum, function: :map, arity: 2} = parse!({Enum, :map, 2})
      assert %Pattern{module: Enum, function: :map, arity: :_} = parse!({Enum, :map, :_})
      assert %Pattern{module: Enum, function: :map, arity: :_} = parse!({Enum, :map})
      assert %Pattern{module: Enum, function: :_, arity: :_} = parse!({Enum, :_, :_})
      assert %Pattern{module: :_, function: :_, arity: :_} = parse!({:_, :_, :_})
    end

    test "wildcards must be trailing" do
      assert error({Enum, :_, 2}) ==
               "{Enum, :_, 2}: when the function is :_ the arity must be :_ too"

      assert error({:_, :map, :_}) ==
               "{:_, :map, :_}: when the module is :_ the function and arity must be :_ too"
    end

    test "bad arities and other terms" do
      assert error({Enum, :map, -1}) ==
               "the arity in {Enum, :map, -1} must be a non-negative integer or :_"

      assert error(42) ==
               ~s(expected a string such as "Enum.map/2", a module, a capture such as &Enum.map/2 ) <>
                 "or a {module, function, arity} tuple, got: 42"
    end

    test "a parsed pattern is returned as is" do
      pattern = parse!("Enum.map/2")
      assert Pattern.parse(pattern) == {:ok, pattern}
    end
  end

  describe "argument patterns" do
    test "literals" do
      assert spec("Foo.bar(:users, 1, -2, 2.5, nil, true)") ==
               [{[:users, 1, -2, 2.5, nil, true], [], []}]

      assert matches?("Foo.bar(:users, 1)", [:users, 1])
      refute matches?("Foo.bar(:users, 1)", [:posts, 1])
      refute matches?("Foo.bar(:users, 1)", [:users, 1.0])
    end

    test "_ matches anything" do
      assert spec("MyApp.Cache.fetch(:users, _)") == [{[:users, :_], [], []}]
      assert matches?("MyApp.Cache.fetch(:users, _)", [:users, {:any, "thing"}])
      refute matches?("MyApp.Cache.fetch(:users, _)", [:orders, 1])
    end

    test "variables bind $N in order of first use" do
      assert spec("Foo.bar(a, _, b)") == [{[:"$1", :_, :"$2"], [], []}]
    end

    test "a variable used twice must match equal values" do
      pattern = parse!("Foo.bar({:ok, x}, x)")
      assert Pattern.match_spec(pattern, []) == [{[{:ok, :"$1"}, :"$1"], [], []}]
      assert matches?(pattern, [{:ok, 1}, 1])
      refute matches?(pattern, [{:ok, 1}, 2])
      refute matches?(pattern, [{:error, 1}, 1])
    end

    test "tuples of any size" do
      assert spec("Foo.bar({}, {a}, {a, b, :c})") ==
               [{[{}, {:"$1"}, {:"$1", :"$2", :c}], [], []}]
    end

    test "lists, including [head | tail]" do
      assert spec("Foo.bar([h | t])") == [{[[:"$1" | :"$2"]], [], []}]
      assert spec("Foo.bar([1, h | t])") == [{[[1, :"$1" | :"$2"]], [], []}]
      assert spec("Foo.bar([], [a, b], [a: 1])") == [{[[], [:"$1", :"$2"], [a: 1]], [], []}]
      assert matches?("Foo.bar([h | t])", [[1, 2]])
      refute matches?("Foo.bar([h | t])", [[]])
      assert matches?("Foo.bar([x, x])", [[3, 3]])
      refute matches?("Foo.bar([x, x])", [[3, 4]])
    end

    test "maps and structs" do
      pattern = parse!("Map.get(%{id: id}, _, _)")
      assert pattern.head == [%{id: :"$1"}, :_, :_]
      assert matches?(pattern, [%{id: 1, name: "a"}, :k, nil])
      refute matches?(pattern, [%{name: "a"}, :k, nil])

      pattern = parse!("Foo.bar(%URI{host: h})")
      assert [struct_pattern] = pattern.head
      assert Map.to_list(struct_pattern) |> Enum.sort() == [__struct__: URI, host: :"$1"]
      assert matches?(pattern, [URI.parse("http://example.com")])
      refute matches?(pattern, [%{host: "example.com"}])

      assert [[%{"key" => 1, {:t} => :"$1"}]] = [
               parse!(~s|Foo.bar(%{"key" => 1, {:t} => v})|).head
             ]
    end

    test "strings, charlists, sigils and literal binaries" do
      assert spec(~s|Foo.bar("literal string")|) == [{["literal string"], [], []}]
      assert matches?(~s|Foo.bar("literal string")|, ["literal string"])
      refute matches?(~s|Foo.bar("literal string")|, ["other"])

      assert spec("Foo.bar(<<1, 2>>)") == [{[<<1, 2>>], [], []}]
      assert matches?("Foo.bar(<<1, 2>>)", [<<1, 2>>])
      refute matches?("Foo.bar(<<1, 2>>)", [<<1, 3>>])

      assert spec(~s[Foo.bar(<<1::16, "é"::utf8, 0::size(8)>>)]) ==
               [{[<<0, 1, 195, 169, 0>>], [], []}]

      assert spec(~s[Foo.bar(~c"ab", ~s(x), ~w(a b)a)]) == [{[~c"ab", "x", [:a, :b]], [], []}]
    end

    test "keyword lists and quoted atoms" do
      assert spec("Foo.bar([timeout: t], :\"odd atom\")") == [
               {[[timeout: :"$1"], :"odd atom"], [], []}
             ]
    end

    test "aliases are atoms" do
      assert spec("Foo.bar(MyApp.Repo)") == [{[MyApp.Repo], [], []}]
    end

    test "unsupported constructs are named" do
      assert error("Foo.bar(^x)") ==
               "the pin operator is not supported in trace patterns: ^x (write the value itself)"

      assert error("Foo.bar(x = {:ok, _})") ==
               "= inside an argument pattern is not supported in trace patterns: x = {:ok, _} " <>
                 "(match spec heads cannot bind a whole term and its parts; use a variable and a guard)"

      assert error(~s[Foo.bar("a" <> rest)]) ==
               ~s(<> in an argument pattern is not supported in trace patterns: "a" <> rest ) <>
                 "(match specs cannot match binary prefixes; bind a variable and use binary_part/3 in a guard)"

      assert error("Foo.bar(<<x, 2>>)") ==
               "a binary with variables is not supported in trace patterns: <<x, 2>> " <>
                 "(match specs can only compare whole binaries; bind a variable and use binary_part/3 or byte_size/1 in a guard)"

      assert error("Foo.bar(@attr)") ==
               "module attribute is not supported in trace patterns: @attr (write the value itself)"

      assert error("Foo.bar(length(x))") ==
               "the call length/1 in an argument pattern is not supported in trace patterns: length(x)"

      assert error("Foo.bar(String.trim(x))") ==
               "the function call in an argument pattern is not supported in trace patterns: String.trim(x)"

      assert error("Foo.bar(1..2)") ==
               "a range in an argument pattern is not supported in trace patterns: 1..2"

      assert error("Foo.bar(%{k => 1})") == "map key must be a literal value, got: k"

      assert error("Foo.bar(%{m | a: 1})") ==
               "map update syntax is not supported in trace patterns: %{m | a: 1} (write a map pattern such as %{key: value})"

      assert error(~S[Foo.bar(~s(a#{b}))]) =~
               "sigil with interpolation is not supported in trace patterns"
    end
  end

  describe "guards" do
    test "comparisons" do
      for {op, ms_op, match, no_match} <- [
            {"==", :==, 1.0, 2},
            {"!=", :"/=", 2, 1.0},
            {"===", :"=:=", 1, 1.0},
            {"!==", :"=/=", 1.0, 1},
            {"<", :<, 0, 1},
            {">", :>, 2, 1},
            {"<=", :"=<", 1, 2},
            {">=", :>=, 1, 0}
          ] do
        pattern = parse!("Foo.bar(x) when x #{op} 1")
        assert Pattern.match_spec(pattern, []) == [{[:"$1"], [{ms_op, :"$1", 1}], []}]
        assert matches?(pattern, [match]), "#{op} should match #{inspect(match)}"
        refute matches?(pattern, [no_match]), "#{op} should not match #{inspect(no_match)}"
      end
    end

    test "type checks" do
      fun = fn -> :ok end

      for {check, match, no_match} <- [
            {"is_atom", :a, "a"},
            {"is_binary", "a", ~c"a"},
            {"is_bitstring", <<1::1>>, 1},
            {"is_boolean", false, nil},
            {"is_float", 1.0, 1},
            {"is_function", fun, :fun},
            {"is_integer", 1, 1.0},
            {"is_list", [], {}},
            {"is_map", %{}, []},
            {"is_number", 1.5, "1"},
            {"is_pid", self(), make_ref()},
            {"is_port", hd(Port.list()), self()},
            {"is_reference", make_ref(), self()},
            {"is_tuple", {}, []}
          ] do
        pattern = parse!("Foo.bar(x) when #{check}(x)")

        assert Pattern.match_spec(pattern, []) ==
                 [{[:"$1"], [{String.to_atom(check), :"$1"}], []}]

        assert matches?(pattern, [match]), "#{check} should match #{inspect(match)}"
        refute matches?(pattern, [no_match]), "#{check} should not match #{inspect(no_match)}"
      end
    end

    test "is_function/2, is_nil, is_struct and is_exception" do
      pattern = parse!("Foo.bar(f) when is_function(f, 1)")
      assert clause_guards(pattern) == [{:is_function, :"$1", 1}]
      assert matches?(pattern, [fn x -> x end])
      refute matches?(pattern, [fn -> :ok end])

      pattern = parse!("Foo.bar(x) when is_nil(x)")
      assert clause_guards(pattern) == [{:"=:=", :"$1", nil}]
      assert matches?(pattern, [nil])
      refute matches?(pattern, [false])

      pattern = parse!("Foo.bar(x) when is_struct(x)")
      assert matches?(pattern, [URI.parse("/")])
      refute matches?(pattern, [%{}])

      pattern = parse!("Foo.bar(x) when is_struct(x, URI)")
      assert matches?(pattern, [URI.parse("/")])
      refute matches?(pattern, [Date.utc_today()])

      pattern = parse!("Foo.bar(x) when is_exception(x)")
      assert matches?(pattern, [%ArgumentError{message: "m"}])
      refute matches?(pattern, [URI.parse("/")])
    end

    test "and, or, not" do
      pattern = parse!("Map.get(%{id: id}, _, _) when is_integer(id) and id > 0")

      assert clause_guards(pattern) == [{:andalso, {:is_integer, :"$1"}, {:>, :"$1", 0}}]
      assert matches?(pattern, [%{id: 5}, :k, nil])
      refute matches?(pattern, [%{id: 0}, :k, nil])
      refute matches?(pattern, [%{id: "5"}, :k, nil])

      pattern = parse!("Foo.bar(x) when x == :a or not is_atom(x)")
      assert clause_guards(pattern) == [{:orelse, {:==, :"$1", :a}, {:not, {:is_atom, :"$1"}}}]
      assert matches?(pattern, [:a])
      assert matches?(pattern, [1])
      refute matches?(pattern, [:b])
    end

    test "not in and sigil lists" do
      pattern = parse!("Foo.bar(x) when x not in ~w(a b)a")

      assert clause_guards(pattern) == [
               {:not, {:orelse, {:"=:=", :"$1", :a}, {:"=:=", :"$1", :b}}}
             ]

      assert matches?(pattern, [:c])
      refute matches?(pattern, [:a])
    end

    test "several when clauses are one match spec clause each" do
      pattern = parse!("Foo.bar(x) when is_atom(x) when is_integer(x)")
      assert pattern.guards == [[{:is_atom, :"$1"}], [{:is_integer, :"$1"}]]
      assert matches?(pattern, [1])
      refute matches?(pattern, ["1"])
    end

    test "&&, || and ! between boolean expressions" do
      pattern = parse!("Foo.bar(x) when is_atom(x) && !is_nil(x) || x > 10")

      assert clause_guards(pattern) == [
               {:orelse, {:andalso, {:is_atom, :"$1"}, {:not, {:"=:=", :"$1", nil}}},
                {:>, :"$1", 10}}
             ]

      assert matches?(pattern, [:a])
      assert matches?(pattern, [11])
      assert matches?(pattern, [false])
      refute matches?(pattern, [5])
      refute matches?("Foo.bar(x) when is_atom(x) && !is_nil(x)", [nil])
    end

    test "&&, || and ! on other values are refused" do
      assert error("Foo.bar(x) when x && true") ==
               "&& on values that may not be booleans is not supported in trace patterns: x && true " <>
                 "(guards only accept && between comparisons or type checks; use and/or/not)"

      assert error("Foo.bar(x) when !x") ==
               "! on values that may not be booleans is not supported in trace patterns: !x " <>
                 "(guards only accept ! between comparisons or type checks; use and/or/not)"
    end

    test "arithmetic" do
      pattern =
        parse!(
          "Foo.bar(x) when -x + 1 < 0 and x * 2 - 1 > 3 and x / 2 >= 2 and div(x, 2) == rem(x, 3)"
        )

      assert clause_guards(pattern) == [
               {:andalso,
                {:andalso,
                 {:andalso, {:<, {:+, {:-, :"$1"}, 1}, 0}, {:>, {:-, {:*, :"$1", 2}, 1}, 3}},
                 {:>=, {:/, :"$1", 2}, 2}}, {:==, {:div, :"$1", 2}, {:rem, :"$1", 3}}}
             ]

      assert matches?(pattern, [5])
      refute matches?(pattern, [4])
      # A guard that raises does not match.
      refute matches?(pattern, [:not_a_number])
    end

    test "length, hd, tl, abs" do
      pattern = parse!("Enum.map(list, _) when length(list) > 100")
      assert pattern.head == [:"$1", :_]
      assert clause_guards(pattern) == [{:>, {:length, :"$1"}, 100}]
      assert matches?(pattern, [Enum.to_list(1..101), & &1])
      refute matches?(pattern, [Enum.to_list(1..100), & &1])

      pattern = parse!("Foo.bar(l) when hd(l) == :a and tl(l) == [] and abs(-1) == 1")

      assert clause_guards(pattern) == [
               {:andalso, {:andalso, {:==, {:hd, :"$1"}, :a}, {:==, {:tl, :"$1"}, {:const, []}}},
                {:==, {:abs, -1}, 1}}
             ]

      assert matches?(pattern, [[:a]])
      refute matches?(pattern, [[:a, :b]])
    end

    test "elem is 0-based like Elixir" do
      pattern = parse!("Foo.bar(t, i) when elem(t, 0) == :ok and elem(t, i) == 2")

      assert clause_guards(pattern) == [
               {:andalso, {:==, {:element, 1, :"$1"}, :ok},
                {:==, {:element, {:+, :"$2", 1}, :"$1"}, 2}}
             ]

      assert matches?(pattern, [{:ok, 2}, 1])
      refute matches?(pattern, [{:ok, 2}, 0])
      refute matches?(pattern, [{:error, 2}, 1])
    end

    test "sizes" do
      pattern =
        parse!(
          "Foo.bar(t, m, b) when tuple_size(t) == 2 and map_size(m) > 0 and byte_size(b) < 4"
        )

      assert clause_guards(pattern) == [
               {:andalso, {:andalso, {:==, {:tuple_size, :"$1"}, 2}, {:>, {:map_size, :"$2"}, 0}},
                {:<, {:byte_size, :"$3"}, 4}}
             ]

      assert matches?(pattern, [{1, 2}, %{a: 1}, "abc"])
      refute matches?(pattern, [{1, 2}, %{}, "abc"])
      refute matches?(pattern, [{1, 2}, %{a: 1}, "abcd"])
    end

    test "map access: is_map_key, map_get and map.field" do
      pattern = parse!("Foo.bar(m) when is_map_key(m, :id) and map_get(m, :id) > 1")

      assert clause_guards(pattern) == [
               {:andalso, {:is_map_key, :id, :"$1"}, {:>, {:map_get, :id, :"$1"}, 1}}
             ]

      assert matches?(pattern, [%{id: 2}])
      refute matches?(pattern, [%{id: 1}])
      refute matches?(pattern, [%{}])

      pattern = parse!("Foo.bar(m) when m.id == 1")
      assert clause_guards(pattern) == [{:==, {:map_get, :id, :"$1"}, 1}]
      assert matches?(pattern, [%{id: 1}])
      refute matches?(pattern, [%{id: 2}])
    end

    test "in with a literal list or range" do
      pattern = parse!(~s|Foo.bar(x) when x in [:a, "b", {1, 2}]|)

      assert clause_guards(pattern) == [
               {:orelse, {:orelse, {:"=:=", :"$1", :a}, {:"=:=", :"$1", {:const, "b"}}},
                {:"=:=", :"$1", {:const, {1, 2}}}}
             ]

      assert matches?(pattern, ["b"])
      assert matches?(pattern, [{1, 2}])
      refute matches?(pattern, [:c])

      pattern = parse!("Foo.bar(x) when x in 1..10")

      assert clause_guards(pattern) == [
               {:andalso, {:is_integer, :"$1"}, {:andalso, {:>=, :"$1", 1}, {:"=<", :"$1", 10}}}
             ]

      assert matches?(pattern, [10])
      refute matches?(pattern, [11])
      refute matches?(pattern, [5.0])

      assert clause_guards(parse!("Foo.bar(x) when x in []")) == [false]
      refute matches?("Foo.bar(x) when x in []", [1])
    end

    test "literal terms in guards are constants; terms with variables are built" do
      assert clause_guards(parse!("Foo.bar(x) when x == {:ok, 1}")) == [
               {:==, :"$1", {:const, {:ok, 1}}}
             ]

      assert clause_guards(parse!("Foo.bar(x) when x == :\"$1\"")) == [
               {:==, :"$1", {:const, :"$1"}}
             ]

      pattern = parse!("Foo.bar(x, y) when x == {:ok, y}")
      assert clause_guards(pattern) == [{:==, :"$1", {{:ok, :"$2"}}}]
      assert matches?(pattern, [{:ok, 1}, 1])
      refute matches?(pattern, [{:ok, 1}, 2])

      pattern = parse!("Foo.bar(x, y) when x == [1, y] or x == %{k: y}")

      assert clause_guards(pattern) == [
               {:orelse, {:==, :"$1", [1, :"$2"]}, {:==, :"$1", %{k: :"$2"}}}
             ]

      assert matches?(pattern, [[1, 2], 2])
      assert matches?(pattern, [%{k: 2}, 2])
      refute matches?(pattern, [[1, 3], 2])
    end

    test "remote guard functions of :erlang and Kernel" do
      pattern = parse!("Foo.bar(x) when :erlang.element(1, x) == :ok and Kernel.is_tuple(x)")

      assert clause_guards(pattern) == [
               {:andalso, {:==, {:element, 1, :"$1"}, :ok}, {:is_tuple, :"$1"}}
             ]

      assert matches?(pattern, [{:ok}])
    end

    test "unsupported guards are named" do
      assert error("Foo.bar(x) when y > 1") ==
               "variable y is used in the guard but not bound in the argument patterns"

      assert error("Foo.bar(x) when _ == 1") ==
               "_ in a guard is not supported in trace patterns: _ (_ matches anything and binds nothing)"

      assert error("Foo.bar(x) when String.length(x) > 1") ==
               "String.length/1 cannot be used in a trace guard; only comparisons, and/or/not, " <>
                 "is_* checks and guard-safe functions (elem/2, length/1, map_size/1, ...) are allowed"

      assert error("Foo.bar(x) when foo(x)") =~ "foo/1 cannot be used in a trace guard"

      assert error("Foo.bar(x) when :erlang.send(x, 1)") =~
               ":erlang.send/2 cannot be used in a trace guard"

      assert error("Foo.bar(x) when x == ^y") ==
               "the pin operator is not supported in trace patterns: ^y (write the value itself)"

      assert error("Foo.bar(x, y) when x in y") ==
               "in with a right side that is not a literal list or integer range is not supported in trace patterns: " <>
                 "x in y (write the values out, as in x in [:a, :b] or x in 1..10)"

      assert error("Foo.bar(x, y) when x == [y | 1]") =~
               "[head | tail] in a guard is not supported"
    end
  end

  describe "match_spec/2" do
    test "adds the body to the clause" do
      pattern = parse!("Foo.bar(x) when is_atom(x)")

      assert Pattern.match_spec(pattern, [{:return_trace}, {:message, {:caller}}]) ==
               [{[:"$1"], [{:is_atom, :"$1"}], [{:return_trace}, {:message, {:caller}}]}]

      assert Pattern.match_spec(parse!("Enum"), [{:exception_trace}]) ==
               [{:_, [], [{:exception_trace}]}]
    end

    test "specs with bodies are valid trace match specs" do
      spec =
        Pattern.match_spec(parse!("Foo.bar(x, _) when x > 1"), [
          {:return_trace},
          {:message, {:caller}}
        ])

      assert {:ok, result, [:return_trace], []} = :erlang.match_spec_test([2, 3], spec, :trace)
      assert result != false
      assert {:ok, false, [], []} = :erlang.match_spec_test([1, 3], spec, :trace)
    end
  end

  describe "mfa/1 and to_string/1" do
    test "mfa" do
      assert Pattern.mfa(parse!("Enum.map/2")) == {Enum, :map, 2}
      assert Pattern.mfa(parse!("Enum.map")) == {Enum, :map, :_}
      assert Pattern.mfa(parse!(":ets")) == {:ets, :_, :_}
      assert Pattern.mfa(parse!("*")) == {:_, :_, :_}
      assert Pattern.mfa(parse!("Foo.bar(a, b) when a > b")) == {Foo, :bar, 2}
    end

    test "canonical text" do
      for {input, text} <- [
            {"Enum.map/2", "Enum.map/2"},
            {&Enum.map/2, "Enum.map/2"},
            {{Enum, :map, :_}, "Enum.map/*"},
            {"Enum.map", "Enum.map/*"},
            {"Enum", "Enum"},
            {:ets, ":ets"},
            {":ets.insert/2", ":ets.insert/2"},
            {"Kernel.+/2", "Kernel.+/2"},
            {~s(Foo."odd name"/1), ~s(Foo."odd name"/1)},
            {"*", "*"},
            {"MyApp.Cache.fetch( :users,_ )", "MyApp.Cache.fetch(:users, _)"},
            {"Foo.bar(x)   when x>1", "Foo.bar(x) when x > 1"}
          ] do
        assert Pattern.to_string(parse!(input)) == text
      end
    end
  end

  describe "check/2" do
    test "existing targets pass without warnings" do
      for input <- [
            "Enum",
            "Enum.map",
            "Enum.map/2",
            ":ets.insert/2",
            ":ets",
            &Enum.map/2,
            {Enum, :map, :_},
            "Enum.map(list, _) when length(list) > 1"
          ] do
        assert {:ok, %Pattern{}, []} = check(input), "#{inspect(input)} should pass"
      end
    end

    test "unknown modules, with a suggestion when one is close" do
      assert check_error("Enumm.map/2") == "unknown module Enumm; did you mean Enum?"
      assert check_error(":etz.insert/2") == "unknown module :etz; did you mean :ets?"
      assert check_error("Ets") == "unknown module Ets; did you mean :ets?"
      assert check_error("MyApp.Cache.fetch(:users, _)") == "unknown module MyApp.Cache"
      assert check_error(NoSuchModuleAnywhere) == "unknown module NoSuchModuleAnywhere"
    end

    # Each suggestion compares the name with every module of the code path. CI's atoms
    # test feeds 12 500 random lines to parse_all! in one batch: with a suggestion for
    # each unknown module, that one test ran past its 15 minutes.
    test "suggestions for unknown modules are bounded: the first few of a batch, short names" do
      typos = for i <- 1..20, do: "Enumm.map/#{rem(i, 3)}"
      messages = for {_, {:error, message}} <- Pattern.parse_each(typos), do: message

      assert length(messages) == 20
      {hinted, plain} = Enum.split_with(messages, &(&1 =~ "did you mean"))
      assert length(hinted) == 8
      assert Enum.take(messages, 8) == hinted
      assert Enum.uniq(plain) == ["unknown module Enumm"]

      long = "Enumm" <> String.duplicate("x", 70)
      assert check_error(long <> ".map/2") == "unknown module #{long}"
    end

    test "unknown functions, with a suggestion when one is close" do
      assert check_error("Enum.mpa/2") == "Enum.mpa/2 is not a function; did you mean Enum.map/2?"
      assert check_error("Enum.mpa") == "Enum.mpa is not a function; did you mean Enum.map?"

      assert check_error("Enum.mapp/3") ==
               "Enum.mapp/3 is not a function; did you mean Enum.map/2?"

      assert check_error("Enum.xyzzy/1") == "Enum.xyzzy/1 is not a function"
    end

    test "wrong arity lists the arities there are" do
      assert check_error("Enum.map/5") == "Enum.map/5 does not exist; Enum.map has arities 2"

      assert check_error("Enum.reduce/5") ==
               "Enum.reduce/5 does not exist; Enum.reduce has arities 2, 3"

      assert check_error({Enum, :map, 1}) == "Enum.map/1 does not exist; Enum.map has arities 2"
    end

    test "the number of argument patterns must be an arity that exists" do
      assert check_error("Enum.map(a)") == "Enum.map/1 does not exist; Enum.map has arities 2"
      assert {:ok, _, []} = check("Enum.map(a, _)")
    end

    test "macros cannot be traced" do
      assert check_error("Kernel.if/2") ==
               "Kernel.if/2 is a macro, expanded at compile time; it cannot be traced"

      assert check_error("Kernel.if") ==
               "Kernel.if is a macro, expanded at compile time; it cannot be traced"

      assert check_error("PatternTestTarget.shout/1") ==
               "PatternTestTarget.shout/1 is a macro, expanded at compile time; it cannot be traced"
    end

    test "macro expansion functions are refused unless forced" do
      assert check_error(~s(Kernel."MACRO-if"/3)) ==
               ~s(Kernel."MACRO-if"/3 is the compile-time expansion of a macro; it only runs while code compiles ) <>
                 "(pass force: true to trace it anyway)"

      assert {:ok, _, []} = check(~s(Kernel."MACRO-if"/3), force: true)
    end

    test "private functions need local tracing" do
      assert {:ok, _, []} = check("PatternTestTarget.secret/1")
      assert {:ok, _, []} = check("PatternTestTarget.secret/1", local: true)

      assert check_error("PatternTestTarget.secret/1", local: false) ==
               "PatternTestTarget.secret/1 is private; it can only be traced with local: true"

      assert check_error("PatternTestTarget.secret", local: false) ==
               "PatternTestTarget.secret/* is private; it can only be traced with local: true"
    end

    test "inlined functions give a warning naming what to trace instead" do
      assert warnings("Kernel.+/2") == [
               "Kernel.+/2 is inlined by the compiler (calls never reach it); trace :erlang.+/2 instead " <>
                 "(compiled code usually runs :erlang.+/2 as a VM instruction, so only dynamic calls reach it)"
             ]

      assert warnings("String.to_atom/1") == [
               "String.to_atom/1 is inlined by the compiler (calls never reach it); trace :erlang.binary_to_atom/1 instead"
             ]

      assert warnings("Enum.map/2") == []
    end

    # What the running compiler does with a call (Elixir 1.20 moved elem/2 and others out
    # of the rewrite tables of 1.18): each function's warning is checked against the
    # calls a module compiled here makes, read from its object code.
    test "the inlining warnings follow what the running compiler does with a call" do
      mfas = [
        {Kernel, :elem, 2},
        {Kernel, :put_elem, 3},
        {Kernel, :length, 1},
        {Map, :put, 3},
        {Map, :fetch, 2},
        {Tuple, :duplicate, 2},
        {String, :to_atom, 1},
        {Enum, :map, 2},
        {:lists, :reverse, 1}
      ]

      calls = compiled_calls(mfas)

      for {mfa, made} <- Enum.zip(mfas, calls) do
        text = KinoTrace.Base.MFA.to_string(mfa)
        warning = Enum.find(warnings(text), &(&1 =~ "inlined"))

        case made do
          ^mfa ->
            assert warning == nil, "#{text} is called as it is, yet: #{warning}"

          {tm, tf, ta} ->
            target = KinoTrace.Base.MFA.to_string({tm, tf, ta})

            assert warning =~
                     "#{text} is inlined by the compiler (calls never reach it); trace #{target} instead",
                   "#{text} compiles to a call of #{target}; the warning: #{inspect(warning)}"

          :no_call ->
            assert warning ==
                     "#{text} is inlined by the compiler into code that calls no function (calls never reach it)"
        end
      end

      # Not all of them are left as they are, on any Elixir
      assert Enum.count(Enum.zip(mfas, calls), fn {mfa, made} -> mfa != made end) >= 4
    end

    test "BIFs that compile to VM instructions give a warning" do
      assert warnings(":erlang.+/2") == [
               ":erlang.+/2 is usually compiled to a VM instruction; only dynamic calls " <>
                 "(apply/3, captures, evaluated code such as Livebook cells) are traced"
             ]

      assert warnings(":erlang.setelement/3") == []
    end

    test "tracing everything is refused unless forced" do
      message =
        "refusing to trace every function in the system; name a module or function, " <>
          "or pass force: true if you really mean it"

      assert check_error("*") == message
      assert check_error({:_, :_, :_}) == message
      assert check_error(:_) == message
      assert {:ok, %Pattern{module: :_}, []} = check("*", force: true)
    end

    test "kino_trace's own modules and the trace machinery are refused unless forced" do
      for {input, module} <- [
            {"Kino.Trace", "Kino.Trace"},
            {"KinoTrace.Pattern.parse/1", "KinoTrace.Pattern"},
            {&KinoTrace.Pattern.parse/1, "KinoTrace.Pattern"},
            {KinoTrace.Session, "KinoTrace.Session"},
            {":trace", ":trace"},
            {":erl_tracer.trace/5", ":erl_tracer"}
          ] do
        assert check_error(input) ==
                 "refusing to trace #{module}: tracing kino_trace's own modules or the :trace machinery " <>
                   "makes the tracer trace itself; pass force: true to do it anyway"
      end

      assert {:ok, _, []} = check("KinoTrace.Pattern.parse/1", force: true)
      assert {:ok, _, []} = check(":trace.function/4", force: true)
      # Only the Kino.Trace namespace, not names that merely start alike.
      assert check_error("Kino.TraceXYZ") =~ "unknown module Kino.TraceXYZ"
    end
  end

  describe "parse_each/2" do
    test "mixes good and bad entries, in order" do
      inputs = ["Enum.map/2", "Enumm", &Enum.map/2, "Foo.bar(^x)", {Enum, :map, 5}, "Kernel.+/2"]

      assert [
               {"Enum.map/2", {:ok, %Pattern{module: Enum, function: :map, arity: 2}, []}},
               {"Enumm", {:error, "unknown module Enumm; did you mean Enum?"}},
               {capture, {:ok, %Pattern{module: Enum}, []}},
               {"Foo.bar(^x)",
                {:error,
                 "the pin operator is not supported in trace patterns: ^x (write the value itself)"}},
               {{Enum, :map, 5}, {:error, "Enum.map/5 does not exist; Enum.map has arities 2"}},
               {"Kernel.+/2", {:ok, %Pattern{module: Kernel}, [warning]}}
             ] = Pattern.parse_each(inputs)

      assert is_function(capture, 2)
      assert warning =~ "Kernel.+/2 is inlined"
    end

    test "takes a text with one pattern per line, skipping blanks and comments" do
      text = """
      Enum.map/2

      # the cache
        MyApp.Cache.fetch(:users, _)
      :ets.insert/2
      """

      assert [
               {"Enum.map/2", {:ok, _, []}},
               {"MyApp.Cache.fetch(:users, _)", {:error, "unknown module MyApp.Cache"}},
               {":ets.insert/2", {:ok, _, []}}
             ] = Pattern.parse_each(text)
    end

    test "passes options to the check" do
      assert [{"*", {:ok, _, []}}] = Pattern.parse_each(["*"], force: true)

      assert [{"*", {:error, "refusing to trace every function" <> _}}] =
               Pattern.parse_each(["*"])
    end
  end

  describe "parse_all!/2" do
    test "returns the patterns and all warnings" do
      assert {[%Pattern{module: Enum}, %Pattern{module: Kernel}, %Pattern{module: :ets}],
              [warning]} =
               Pattern.parse_all!(["Enum.map/2", "Kernel.+/2", :ets])

      assert warning =~ "Kernel.+/2 is inlined"
    end

    test "accepts a single entry" do
      assert {[%Pattern{module: Enum, function: :map, arity: 2}], []} =
               Pattern.parse_all!(&Enum.map/2)

      assert {[%Pattern{module: Enum, function: :map, arity: 2}], []} =
               Pattern.parse_all!({Enum, :map, 2})

      assert {[%Pattern{module: Enum}], []} = Pattern.parse_all!(Enum)
    end

    test "raises naming every bad entry" do
      assert_raise ArgumentError,
                   ~s(invalid trace pattern "Enumm.map/2": unknown module Enumm; did you mean Enum?),
                   fn -> Pattern.parse_all!(["Enum.map/2", "Enumm.map/2"]) end

      message =
        ~s(invalid trace pattern "Enum.mpa/2": Enum.mpa/2 is not a function; did you mean Enum.map/2?\n) <>
          "invalid trace pattern {Enum, :map, 9}: Enum.map/9 does not exist; Enum.map has arities 2"

      assert_raise ArgumentError, message, fn ->
        Pattern.parse_all!(["Enum.mpa/2", {Enum, :map, 9}, "Enum"])
      end
    end

    test "refuses nothing to trace and honours force" do
      assert_raise ArgumentError, "no trace patterns given", fn -> Pattern.parse_all!([]) end

      assert_raise ArgumentError, ~r/refusing to trace every function/, fn ->
        Pattern.parse_all!("*")
      end

      assert {[%Pattern{module: :_}], []} = Pattern.parse_all!("*", force: true)
    end
  end

  describe "with a real trace session" do
    # A process does not receive call trace messages about itself, so the
    # traced calls run in a separate worker process.
    defp trace_calls(input, calls) do
      {[pattern], _warnings} = Pattern.parse_all!([input])
      session = :trace.session_create(:pattern_test, self(), [])

      try do
        parent = self()

        worker =
          spawn_link(fn ->
            receive do
              :run ->
                Enum.each(calls, fn {module, function, args} -> apply(module, function, args) end)
                send(parent, {:done, self()})
            end
          end)

        assert :trace.process(session, worker, true, [:call]) == 1

        assert :trace.function(session, Pattern.mfa(pattern), Pattern.match_spec(pattern, []), [
                 :local
               ]) >= 1

        send(worker, :run)
        assert_receive {:done, ^worker}
        worker
      after
        :trace.session_destroy(session)
      end
    end

    test "argument patterns select the calls that are traced" do
      worker =
        trace_calls("PatternTestTarget.fetch(:users, _)", [
          {PatternTestTarget, :fetch, [:users, 1]},
          {PatternTestTarget, :fetch, [:orders, 2]},
          {PatternTestTarget, :fetch, [:users, 3]}
        ])

      assert_receive {:trace, ^worker, :call, {PatternTestTarget, :fetch, [:users, 1]}}
      assert_receive {:trace, ^worker, :call, {PatternTestTarget, :fetch, [:users, 3]}}
      refute_receive {:trace, ^worker, :call, {PatternTestTarget, :fetch, [:orders, _]}}
    end

    test "a variable used twice and a guard" do
      worker =
        trace_calls("PatternTestTarget.pair({:ok, x}, x) when is_integer(x) and x > 0", [
          {PatternTestTarget, :pair, [{:ok, 1}, 1]},
          {PatternTestTarget, :pair, [{:ok, 1}, 2]},
          {PatternTestTarget, :pair, [{:ok, -1}, -1]},
          {PatternTestTarget, :pair, [{:ok, "a"}, "a"]}
        ])

      assert_receive {:trace, ^worker, :call, {PatternTestTarget, :pair, [{:ok, 1}, 1]}}
      refute_receive {:trace, ^worker, :call, {PatternTestTarget, :pair, _}}
    end

    test "module patterns trace every function, including private ones" do
      worker =
        trace_calls(PatternTestTarget, [
          {PatternTestTarget, :one, [:a]},
          {PatternTestTarget, :calls_secret, [:b]}
        ])

      assert_receive {:trace, ^worker, :call, {PatternTestTarget, :one, [:a]}}
      assert_receive {:trace, ^worker, :call, {PatternTestTarget, :calls_secret, [:b]}}
      assert_receive {:trace, ^worker, :call, {PatternTestTarget, :secret, [:b]}}
    end

    test "a capture traces exactly that arity" do
      worker =
        trace_calls(&PatternTestTarget.one/2, [
          {PatternTestTarget, :one, [:a]},
          {PatternTestTarget, :one, [:b, :c]}
        ])

      assert_receive {:trace, ^worker, :call, {PatternTestTarget, :one, [:b, :c]}}
      refute_receive {:trace, ^worker, :call, {PatternTestTarget, :one, [:a]}}
    end
  end
end
