defmodule KinoTrace.Replay do
  @moduledoc false
  # A trace that traces nothing: it serves events it was given and the info of the trace
  # they came from. It is what `Kino.Trace.open/2` returns for a trace file, made so a
  # recorder's snapshot can be one too (the source `{:events, info, events}`), so every
  # front end (events/2, stream/1, the printer, Mermaid, the widget, the assertions)
  # takes it as it takes a live trace: it implements `KinoTrace.Server`.
  #
  #   * `{:subscribe, pid}` sends `pid` every event, in batches, then `{:status, :stopped}`
  #     (so a stream or a printer of it ends once it has had them all);
  #   * `{:events, n}` gives the last `n`; `{:sync, _}`, `:pause`, `:resume`, `{:exclude,
  #     pid}` and the holds are `:ok` (nothing is traced, nothing is queued);
  #   * `{:set_patterns, inputs}` refuses each input: it has nothing to trace;
  #   * `:latency` and `:slow_calls` are nil: it keeps nothing since a start (the
  #     functions that ask read its events);
  #   * `:info` is the recorded trace's info with status `:stopped` and, for a file,
  #     `:file` (`KinoTrace.File.Format.read/2`'s figures and the path);
  #   * `{:put_events, events}`, once, for a source `{:events, info, :put}`: a recorder's
  #     snapshot (`KinoTrace.Session.Recorder`) gives its events so, not as the start's
  #     argument, which the supervisor would keep with the child's spec.
  #
  # It ends when its owner does, or on `stop/1` (which frees its events; `info/1` then
  # answers what it was, through `KinoTrace.Client.Final`). Its events are kept in a
  # `KinoTrace.History` (off its heap).

  use GenServer
  @behaviour KinoTrace.Server

  alias KinoTrace.{Server, Starter}
  alias KinoTrace.File.Format
  alias KinoTrace.Client.Final
  alias KinoTrace.History

  defstruct [:id, :owner_ref, :source, :history, :info, :error, count: 0, subscribers: %{}]

  @typedoc "What it serves: a trace file (read with caps), or events and their trace's info."
  @type source ::
          {:file, Path.t() | {node(), Path.t()}, keyword()}
          | {:events, map(), [Kino.Trace.Event.t()] | :put}

  # How many events one message to a subscriber carries.
  @batch 1_000

  @doc """
  Starts a replay of `source` owned by `owner`: `{:ok, pid, id}`, or `{:error,
  %Kino.Trace.FileError{}}` for a file it cannot read.
  """
  @impl KinoTrace.Server
  @spec start(pid(), source()) :: {:ok, pid(), pos_integer()} | {:error, term()}
  def start(owner, source), do: Starter.start_session(__MODULE__, {owner, source})

  @impl true
  def init({owner, source}) do
    KinoTrace.Internal.register(self())
    state = %__MODULE__{id: Server.new_id(), owner_ref: Process.monitor(owner), source: source}
    # a file is read in the new process, not in the supervisor's init
    {:ok, state, {:continue, :load}}
  end

  @impl true
  def handle_continue(:load, state) do
    case load(state.source) do
      {:ok, info, events} ->
        history = History.new(max(length(events), 1)) |> History.push(events)

        info =
          Map.merge(info, %{
            id: state.id,
            status: :stopped,
            rate: 0.0,
            traced: false,
            queued: 0,
            bytes_queued: 0
          })

        {:noreply, %{state | history: history, count: length(events), info: info, source: nil}}

      {:error, error} ->
        {:noreply, %{state | error: error, source: nil}}
    end
  end

  defp load({:events, info, :put}), do: {:ok, Map.put(info, :awaiting_events, true), []}
  defp load({:events, info, events}), do: {:ok, info, events}

  defp load({:file, source, caps}) do
    {node, path} = with path when is_binary(path) <- source, do: {nil, path}

    case read(node, path, caps) do
      {:ok, %{info: info, events: events, file: file}} ->
        file = Map.merge(file, %{path: path, status: info.status})
        file = if node, do: Map.put(file, :fetched_from, node), else: file
        {:ok, Map.put(info, :file, file), events}

      {:error, reason, offset} ->
        {:error, %Kino.Trace.FileError{path: path, node: node, offset: offset, reason: reason}}
    end
  rescue
    # (a fault of the reader's own, which the fuzz tests look for: still a clear error)
    e ->
      {node, path} = with path when is_binary(path) <- source, do: {nil, path}

      {:error,
       %Kino.Trace.FileError{
         path: path,
         node: node,
         reason: "an unexpected fault while reading it: " <> Exception.message(e)
       }}
  end

  defp read(nil, path, caps), do: Format.read(path, caps)

  # another node's file: fetched (at most max_bytes: of it), then read as one here is
  defp read(node, path, caps) do
    max = Keyword.get(caps, :max_bytes, Format.default_caps()[:max_bytes])

    with {:ok, bytes} <- KinoTrace.File.Fetch.bytes(node, path, max),
         do: Format.read({:ram, bytes}, caps)
  end

  @impl true
  def handle_call(request, from, state), do: handle_request(request, from, state)

  @impl KinoTrace.Server
  def handle_request(:await_setup, _from, %{error: nil} = state),
    do: {:reply, {:ok, state.id}, state}

  def handle_request(:await_setup, _from, state),
    do: {:stop, :normal, {:error, state.error}, state}

  def handle_request({:subscribe, pid}, from, state),
    do: handle_request({:subscribe, pid, state.id}, from, state)

  def handle_request({:subscribe, pid, tag}, _from, state) do
    state.history
    |> History.take(state.count)
    |> Enum.chunk_every(@batch)
    |> Enum.each(&send(pid, {:kino_trace, tag, {:events, &1}}))

    send(pid, {:kino_trace, tag, {:status, :stopped}})
    subscribers = Map.put_new_lazy(state.subscribers, pid, fn -> Process.monitor(pid) end)
    {:reply, :ok, %{state | subscribers: subscribers}}
  end

  def handle_request({:unsubscribe, pid}, _from, state) do
    {ref, subscribers} = Map.pop(state.subscribers, pid)
    if ref, do: Process.demonitor(ref, [:flush])
    {:reply, :ok, %{state | subscribers: subscribers}}
  end

  def handle_request({:put_events, events}, _from, %{info: %{awaiting_events: true}} = state) do
    history = History.new(max(length(events), 1)) |> History.push(events)
    info = Map.delete(state.info, :awaiting_events)
    {:reply, :ok, %{state | history: history, count: length(events), info: info}}
  end

  def handle_request({:events, n}, _from, state),
    do: {:reply, History.take(state.history, n), state}

  def handle_request(:info, _from, state), do: {:reply, info(state), state}
  def handle_request(:tracer, _from, state), do: {:reply, nil, state}
  def handle_request(:workers, _from, state), do: {:reply, %{}, state}
  # nothing kept since a start: latency/2 and slow_calls/2 read its events
  def handle_request(kept, _from, state)
      when kept in [:latency, :latency_processes, :slow_calls, :slow_counts],
      do: {:reply, nil, state}

  def handle_request({:set_patterns, inputs}, _from, state) do
    {:reply,
     Enum.map(
       List.wrap(inputs),
       &{&1, {:error, "this trace traces nothing: it was opened from a file"}}
     ), state}
  end

  def handle_request(:internals, _from, state),
    do: {:reply, %{plan: nil, held: [], events: state.count}, state}

  def handle_request(:stop, _from, state), do: {:stop, :normal, :ok, state}

  # nothing is traced or queued: pausing, resuming, syncing and holds have nothing to do
  def handle_request(_request, _from, state), do: {:reply, :ok, state}

  @impl true
  def handle_info({:DOWN, ref, :process, _pid, _reason}, %{owner_ref: ref} = state),
    do: {:stop, :normal, state}

  def handle_info({:DOWN, _ref, :process, pid, _reason}, state),
    do: {:noreply, %{state | subscribers: Map.delete(state.subscribers, pid)}}

  def handle_info(_message, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, %{error: nil, info: info} = state) when info != nil do
    Final.put(state.id, %{info(state) | subscribers: 0})
    :ok
  end

  def terminate(_reason, _state), do: :ok

  defp info(state), do: Map.put(state.info, :subscribers, map_size(state.subscribers))
end
