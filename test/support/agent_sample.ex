defmodule KinoTraceTest.AgentSample do
  @moduledoc false
  # GenServer replies (issue 23 item 4): a named Agent and a caller process that calls
  # Agent.get/2 twice. Since OTP 24 each reply is sent to an alias the call made, a
  # reference, not to the caller's pid.
  #
  #   agent = AgentSample.start(:name)        # trace it (and maybe the caller) then
  #   caller = AgentSample.caller(:name)      # waits for go/1
  #   AgentSample.go(caller)                  # -> {:agent_calls_done, caller, [0, 1]}

  @doc "A named Agent holding 0, not linked to the caller."
  def start(name) do
    {:ok, agent} = Agent.start(fn -> 0 end, name: name)
    agent
  end

  @doc "A process that, on go/1, calls the agent twice, reports, then waits for :stop."
  def caller(name) do
    parent = self()

    spawn(fn ->
      receive do
        :go -> :ok
      end

      results = [Agent.get(name, & &1), Agent.get(name, &(&1 + 1))]
      send(parent, {:agent_calls_done, self(), results})

      receive do
        :stop -> :ok
      end
    end)
  end

  @doc "Starts the calls and waits for them."
  def go(caller) do
    send(caller, :go)

    receive do
      {:agent_calls_done, ^caller, results} -> results
    after
      10_000 -> raise "the agent calls did not finish"
    end
  end

  @doc "Stops the agent and the caller."
  def stop(agent, caller) do
    send(caller, :stop)
    if Process.alive?(agent), do: Agent.stop(agent)
    :ok
  end
end
