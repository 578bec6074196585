defmodule KinoTrace.Backend.Reaper.Canary do
  @moduledoc false
  # The reaper's canary (see KinoTrace.Backend.Reaper): one BIF, `:erlang.adler32_combine/3`,
  # traced in a session of the reaper's own for one process of its own that calls it
  # only when a check asks, so the reaper sees when BIF tracing was switched off; and
  # the probe, when the reaper starts, of whether this VM has erlang/otp#10349. Runs in
  # the reaper's process, on its state (`canary`, `caller`, `bif_traces`, `switch_offs`).

  @canary {:erlang, :adler32_combine, 3}

  @doc "Whether ending a session switches off a BIF traced in another (erlang/otp#10349)."
  @spec probe() :: boolean()
  # (a process of its own calls the canary, traced in one session while another ends)
  def probe do
    caller =
      spawn(fn ->
        receive(
          do: ({:call, from} ->
                 _ = :erlang.adler32_combine(1, 1, 1)
                 send(from, :called))
        )
      end)

    probe = :trace.session_create(:kino_trace_probe, self(), [])
    :trace.process(probe, caller, true, [:call])
    arm(probe)
    :trace.session_destroy(:trace.session_create(:kino_trace_probe, self(), []))
    send(caller, {:call, self()})
    receive(do: (:called -> :ok))
    delivered = :erlang.trace_delivered(caller)
    receive(do: ({:trace_delivered, ^caller, ^delivered} -> :ok))
    :trace.session_destroy(probe)

    receive do
      {:trace, ^caller, :call, {:erlang, :adler32_combine, _}} -> false
    after
      0 -> true
    end
  end

  @doc """
  The canary while someone watches (a process cannot trace itself: the reaper traces a
  process of its own that calls the canary; no trace of kino_trace's records it).
  """
  @spec ensure(map()) :: map()
  def ensure(%{canary: nil} = state) do
    caller = spawn_link(&caller_loop/0)
    KinoTrace.Internal.register(caller)
    canary = :trace.session_create(:kino_trace_canary, self(), [])
    :trace.process(canary, caller, true, [:call])
    arm(canary)
    %{state | canary: canary, caller: caller}
  end

  def ensure(state), do: state

  @doc """
  Has the caller call the canary and waits for the trace message of that call: none
  means BIF tracing was switched off (counted, the canary set again, the running traces
  of BIFs told to set their patterns again).
  """
  @spec check(map()) :: map()
  def check(%{caller: caller} = state) do
    ref = make_ref()
    send(caller, {:call, self(), ref})

    receive do
      {^ref, :called} -> :ok
    end

    delivered = :erlang.trace_delivered(caller)

    receive do
      {:trace_delivered, ^caller, ^delivered} -> :ok
    end

    receive do
      {:trace, ^caller, :call, {:erlang, :adler32_combine, _}} -> state
    after
      0 ->
        arm(state.canary)
        for pid <- Map.keys(state.bif_traces), do: send(pid, :reassert_bifs)
        %{state | switch_offs: state.switch_offs + 1}
    end
  end

  @doc "Sets the canary's pattern in `session`."
  @spec arm(term()) :: term()
  def arm(canary), do: :trace.function(canary, @canary, true, [:global])

  # Calls the canary as code calls a BIF (not through apply/3), when asked.
  defp caller_loop do
    receive do
      {:call, from, ref} ->
        _ = :erlang.adler32_combine(1, 1, 1)
        send(from, {ref, :called})
        caller_loop()
    end
  end
end
