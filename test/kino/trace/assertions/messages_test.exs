defmodule Kino.Trace.Assertions.MessagesTest do
  # What a failed assertion says, on real traces: the calls that did happen (as code),
  # the closest calls by name, counts, returns and exceptions, and ExUnit's left/right.
  use ExUnit.Case, async: true
  use Kino.Trace.Assertions
  import KinoTraceTest.AssertionFailure

  alias SampleApp.{Cache, Repo}

  @patterns ["SampleApp.Cache", "SampleApp.Repo"]

  defp capture(fun, opts \\ []), do: Kino.Trace.capture(@patterns, fun, opts)

  defp two_fetches do
    capture(fn ->
      Cache.fetch(:users, 1)
      Cache.fetch(:posts, 2)
    end)
  end

  describe "assert_called" do
    test "lists the calls to the function when none matched, and diffs the closest" do
      trace = two_fetches()
      error = failure(do: assert_called(trace, Cache.fetch(:users, id) when id > 100))

      assert error.message == """
             Expected a call matching:

                 SampleApp.Cache.fetch(:users, id) when id > 100

             but none of the 2 calls to SampleApp.Cache.fetch/2 matched:

                 SampleApp.Cache.fetch(:users, 1)
                 SampleApp.Cache.fetch(:posts, 2)\
             """

      assert Macro.to_string(error.left) == "[:users, id] when id > 100"
      assert error.right == [:users, 1]
      assert error.context == {:match, []}

      assert Macro.to_string(error.expr) ==
               "assert_called(trace, Cache.fetch(:users, id) when id > 100)"
    end

    test "says when the only call did not match" do
      trace = capture(fn -> Cache.fetch(:users, 1) end)
      error = failure(do: assert_called(trace, Cache.fetch(:posts, _)))

      assert error.message =~ "but the only call to SampleApp.Cache.fetch/2 did not match:"
      assert error.right == [:users, 1]
    end

    test "shows pinned values" do
      trace = two_fetches()
      wanted = 3
      error = failure(do: assert_called(trace, Cache.fetch(_, ^wanted)))

      assert error.message =~ "    SampleApp.Cache.fetch(_, ^wanted)\n"
      assert error.message =~ "The following variables were pinned:\n    wanted = 3"
      assert error.context == {:match, [{{:wanted, nil}, 3}]}
    end

    test "lists the closest calls by name and the traced functions when it was never called" do
      trace = two_fetches()
      error = failure(do: assert_called(trace, Repo.get!(:users, 1)))

      assert error.message == """
             Expected a call matching:

                 SampleApp.Repo.get!(:users, 1)

             but SampleApp.Repo.get!/2 was never called.

             Closest calls by name:

                 SampleApp.Repo.get(:users, 1)
                 SampleApp.Repo.get(:posts, 2)

             Traced functions: SampleApp.Cache.fetch/2 (2 calls), SampleApp.Cache.put/3 (2 calls), \
             SampleApp.Repo.get/2 (2 calls)\
             """

      assert error.left == ExUnit.AssertionError.no_value()
    end

    test "the same function with another arity comes first among the closest" do
      trace = capture(fn -> Cache.fetch_all(:users, [1]) end)
      error = failure(do: assert_called(trace, Cache.fetch(1)))

      assert error.message =~
               "Closest calls by name:\n\n    SampleApp.Cache.fetch(:users, 1)\n    SampleApp.Cache.fetch_all(:users, [1])"
    end

    test "says when nothing was traced at all" do
      trace = capture(fn -> :nothing end)
      error = failure(do: assert_called(trace, Cache.fetch(_, _)))

      assert error.message =~
               "but no calls were traced at all. Check that the patterns given to " <>
                 "Kino.Trace.capture/3 include SampleApp.Cache.fetch/2 and that the block calls it."
    end

    test "times: gives both counts, the matching calls and the others" do
      trace = two_fetches()
      error = failure(do: assert_called(trace, Cache.fetch(:users, _), times: 2))

      assert error.message == """
             Expected a call matching:

                 SampleApp.Cache.fetch(:users, _)

             to happen 2 times, but it happened 1 time:

                 SampleApp.Cache.fetch(:users, 1)

             Calls to SampleApp.Cache.fetch/2 that did not match:

                 SampleApp.Cache.fetch(:posts, 2)\
             """

      assert {error.left, error.right} == {1, 2}
    end

    test "shows the process of each call when several processes called" do
      trace =
        capture(fn ->
          Cache.fetch(:users, 1)
          Task.async(fn -> Cache.fetch(:users, 2) end) |> Task.await()
        end)

      error = failure(do: assert_called(trace, Cache.fetch(:posts, _)))
      assert error.message =~ "SampleApp.Cache.fetch(:users, 1)  (#{inspect(self())})"
      assert error.message =~ ~r/SampleApp.Cache.fetch\(:users, 2\)  \(#PID<[\d.]+>\)/
    end

    test "pid: says how many calls of other processes it left out" do
      trace = capture(fn -> Task.async(fn -> Cache.fetch(:users, 2) end) |> Task.await() end)
      error = failure(do: assert_called(trace, Cache.fetch(:users, 2), pid: self()))

      assert error.message =~
               "Only calls from #{inspect(self())} were checked (pid: option); " <>
                 "3 calls from other processes were left out."
    end

    test "shows at most 10 calls" do
      trace = capture(fn -> Cache.fetch_all(:users, Enum.to_list(1..15)) end)
      error = failure(do: assert_called(trace, Cache.fetch(:posts, _)))

      assert error.message =~ "none of the 15 calls to SampleApp.Cache.fetch/2 matched"
      assert error.message =~ "SampleApp.Cache.fetch(:users, 10)\n    ... and 5 more"
      refute error.message =~ "SampleApp.Cache.fetch(:users, 11)"
    end
  end

  describe "cut arguments" do
    test "show as ... with a note on the caps" do
      # a hand-made event: what the tracer gives for a list too long to copy whole
      cut_list = [1, 2, %Kino.Trace.Cut{kind: :items}]

      trace = [
        %Kino.Trace.Event{
          id: 1,
          kind: :call,
          pid: self(),
          module: SampleApp.Cache,
          function: :fetch_all,
          arity: 2,
          args: [:users, cut_list]
        }
      ]

      error = failure(do: assert_called(trace, Cache.fetch_all(:users, [])))
      assert error.message =~ "    SampleApp.Cache.fetch_all(:users, [1, 2, ...])\n"
      assert error.message =~ "Some arguments were too large to trace whole (shown as ...)"
    end
  end

  describe "functions the capture did not trace" do
    test "refute_called raises ArgumentError: it could never fail" do
      trace = Kino.Trace.capture(["SampleApp.Cache.fetch/2"], fn -> Cache.evict(:users, 1) end)

      error = assert_raise ArgumentError, fn -> refute_called trace, Repo.delete(_) end

      assert error.message ==
               "refute_called on SampleApp.Repo.delete/1, which the capture did not trace, " <>
                 "could never fail: add it to the patterns given to Kino.Trace.capture/3 " <>
                 ~s[(they were "SampleApp.Cache.fetch/2")]

      assert_raise ArgumentError, ~r/assert_called with times: 0 on SampleApp.Repo.delete/, fn ->
        assert_called trace, Repo.delete(_), times: 0
      end
    end

    test "assert_called says the function was not traced" do
      trace =
        Kino.Trace.capture(["SampleApp.Cache.fetch/2", "SampleApp.Repo.get/2"], fn ->
          Cache.fetch(:users, 1)
        end)

      error = failure(do: assert_called(trace, Cache.put(:users, 1, _)))

      assert error.message =~
               "but SampleApp.Cache.put/3 was never called.\n\n" <>
                 "Traced functions: SampleApp.Cache.fetch/2 (1 call), SampleApp.Repo.get/2 (1 call)"

      assert error.message =~
               "SampleApp.Cache.put/3 was not traced: the patterns given to Kino.Trace.capture/3 were " <>
                 ~s["SampleApp.Cache.fetch/2", "SampleApp.Repo.get/2".]

      error = failure(do: assert_called_in_order(trace, [Cache.fetch(_, _), Cache.put(_, _, _)]))
      assert error.message =~ "SampleApp.Cache.put/3 was not traced"
    end
  end

  describe "refute_called" do
    test "lists the calls that matched" do
      trace = two_fetches()
      error = failure(do: refute_called(trace, Repo.get(_, id) when id > 0))

      assert error.message == """
             Expected no call matching:

                 SampleApp.Repo.get(_, id) when id > 0

             but found 2 calls:

                 SampleApp.Repo.get(:users, 1)
                 SampleApp.Repo.get(:posts, 2)\
             """
    end
  end

  describe "assert_returned" do
    test "lists what each matching call returned and diffs the first return" do
      trace =
        capture(fn ->
          Cache.fetch(:users, 0)
          catch_error(Cache.fetch(:users, -1))
        end)

      error = failure(do: assert_returned(trace, Cache.fetch(:users, _), {:ok, _}))

      assert error.message == """
             Expected a call matching:

                 SampleApp.Cache.fetch(:users, _)

             to return a value matching:

                 {:ok, _}

             but none of the 2 matching calls did:

                 SampleApp.Cache.fetch(:users, 0)  returned {:error, :not_found}
                 SampleApp.Cache.fetch(:users, -1)  raised ArgumentError: negative id: -1\
             """

      assert Macro.to_string(error.left) == "{:ok, _}"
      assert error.right == {:error, :not_found}
    end

    test "explains a missing call like assert_called" do
      trace = two_fetches()
      error = failure(do: assert_returned(trace, Cache.fetch(:admins, _), {:ok, _}))

      assert error.message =~
               "to return a value matching:\n\n    {:ok, _}\n\nbut none of the 2 calls to SampleApp.Cache.fetch/2 matched:"
    end
  end

  describe "assert_raised_in" do
    test "lists what the matching calls did instead" do
      trace = two_fetches()
      error = failure(do: assert_raised_in(trace, Repo.get(_, _), ArgumentError))

      assert error.message == """
             Expected a call matching:

                 SampleApp.Repo.get(_, _)

             to raise ArgumentError

             but none of the 2 matching calls did:

                 SampleApp.Repo.get(:users, 1)  returned {:ok, %{id: 1, table: :users}}
                 SampleApp.Repo.get(:posts, 2)  returned {:ok, %{id: 2, table: :posts}}\
             """
    end

    test "diffs the message when the exception module is right" do
      trace = capture(fn -> catch_error(Repo.get(:users, -5)) end)

      error =
        failure(do: assert_raised_in(trace, Repo.get(_, _), ArgumentError, "negative id: 5"))

      assert error.message =~ "to raise ArgumentError with message \"negative id: 5\""

      assert error.message =~
               "SampleApp.Repo.get(:users, -5)  raised ArgumentError: negative id: -5"

      assert {error.left, error.right} == {"negative id: -5", "negative id: 5"}
    end

    test "shows throws and exits" do
      trace =
        capture(fn ->
          catch_throw(Repo.get!(:users, 0))
          catch_exit(Repo.crash(:boom))
        end)

      error = failure(do: assert_raised_in(trace, Repo.get!(_, _), {:exit, _}))
      assert error.message =~ "SampleApp.Repo.get!(:users, 0)  threw :not_found"
      assert error.right == {:throw, :not_found}

      error = failure(do: assert_raised_in(trace, Repo.crash(_), {:exit, :normal}))
      assert error.message =~ "SampleApp.Repo.crash(:boom)  exited {:shutdown, :boom}"
    end
  end

  describe "assert_called_in_order" do
    test "says which pattern had no call after the previous one" do
      trace =
        capture(fn ->
          Cache.evict(:users, 1)
          Cache.fetch(:users, 1)
        end)

      error = failure(do: assert_called_in_order(trace, [Repo.get(_, _), Repo.delete(_)]))

      assert error.message == """
             Expected calls in this order:

                 1. SampleApp.Repo.get(_, _)
                 2. SampleApp.Repo.delete(_)

             but no call matched 2. SampleApp.Repo.delete(_) after SampleApp.Repo.get(:users, 1) \
             (it was only called before that).

             Calls to these functions, in order:

                 SampleApp.Repo.delete(1)
                 SampleApp.Repo.get(:users, 1)\
             """
    end

    test "says when the first pattern never matched" do
      trace = two_fetches()
      error = failure(do: assert_called_in_order(trace, [Repo.delete(_), Repo.get(_, _)]))

      assert error.message =~ "but no call matched 1. SampleApp.Repo.delete(_).\n"

      assert error.message =~
               "Calls to these functions, in order:\n\n    SampleApp.Repo.get(:users, 1)"
    end
  end
end
