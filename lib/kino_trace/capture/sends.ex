defmodule KinoTrace.Capture.Sends do
  @moduledoc false
  # The processes a capture's block sent messages to that the capture did not trace, so
  # that an assertion about a missing call can say where the work may have gone.
  #
  # `Kino.Trace.capture/3` traces the calling process, its children and its `:pids`. Work
  # done in another process, such as a GenServer the block calls, is not captured, and an
  # assertion on it fails. To name that process in the failure, the capture also traces
  # the sends of its processes in an OTP trace session of its own, read only once the
  # block is over, which keeps little more than each message's receiver:
  #
  #   * its match spec keeps sends to processes of this node (by pid or registered name),
  #     except to the capture's own pids and I/O requests (`IO.puts/1` and the like);
  #   * messages are cut to their first element (`max_depth: 1`, `max_items: 1`);
  #   * it has its own queue (100_000 sends), so it never makes the capture drop an
  #     event; sends past it are dropped, and receivers seen only after that not named.
  #
  # It costs the capture about a millisecond (setting up and destroying the OTP trace
  # session) and about a microsecond per message the block sends.
  #
  # After the block, the receivers that are alive and not traced by the capture, nor
  # the runtime's own (processes of kernel, stdlib, elixir, logger, mix, ex_unit, iex or
  # kino_trace, such as the code server the block's code loading calls), are kept in
  # `capture.untraced_receivers`, by registered name
  # (`{:global, name}` for global names) when they have one, else by pid, in the order
  # of their first message.

  alias Kino.Trace.Event
  alias KinoTrace.{Backend, Internal}

  @max_sends 100_000
  @max_listed 5
  @system_apps [:kernel, :stdlib, :elixir, :logger, :compiler, :mix, :ex_unit, :iex, :kino_trace]
  @system_names [:init, :erl_prim_loader, :application_controller, :logger, :erts_code_purger]
  # Each send keeps its receiver and the message's first element at most (~40 bytes).
  @caps %{max_depth: 1, max_items: 1, max_binary: 1, max_bytes: 128}

  @enforce_keys [:session, :backend]
  defstruct [:session, :backend]

  @typedoc "The trace of a capture's sends."
  @opaque t :: %__MODULE__{session: term(), backend: Backend.local()}

  @typedoc "A process the block sent messages to: its registered name, else its pid."
  @type receiver :: atom() | {:global, term()} | pid()

  @doc """
  Starts tracing the sends of `targets` (the capture's resolved `:pids`, the block's
  process first), and of their children when `children?`. `owner` is the capture's
  trace session process, which outlives the block and ignores the native session's
  wake-ups: nothing drains this trace before `untraced/2`, so no message ever reaches
  the block's processes. Should the block's process exit before `stop/1`, the session
  goes with it.

  ## Examples

      iex> {:ok, agent} = Agent.start_link(fn -> %{} end, name: KinoTraceDoc.Store)
      iex> capture = Kino.Trace.capture(["Map.get/2"], fn -> Agent.get(KinoTraceDoc.Store, & &1) end)
      iex> capture.untraced_receivers
      [KinoTraceDoc.Store]
      iex> KinoTrace.Capture.Sends.hint(capture)
      "The block sent messages to processes the capture did not trace: KinoTraceDoc.Store. " <>
        "Calls they made are not in the capture; to capture them, pass " <>
        "pids: [KinoTraceDoc.Store] to Kino.Trace.capture/3."
      iex> Agent.stop(agent)
      :ok
  """
  @spec start([pid() | :all | :new | :existing, ...], boolean(), pid()) :: t()
  def start([block | _] = targets, children?, owner) when is_pid(block) do
    limits = Map.put(@caps, :queue, events: @max_sends, bytes: 64 * @max_sends)
    # the tracer this node runs (native, or the fallback: not attached, its mailbox
    # guard drops and counts until its mailbox is empty, which only shortens the hint)
    backend = Backend.new_local(owner, limits, pairing: false)
    session = backend.session
    flags = Backend.flags(backend, if(children?, do: [:send, :set_on_spawn], else: [:send]))

    for target <- targets, is_pid(target) do
      try do
        :trace.process(session, target, true, flags)
      rescue
        # exited since the capture's own session traced it
        ArgumentError -> :ok
      end
    end

    :trace.send(session, spec(targets), [])
    # Every kino_trace process stays untraced. Held for the block's process, not the
    # caller (a pool worker that lives on): should the block's process be killed before
    # stop/1, the entry goes, and the session with the last reference to its handle.
    Internal.add_session(session, block)
    %__MODULE__{session: session, backend: backend}
  end

  # [To, Message]: a pid of this node or a registered name, not a target, not I/O.
  defp spec(targets) do
    local =
      {:orelse, {:is_atom, :"$1"}, {:andalso, {:is_pid, :"$1"}, {:==, {:node, :"$1"}, {:node}}}}

    io =
      {:andalso, {:is_tuple, :"$2"},
       {:andalso, {:==, {:tuple_size, :"$2"}, 4}, {:==, {:element, 1, :"$2"}, :io_request}}}

    not_targets = for pid when is_pid(pid) <- targets, do: {:"=/=", :"$1", pid}
    [{[:"$1", :"$2"], [local, {:not, io} | not_targets], []}]
  end

  @doc """
  Ends the trace of sends: destroys its session (`KinoTrace.Backend.destroy/2`, through
  the BIF work-around like every trace session) and frees its queue.
  """
  @spec stop(t()) :: :ok
  def stop(%__MODULE__{session: session, backend: backend}) do
    Internal.remove_session(session)
    backend |> Backend.destroy([]) |> Backend.close()
  end

  @doc """
  The receivers of the sends traced so far that are alive and not traced by the
  capture's trace `capture` (nor kino_trace's own processes), in the order of their
  first message. Call it once every event of the block was delivered
  (`:erlang.trace_delivered/1`), while `capture` still runs.
  """
  @spec untraced(t(), KinoTrace.Client.trace()) :: [receiver()]
  def untraced(%__MODULE__{backend: backend}, capture) do
    internal = MapSet.new(Internal.pids())
    capture_tracer = KinoTrace.Client.tracer(capture)

    backend
    |> receivers({MapSet.new(), []})
    |> Enum.flat_map(fn
      pid when is_pid(pid) -> [pid]
      name -> List.wrap(Process.whereis(name))
    end)
    |> Enum.uniq()
    |> Enum.reject(
      &(MapSet.member?(internal, &1) or not Process.alive?(&1) or system?(&1) or
          traced_by?(&1, capture_tracer))
    )
    |> Enum.map(&name/1)
  end

  # The distinct receivers in the order of their first message (a send's `peer`).
  defp receivers(backend, {seen, order}) do
    {events, more?, backend} = Backend.drain(backend, 10_000)

    acc =
      Enum.reduce(events, {seen, order}, fn
        %Event{kind: :send, peer: to}, {seen, order} when is_pid(to) or is_atom(to) ->
          if MapSet.member?(seen, to),
            do: {seen, order},
            else: {MapSet.put(seen, to), [to | order]}

        _event, acc ->
          acc
      end)

    if more?, do: receivers(backend, acc), else: acc |> elem(1) |> Enum.reverse()
  end

  # The runtime's own processes: code loading, logging, I/O and the test runner talk to
  # them on the block's behalf.
  defp system?(pid) do
    case :application.get_application(pid) do
      {:ok, app} ->
        app in @system_apps

      :undefined ->
        match?(
          {:registered_name, name} when name in @system_names,
          Process.info(pid, :registered_name)
        )
    end
  end

  # Whether a trace session whose tracer is `tracer` (the capture's) traces `pid`.
  defp traced_by?(_pid, nil), do: false

  defp traced_by?(pid, tracer) do
    case :trace.session_info(pid) do
      sessions when is_list(sessions) -> Enum.any?(sessions, &(tracer_of(&1, pid) == tracer))
      _ -> false
    end
  end

  defp tracer_of(session, pid) do
    case :trace.info(session, pid, :tracer) do
      {:tracer, tracer} -> tracer
      _ -> nil
    end
  rescue
    ArgumentError -> nil
  end

  defp name(pid) do
    case Process.info(pid, :registered_name) do
      {:registered_name, name} when is_atom(name) ->
        name

      _ ->
        case Enum.find(:global.registered_names(), &(:global.whereis_name(&1) == pid)) do
          nil -> pid
          name -> {:global, name}
        end
    end
  end

  @doc """
  The hint for a failure about a missing call: the processes the block sent messages to
  that the capture did not trace, and the `:pids` option that traces them. `nil` when
  there are none (or `capture` is not a `Kino.Trace.Capture`).
  """
  @spec hint(Kino.Trace.Capture.t() | map() | list()) :: String.t() | nil
  def hint(%{untraced_receivers: [_ | _] = receivers}) do
    {listed, rest} = Enum.split(receivers, @max_listed)
    more = if rest == [], do: "", else: " and #{length(rest)} more"
    names = Enum.map_join(listed, ", ", &inspect/1)

    "The block sent messages to processes the capture did not trace: #{names}#{more}. " <>
      "Calls they made are not in the capture; to capture them, pass " <>
      "pids: [#{names}] to Kino.Trace.capture/3."
  end

  def hint(_capture), do: nil
end
