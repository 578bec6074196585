defmodule KinoTrace.Session.Subscribers do
  @moduledoc false
  # A session's subscribers and the processes it keeps out of its trace. Works on the
  # session's state, its fields
  #
  #   * `subscribers`: pid => {monitor, tag}; events go to pid as {:kino_trace, tag, ...};
  #   * `held`: pid => the trace flags it had before it was held: a subscriber is not
  #     traced while subscribed, nor a consumer of the trace's events elsewhere (a
  #     coordinator's subscriber) until it is released; the flags are given back then;
  #   * `excluded`: pids given to exclude/2 (alive ones), kept out again after the
  #     fallback's restore.
  #
  # and sends them what the session has for them (events, status), and tells when one
  # of this node's is too far behind for the session to go on draining.

  alias KinoTrace.Backend

  @doc "Subscribes `pid`, whose messages carry `tag`; holds it. Subscribing twice is once."
  @spec subscribe(map(), pid(), term()) :: map()
  def subscribe(state, pid, tag) do
    if Map.has_key?(state.subscribers, pid) do
      state
    else
      state = hold(state, pid)
      %{state | subscribers: Map.put(state.subscribers, pid, {Process.monitor(pid), tag})}
    end
  end

  @doc "Unsubscribes `pid` and releases it."
  @spec unsubscribe(map(), pid()) :: map()
  def unsubscribe(state, pid) do
    {entry, subscribers} = Map.pop(state.subscribers, pid)
    with {ref, _tag} <- entry, do: Process.demonitor(ref, [:flush])
    release(%{state | subscribers: subscribers}, pid)
  end

  @doc "A monitored process went down: a subscriber is forgotten (nothing to give back)."
  @spec down(map(), reference(), pid()) :: map()
  def down(state, ref, pid) do
    case state.subscribers do
      %{^pid => {^ref, _tag}} ->
        %{
          state
          | subscribers: Map.delete(state.subscribers, pid),
            held: Map.delete(state.held, pid)
        }

      _ ->
        state
    end
  end

  @doc "Stops tracing `pid` (of the trace's node) until it is released; keeps its flags."
  @spec hold(map(), pid()) :: map()
  def hold(state, pid) do
    if Map.has_key?(state.held, pid) do
      state
    else
      flags =
        if tracing?(state) and node(pid) == state.backend.node,
          do: untrace(state.backend, pid),
          else: []

      %{state | held: Map.put(state.held, pid, flags)}
    end
  end

  @doc "Gives `pid` back the flags it had when it was held (unless it is kino_trace's own)."
  @spec release(map(), pid()) :: map()
  def release(state, pid) do
    {flags, held} = Map.pop(state.held, pid, [])

    if flags != [] and tracing?(state) and Process.alive?(pid) and
         pid not in KinoTrace.Internal.pids() do
      Backend.trace(state.backend, :process, [pid, true, flags])
    end

    %{state | held: held}
  end

  @doc "Stops tracing `pid`; this node's are kept out again after the fallback's restore."
  @spec exclude(map(), pid()) :: map()
  def exclude(state, pid) do
    if tracing?(state) and node(pid) == state.backend.node,
      do: Backend.trace(state.backend, :process, [pid, false, [:all]])

    excluded = state.excluded |> Enum.filter(&Process.alive?/1) |> MapSet.new() |> MapSet.put(pid)
    %{state | excluded: if(node(pid) == node(), do: excluded, else: state.excluded)}
  end

  @doc "The processes kept out of the trace: the held and the excluded ones."
  @spec kept_out(map()) :: [pid()]
  def kept_out(state), do: Map.keys(state.held) ++ MapSet.to_list(state.excluded)

  @doc "Sends `message` to every subscriber, as `{:kino_trace, tag, message}`."
  @spec broadcast(map(), term()) :: map()
  def broadcast(state, message) do
    KinoTrace.Server.Delivery.notify(state.subscribers, message)
    state
  end

  # Stops tracing `pid` in this session; returns the flags it had.
  defp untrace(backend, pid) do
    flags =
      case Backend.trace(backend, :info, [pid, :flags]) do
        {:flags, flags} -> flags
        _ -> []
      end

    Backend.trace(backend, :process, [pid, false, [:all]])
    flags
  rescue
    ArgumentError -> []
  end

  defp tracing?(state), do: Backend.tracing?(state.backend)
end
