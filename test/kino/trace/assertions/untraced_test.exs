defmodule Kino.Trace.Assertions.UntracedTest do
  # Calls made in a process the capture did not trace (a GenServer the block calls) are
  # not captured: an assertion about such a missing call names the processes the block
  # sent messages to and suggests the pids: option that traces them.
  use ExUnit.Case, async: true
  use Kino.Trace.Assertions

  import KinoTraceTest.AssertionFailure

  alias SampleApp.Repo

  doctest KinoTrace.Capture.Sends

  @patterns ["SampleApp.Repo"]

  # A named Agent whose state is an id; reading it calls Repo.get/2 in the agent.
  defp start_store(name) do
    start_supervised!(%{id: name, start: {Agent, :start_link, [fn -> 42 end, [name: name]]}})
  end

  defp read(server), do: Agent.get(server, fn id -> Repo.get(:users, id) end)

  describe "a call made in a named GenServer the block called" do
    setup do
      name = :"Elixir.KinoTraceTest.Store#{System.unique_integer([:positive])}"
      %{name: name, pid: start_store(name)}
    end

    test "is missing, and the failure names the server and the pids: option", %{
      name: name,
      pid: pid
    } do
      trace = Kino.Trace.capture(@patterns, fn -> read(name) end)

      assert trace.result == {:ok, %{id: 42, table: :users}}
      assert trace.untraced_receivers == [name]
      refute Enum.any?(trace.untraced_receivers, &(&1 == pid))

      error = failure(do: assert_called(trace, Repo.get(:users, 42)))

      assert error.message =~
               "The block sent messages to processes the capture did not trace: #{inspect(name)}. " <>
                 "Calls they made are not in the capture; to capture them, pass " <>
                 "pids: [#{inspect(name)}] to Kino.Trace.capture/3."
    end

    test "is captured with pids: [name], and then no hint", %{name: name, pid: pid} do
      trace = Kino.Trace.capture(@patterns, fn -> read(name) end, pids: [name])

      assert trace.untraced_receivers == []
      assert [%{pid: ^pid}] = assert_called(trace, Repo.get(:users, 42))
      assert_returned trace, Repo.get(:users, _), {:ok, %{id: 42}}
    end

    test "every assertion about a missing call gives the hint", %{name: name} do
      trace = Kino.Trace.capture(@patterns, fn -> read(name) end)
      hint = "pids: [#{inspect(name)}]"

      assert failure(do: assert_returned(trace, Repo.get(_, _), {:ok, _})).message =~ hint
      assert failure(do: assert_raised_in(trace, Repo.get(_, -1), ArgumentError)).message =~ hint
      assert failure(do: assert_called(trace, Repo.get(_, _), times: 1)).message =~ hint

      assert failure(do: assert_called_in_order(trace, [Repo.get(_, _), Repo.delete(_)])).message =~
               hint
    end

    test "assertions that fail on calls that were captured give no hint", %{name: name} do
      trace =
        Kino.Trace.capture(@patterns, fn ->
          Repo.get(:users, 1)
          Repo.get(:users, 1)
          read(name)
        end)

      assert trace.untraced_receivers == [name]
      # the calls are there: too many of them, or one that returned something else
      refute failure(do: assert_called(trace, Repo.get(_, _), times: 1)).message =~
               "did not trace"

      refute failure(do: assert_returned(trace, Repo.get(_, _), :nothing)).message =~
               "did not trace"

      refute failure(do: refute_called(trace, Repo.get(_, _))).message =~ "did not trace"
    end
  end

  test "a process without a name is named by its pid" do
    server =
      spawn_link(fn ->
        receive do: ({from, :ping} -> send(from, :pong))
        receive do: (:stop -> :ok)
      end)

    trace =
      Kino.Trace.capture(@patterns, fn ->
        send(server, {self(), :ping})
        receive do: (:pong -> :ok)
      end)

    assert trace.untraced_receivers == [server]
    message = failure(do: assert_called(trace, Repo.get(_, _))).message
    assert message =~ "did not trace: #{inspect(server)}."
    assert message =~ "pids: [#{inspect(server)}]"
    send(server, :stop)
  end

  test "a global name is given as {:global, name}, and pids: takes it" do
    name = {:global, {__MODULE__, System.unique_integer([:positive])}}
    {:ok, pid} = Agent.start_link(fn -> 42 end, name: name)

    trace = Kino.Trace.capture(@patterns, fn -> read(name) end)
    assert trace.untraced_receivers == [name]
    assert failure(do: assert_called(trace, Repo.get(_, _))).message =~ "pids: [#{inspect(name)}]"

    trace = Kino.Trace.capture(@patterns, fn -> read(name) end, pids: [name])
    assert [%{pid: ^pid}] = assert_called(trace, Repo.get(:users, 42))
  end

  test "a {:via, module, name} server is traced with pids: {:via, module, name}" do
    registry = :"#{__MODULE__}.Registry#{System.unique_integer([:positive])}"
    start_supervised!({Registry, keys: :unique, name: registry})
    name = {:via, Registry, {registry, :store}}
    {:ok, pid} = Agent.start_link(fn -> 42 end, name: name)

    trace = Kino.Trace.capture(@patterns, fn -> read(name) end)
    assert trace.untraced_receivers == [pid]

    trace = Kino.Trace.capture(@patterns, fn -> read(name) end, pids: name)
    assert [%{pid: ^pid}] = assert_called(trace, Repo.get(:users, 42))
  end

  test "traced children, I/O and processes that are gone are not named" do
    trace =
      Kino.Trace.capture(@patterns, fn ->
        # a child: traced by the capture (children: true), and alive at the end
        child = spawn(fn -> receive do: (:stop -> :ok) end)
        send(child, :hello)
        # I/O requests to the group leader
        ExUnit.CaptureIO.capture_io(fn -> IO.puts("hello") end)
        # a process that is gone by the end
        {:ok, gone} = Agent.start(fn -> 0 end)
        Agent.stop(gone)
        child
      end)

    assert trace.untraced_receivers == []
    refute failure(do: assert_called(trace, Repo.get(_, _))).message =~ "did not trace"
    send(trace.result, :stop)
  end

  test "the block's own sends are traced in a session of their own: the capture loses nothing" do
    {:ok, agent} = Agent.start_link(fn -> 42 end)

    trace =
      Kino.Trace.capture(
        @patterns,
        fn ->
          for _ <- 1..2000, do: Agent.get(agent, & &1)
          Repo.get(:users, 1)
        end,
        limit: 3
      )

    assert Kino.Trace.Capture.complete?(trace)
    assert [_call, _return] = trace.events
    assert trace.untraced_receivers == [agent]
  end
end
