defmodule KinoTrace.Assertions.CallPatternTest do
  # How call patterns compile: what they match, what they bind (nothing), which warnings
  # they cause (none), and the compile errors for bad use. These need no tracing: they
  # check the patterns against hand-made calls.
  use ExUnit.Case, async: true
  use Kino.Trace.Assertions

  alias Kino.Trace.Event
  alias KinoTrace.Assertions.CallPattern
  alias SampleApp.Cache

  require CallPattern

  @admin_id 7

  doctest KinoTrace.Assertions.CallPattern
  doctest KinoTrace.Assertions.ValuePattern
  doctest KinoTrace.Assertions.Call
  doctest KinoTrace.Assertions.Format
  doctest KinoTrace.Assertions.Coverage
  doctest KinoTrace.Assertions.Checks

  defp calls(list) do
    list
    |> Enum.with_index(1)
    |> Enum.map(fn {{m, f, args}, id} ->
      %Event{
        id: id,
        kind: :call,
        pid: self(),
        module: m,
        function: f,
        arity: length(args),
        args: args
      }
    end)
  end

  describe "call patterns" do
    test "expand the test module's aliases" do
      pattern = CallPattern.compile(Cache.fetch(:users, _))
      assert {pattern.module, pattern.function, pattern.arity} == {SampleApp.Cache, :fetch, 2}
      assert pattern.source == "SampleApp.Cache.fetch(:users, _)"
    end

    test "match arguments like a case clause, with guards" do
      pattern = CallPattern.compile(Cache.fetch(table, id) when is_atom(table) and id > 0)
      assert CallPattern.match?(pattern, [:users, 1])
      refute CallPattern.match?(pattern, [:users, 0])
      refute CallPattern.match?(pattern, ["users", 1])
      refute CallPattern.match?(pattern, [:users, 1, 2])
    end

    test "pins read the test's variables" do
      id = 42
      pattern = CallPattern.compile(Cache.fetch(_, ^id))
      assert CallPattern.match?(pattern, [:users, 42])
      refute CallPattern.match?(pattern, [:users, 43])
      assert pattern.pins == [{{:id, nil}, 42}]
    end

    test "a variable used twice must match equal values" do
      pattern = CallPattern.compile(Cache.put(table, _, %{table: table}))
      assert CallPattern.match?(pattern, [:users, 1, %{table: :users}])
      refute CallPattern.match?(pattern, [:users, 1, %{table: :posts}])
    end

    test "structs, binaries, module attributes and Erlang modules" do
      uri = CallPattern.compile(URI.parse(%URI{host: "example.com"}))
      assert CallPattern.match?(uri, [URI.parse("http://example.com")])

      prefix = CallPattern.compile(:binary.split("id:" <> rest, _) when byte_size(rest) > 0)
      assert {prefix.module, prefix.function} == {:binary, :split}
      assert CallPattern.match?(prefix, ["id:7", ":"])
      refute CallPattern.match?(prefix, ["id:", ":"])

      admin = CallPattern.compile(Cache.fetch(:users, @admin_id))
      assert CallPattern.match?(admin, [:users, 7])
      assert admin.source == "SampleApp.Cache.fetch(:users, 7)"
    end

    test "Mod.fun/arity matches any arguments" do
      pattern = CallPattern.compile(&Cache.fetch/2)
      assert pattern.source == "SampleApp.Cache.fetch/2"
      assert CallPattern.match?(pattern, [:anything, "at all"])
      refute CallPattern.match?(pattern, [:one])
    end

    test "score counts the arguments that match on their own" do
      pattern = CallPattern.compile(Cache.fetch(:users, id) when id > 100)
      assert CallPattern.score(pattern, [:users, 1]) == 2
      assert CallPattern.score(pattern, [:posts, 1]) == 1
    end
  end

  describe "variables in patterns" do
    test "bind nothing in the test" do
      trace = calls([{SampleApp.Cache, :fetch, [:users, 1]}])
      id = :unchanged
      assert_called trace, Cache.fetch(:users, id)
      assert id == :unchanged
    end

    test "stay local: a pattern variable is undefined after the assertion" do
      code = """
      defmodule KinoTrace.Assertions.CallPatternTest.Leak do
        use Kino.Trace.Assertions
        def run(trace) do
          assert_called trace, SampleApp.Cache.fetch(:users, fresh)
          fresh
        end
      end
      """

      assert_raise CompileError, fn -> compile_quietly(code) end
      assert diagnostics(code) =~ ~s(undefined variable "fresh")
    end

    test "cause no warnings when unused, used in guards, or pinned" do
      code = """
      defmodule KinoTrace.Assertions.CallPatternTest.NoWarnings do
        use Kino.Trace.Assertions
        alias SampleApp.{Cache, Repo}

        def run(trace, key) do
          assert_called trace, Cache.fetch(table, id)
          assert_called trace, Cache.fetch(table, id) when id > 0 and is_atom(table)
          assert_called trace, Cache.fetch(_, ^key), times: 1
          assert_called trace, Cache.fetch(_table, _id)
          refute_called trace, Repo.delete(id)
          assert_returned trace, Cache.fetch(t, _), {:ok, row} when is_map(row)
          assert_raised_in trace, Repo.get(_, id), {:error, reason}
          assert_called_in_order trace, [Cache.fetch(t, i), Repo.get(t, i)]
        end
      end
      """

      assert diagnostics(code) == ""
    end
  end

  describe "bad use is a compile error" do
    test "a pattern that is not a remote call" do
      assert_compile_error(
        "assert_called trace, foo",
        ~r/must be a remote call pattern.*got: foo/
      )

      assert_compile_error(
        "assert_called trace, fetch(:users, _)",
        ~r/remote call pattern.*got: fetch\(:users, _\)/
      )

      assert_compile_error(
        "refute_called trace, {:ok, 1}",
        ~r/refute_called must be a remote call pattern/
      )

      assert_compile_error(
        "assert_returned trace, 1 + 2, :ok",
        ~r/assert_returned must be a remote call pattern/
      )
    end

    test "a call without parentheses" do
      assert_compile_error(
        "assert_called trace, SampleApp.Cache.fetch",
        ~r"needs parentheses.*or write &Mod.fun/arity, got: SampleApp.Cache.fetch$"
      )
    end

    test "a module that is not an alias or an atom" do
      assert_compile_error(
        "mod = SampleApp.Cache; assert_called trace, mod.fetch(_, _)",
        ~r/module must be an alias or an atom/
      )
    end

    test "a guard on Mod.fun/arity" do
      assert_compile_error(
        "assert_called trace, SampleApp.Cache.fetch/2 when true",
        ~r/cannot take a guard/
      )
    end

    test "unknown options" do
      assert_compile_error(
        "assert_called trace, SampleApp.Cache.fetch(_, _), count: 2",
        ~r/unknown options \[:count\]/
      )

      assert_compile_error(
        "refute_called trace, SampleApp.Cache.fetch(_, _), times: 2",
        ~r/unknown options \[:times\]/
      )
    end

    test "assert_called_in_order needs a non-empty list" do
      assert_compile_error(
        "assert_called_in_order trace, []",
        ~r/non-empty list of call patterns/
      )

      assert_compile_error(
        "assert_called_in_order trace, SampleApp.Cache.fetch(_, _)",
        ~r/non-empty list/
      )
    end

    test "a message after an exception pattern" do
      assert_compile_error(
        ~S|assert_raised_in trace, SampleApp.Repo.get(_, _), {:error, _}, "msg"|,
        ~r/message only after an exception module/
      )
    end

    test "the error points at the assertion's line" do
      error =
        assert_raise CompileError, fn -> compile_quietly(wrap("\n\nassert_called trace, foo")) end

      assert error.line == 5
      assert error.file == "assertions_compile_test_snippet.exs"
    end
  end

  describe "bad use at run time" do
    test "an unknown module raises ArgumentError naming it" do
      trace = calls([])

      error =
        assert_raise ArgumentError, fn -> refute_called(trace, SampleApp.Nope.fetch(_)) end

      assert error.message =~ "unknown module SampleApp.Nope"
    end

    test "an unknown function raises ArgumentError with the close names" do
      trace = calls([])

      error = assert_raise ArgumentError, fn -> refute_called(trace, Cache.fecth(_, _)) end
      assert error.message =~ "SampleApp.Cache.fecth/2 is not a function of SampleApp.Cache"
      assert error.message =~ "(did you mean fetch/1, fetch/2?)"
    end

    test "a wrong arity raises ArgumentError" do
      trace = calls([])
      error = assert_raise ArgumentError, fn -> assert_called(trace, Cache.fetch(_, _, _)) end
      assert error.message =~ "SampleApp.Cache.fetch/3 is not a function"
    end

    test "bad option values and traces" do
      trace = calls([])

      assert_raise ArgumentError, ~r/times: must be a non-negative integer/, fn ->
        assert_called trace, Cache.fetch(_, _), times: -1
      end

      assert_raise ArgumentError, ~r/pid: must be a pid/, fn ->
        assert_called trace, Cache.fetch(_, _), pid: :me
      end

      assert_raise ArgumentError, ~r/expected a trace captured by Kino.Trace.capture/, fn ->
        assert_called :oops, Cache.fetch(_, _)
      end

      message = :not_a_string

      assert_raise ArgumentError, ~r/message must be a string or a regex/, fn ->
        assert_raised_in trace, Cache.fetch(_, _), ArgumentError, message
      end

      assert_raise ArgumentError, ~r/expected an exception module, got: SampleApp.Cache/, fn ->
        assert_raised_in trace, Cache.fetch(_, _), Cache
      end
    end
  end

  ## Helpers

  defp wrap(body) do
    """
    defmodule KinoTrace.Assertions.CallPatternTest.Snippet#{System.unique_integer([:positive])} do
      use Kino.Trace.Assertions
      def run(trace) do#{body}
      end
    end
    """
  end

  defp assert_compile_error(body, regex) do
    error = assert_raise CompileError, fn -> compile_quietly(wrap("\n" <> body)) end
    assert Exception.message(error) =~ regex
  end

  # Compiles code, returning the modules; diagnostics are collected (not printed).
  defp compile_quietly(code) do
    {modules, _diagnostics} =
      Code.with_diagnostics(fn ->
        Code.compile_string(code, "assertions_compile_test_snippet.exs")
      end)

    modules
  end

  # The warnings and errors compiling `code` gives, as one string ("" for none).
  defp diagnostics(code) do
    {_result, diagnostics} =
      Code.with_diagnostics(fn ->
        try do
          Code.compile_string(code, "assertions_compile_test_snippet.exs")
        rescue
          _ -> :error
        end
      end)

    Enum.map_join(diagnostics, "\n", & &1.message)
  end
end
