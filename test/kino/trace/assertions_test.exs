defmodule Kino.Trace.AssertionsTest do
  # The assertions on real traces: each test runs SampleApp code under
  # Kino.Trace.capture/3 and checks what it called, returned and raised.
  use ExUnit.Case, async: true
  use Kino.Trace.Assertions

  alias KinoTrace.Assertions.Call
  alias SampleApp.{Cache, Repo}

  @patterns ["SampleApp.Cache", "SampleApp.Repo"]

  defp capture(fun, opts \\ []), do: Kino.Trace.capture(@patterns, fun, opts)

  describe "assert_called" do
    test "passes for a call that happened and returns the matching calls" do
      trace = capture(fn -> Cache.fetch(:users, 42) end)

      assert [
               %Call{module: SampleApp.Cache, function: :fetch, args: [:users, 42], pid: pid} =
                 call
             ] =
               assert_called(trace, Cache.fetch(:users, id) when id > 0)

      assert pid == self()
      assert call.outcome == {:returned, {:ok, %{id: 42, table: :users}}}
      assert trace.result == {:ok, %{id: 42, table: :users}}
    end

    test "sees the calls made inside the traced functions" do
      trace = capture(fn -> Cache.fetch(:users, 42) end)

      assert_called trace, Repo.get(:users, 42)
      assert_called trace, Cache.put(:users, 42, %{id: 42})
      assert_called trace, &Cache.put/3
    end

    test "pins and guards select the calls" do
      trace = capture(fn -> Cache.fetch_all(:users, [1, 2, 3]) end)
      id = 2

      assert [%Call{args: [:users, 2]}] = assert_called(trace, Cache.fetch(_, ^id))
      assert length(assert_called(trace, Cache.fetch(:users, n) when n >= 2)) == 2

      assert_raise ExUnit.AssertionError, fn ->
        assert_called trace, Cache.fetch(:users, n) when n > 3
      end
    end

    test "times: counts the matching calls exactly" do
      trace =
        capture(fn ->
          Cache.fetch(:users, 1)
          Cache.fetch(:users, 1)
          Cache.fetch(:posts, 2)
        end)

      assert_called trace, Cache.fetch(_, _), times: 3
      assert_called trace, Cache.fetch(:users, _), times: 2
      # the second fetch of users/1 is served by the cache
      assert_called trace, Repo.get(:users, 1), times: 1
      assert_called trace, Repo.delete(_), times: 0

      assert_raise ExUnit.AssertionError, fn ->
        assert_called trace, Cache.fetch(_, _), times: 2
      end

      assert_raise ExUnit.AssertionError, fn ->
        assert_called trace, Cache.fetch(_, _), times: 4
      end
    end

    test "sees processes spawned in the block, and pid: narrows to one process" do
      trace = capture(fn -> Task.async(fn -> Cache.fetch(:users, 5) end) |> Task.await() end)

      assert [%Call{pid: task_pid}] = assert_called(trace, Cache.fetch(:users, 5))
      assert task_pid != self()
      assert_called trace, Cache.fetch(:users, 5), pid: task_pid
    end
  end

  describe "refute_called" do
    test "passes when nothing matched" do
      trace = capture(fn -> Cache.fetch(:users, 1) end)

      assert refute_called(trace, Repo.delete(_)) == :ok
      refute_called trace, Cache.fetch(:posts, _)
      refute_called trace, Cache.fetch(:users, id) when id > 1
    end

    test "fails when a call matched" do
      trace = capture(fn -> Cache.evict(:users, 9) end)
      assert_raise ExUnit.AssertionError, fn -> refute_called(trace, Repo.delete(9)) end
    end

    test "pid: looks only at one process" do
      trace = capture(fn -> Task.async(fn -> Repo.delete(3) end) |> Task.await() end)

      refute_called trace, Repo.delete(_), pid: self()
      assert_raise ExUnit.AssertionError, fn -> refute_called(trace, Repo.delete(_)) end
    end
  end

  describe "assert_returned" do
    test "checks the return value of a matching call" do
      trace = capture(fn -> Cache.fetch_all(:users, [0, 7]) end)

      assert [%Call{args: [:users, 7]}] =
               assert_returned(trace, Cache.fetch(:users, _), {:ok, %{id: 7}})

      assert_returned trace, Cache.fetch(:users, 0), {:error, :not_found}
      # the return pattern can pin what the call pattern bound
      assert_returned trace, Repo.get(table, id), {:ok, %{id: ^id, table: ^table}}

      assert_raise ExUnit.AssertionError, fn ->
        assert_returned trace, Repo.get(_, id), {:ok, %{id: id2}} when id2 != id
      end
    end

    test "the return pattern takes guards and pins" do
      trace = capture(fn -> Cache.fetch(:users, 7) end)
      table = :users

      assert_returned trace, Cache.fetch(_, _), {:ok, row} when map_size(row) == 2
      assert_returned trace, Cache.fetch(_, _), {:ok, %{table: ^table}}

      assert_raise ExUnit.AssertionError, fn ->
        assert_returned trace, Cache.fetch(_, _), {:ok, row} when map_size(row) > 2
      end
    end

    test "fails when the matching calls returned something else or raised" do
      trace =
        capture(fn ->
          Cache.fetch(:users, 0)
          catch_error(Cache.fetch(:users, -1))
        end)

      assert_raise ExUnit.AssertionError, fn ->
        assert_returned trace, Cache.fetch(:users, _), {:ok, _}
      end
    end
  end

  describe "assert_raised_in" do
    test "matches the exception module and message" do
      trace = capture(fn -> catch_error(Cache.fetch(:users, -1)) end)

      assert [%Call{outcome: {:raised, :error, %ArgumentError{}}}] =
               assert_raised_in(trace, Repo.get(:users, -1), ArgumentError)

      # the exception passed through Cache.fetch/2 too
      assert_raised_in trace, Cache.fetch(:users, -1), ArgumentError
      assert_raised_in trace, Cache.fetch(:users, -1), ArgumentError, "negative id: -1"
      assert_raised_in trace, Cache.fetch(:users, -1), ArgumentError, ~r/negative/

      assert_raised_in(
        trace,
        Cache.fetch(:users, -1),
        {:error, %ArgumentError{message: "negative" <> _}}
      )

      assert_raise ExUnit.AssertionError, fn ->
        assert_raised_in trace, Cache.fetch(_, _), KeyError
      end

      assert_raise ExUnit.AssertionError, fn ->
        assert_raised_in trace, Cache.fetch(_, _), ArgumentError, "other"
      end
    end

    test "Erlang errors count as the exception they stand for" do
      trace = capture(fn -> catch_error(Repo.get(:users, :not_an_integer)) end, [])
      # Repo.get/2 has a guard: the call fails with FunctionClauseError before its body runs
      assert_raised_in trace, Repo.get(_, :not_an_integer), FunctionClauseError
    end

    test "throws and exits are matched as {class, reason}" do
      trace =
        capture(fn ->
          catch_throw(Repo.get!(:users, 0))
          catch_exit(Repo.crash(:boom))
        end)

      assert_raised_in trace, Repo.get!(:users, 0), {:throw, :not_found}
      assert_raised_in trace, Repo.crash(_), {:exit, {:shutdown, reason}} when is_atom(reason)

      assert_raise ExUnit.AssertionError, fn ->
        assert_raised_in trace, Repo.get!(_, _), {:exit, _}
      end
    end
  end

  describe "assert_called_in_order" do
    test "passes when the calls form a subsequence in that order" do
      trace =
        capture(fn ->
          Cache.fetch(:users, 1)
          Cache.evict(:users, 1)
          Cache.fetch(:users, 1)
        end)

      assert [%Call{function: :get}, %Call{function: :delete}, %Call{function: :get}] =
               assert_called_in_order(trace, [Repo.get(_, 1), Repo.delete(1), Repo.get(_, 1)])

      assert_called_in_order trace, [Cache.fetch(:users, id), Cache.put(:users, id, _)]
      assert_called_in_order trace, [Cache.fetch(_, _)]
    end

    test "fails when the order differs or a call is missing" do
      trace =
        capture(fn ->
          Cache.fetch(:users, 1)
          Cache.evict(:users, 1)
        end)

      assert_raise ExUnit.AssertionError, fn ->
        assert_called_in_order trace, [Repo.delete(_), Repo.get(_, _)]
      end

      # only one get: the same call can not count twice
      assert_raise ExUnit.AssertionError, fn ->
        assert_called_in_order trace, [Repo.get(_, _), Repo.get(_, _)]
      end
    end
  end

  describe "capture errors" do
    test "an unknown module in the capture patterns is an ArgumentError that names it" do
      error =
        assert_raise ArgumentError, fn ->
          Kino.Trace.capture(["SampleApp.NoSuchModule.fetch/2"], fn -> :ok end)
        end

      assert Exception.message(error) =~ "SampleApp.NoSuchModule"
    end
  end
end
