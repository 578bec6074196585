# Two async test modules trace the same function at the same time, each from its own
# test process with its own arguments. Each must see exactly its own calls.
#
# The modules meet twice inside their capture blocks (Kino.Trace.AssertionsRendezvous):
# after both traces have started, and after both have made all their calls. So every call
# of one module happens while the other module's trace is running. They are in one file
# so they are always loaded together; ExUnit runs async modules concurrently (max_cases
# is at least 2 on any machine), so they meet.
defmodule Kino.Trace.AssertionsIsolationTest.Shared do
  @moduledoc false
  use Kino.Trace.Assertions
  import ExUnit.Assertions

  alias Kino.Trace.AssertionsRendezvous, as: Rendezvous
  alias SampleApp.Shared

  @calls 200
  # Long: the other module starts when ExUnit has a free slot for it (max_cases), which
  # the other async modules may hold for tens of seconds on a loaded 2-core machine
  # (30 s was once too short in a full run); it only delays a real failure.
  @timeout 180_000

  # Runs one side: traces SampleApp.Shared.ping/2 while calling it @calls times with
  # `tag`, in step with the other side.
  def run(tag) do
    Rendezvous.ensure_started()

    Kino.Trace.capture(["SampleApp.Shared.ping/2"], fn ->
      meet!({:isolation, :started})
      for n <- 1..@calls, do: Shared.ping(tag, n)
      meet!({:isolation, :called})
      tag
    end)
  end

  # One side's test, run in its test process: its trace has its own @calls calls, all
  # made by this process, and none of the other side's (`other`).
  def assert_sees_own_calls(tag, other) do
    trace = run(tag)
    calls = @calls

    assert trace.result == tag
    assert_called trace, Shared.ping(^tag, _), times: calls, pid: self()
    assert_called trace, &Shared.ping/2, times: calls
    refute_called trace, Shared.ping(^other, _)
    assert_called_in_order trace, [Shared.ping(^tag, 1), Shared.ping(^tag, ^calls)]
  end

  defp meet!(point) do
    case Rendezvous.meet(point, 2, @timeout) do
      :ok ->
        :ok

      {:error, :timeout} ->
        raise "the other isolation test module did not reach #{inspect(point)} within " <>
                "#{@timeout} ms: both modules must run concurrently (async: true, max_cases >= 2)"
    end
  end
end

defmodule Kino.Trace.AssertionsIsolationTest.A do
  use ExUnit.Case, async: true

  # (the rendezvous may wait up to Shared's @timeout)
  @moduletag timeout: 300_000

  alias Kino.Trace.AssertionsIsolationTest.Shared, as: Side

  test "sees only the calls of its own test process" do
    Side.assert_sees_own_calls(:a, :b)
  end
end

defmodule Kino.Trace.AssertionsIsolationTest.B do
  use ExUnit.Case, async: true

  # (the rendezvous may wait up to Shared's @timeout)
  @moduletag timeout: 300_000

  alias Kino.Trace.AssertionsIsolationTest.Shared, as: Side

  test "sees only the calls of its own test process" do
    Side.assert_sees_own_calls(:b, :a)
  end
end

defmodule Kino.Trace.AssertionsIsolationTest.Bystanders do
  use ExUnit.Case, async: true
  use Kino.Trace.Assertions

  alias SampleApp.Shared

  test "a process that was not spawned in the block is not traced" do
    test_pid = self()

    bystander =
      spawn_link(fn ->
        send(test_pid, :ready)
        ping_forever(0)
      end)

    assert_receive :ready

    trace =
      Kino.Trace.capture(["SampleApp.Shared.ping/2"], fn ->
        for n <- 1..50, do: Shared.ping(:mine, n)
        # the bystander pings while this trace runs
        send(bystander, {:sync, self()})
        assert_receive :synced
      end)

    unlink_and_stop(bystander)
    assert_called trace, &Shared.ping/2, times: 50
    refute_called trace, Shared.ping(:bystander, _)
  end

  test "two captures in concurrent processes of one test each see their own calls" do
    traces =
      [:left, :right]
      |> Enum.map(fn tag ->
        Task.async(fn ->
          Kino.Trace.capture(["SampleApp.Shared.ping/2"], fn ->
            for n <- 1..100, do: Shared.ping(tag, n)
          end)
        end)
      end)
      |> Task.await_many(30_000)

    [left, right] = traces
    assert_called left, Shared.ping(:left, _), times: 100
    assert_called left, &Shared.ping/2, times: 100
    assert_called right, Shared.ping(:right, _), times: 100
    assert_called right, &Shared.ping/2, times: 100
  end

  defp ping_forever(n) do
    Shared.ping(:bystander, n)

    receive do
      :stop ->
        :ok

      {:sync, from} ->
        Shared.ping(:bystander, n)
        send(from, :synced)
        ping_forever(n + 1)
    after
      0 -> ping_forever(n + 1)
    end
  end

  defp unlink_and_stop(pid) do
    Process.unlink(pid)
    send(pid, :stop)
  end
end
