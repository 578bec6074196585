defmodule KinoTrace.Widget.Views do
  @moduledoc false
  # The trace widget's controller as `Kino.Trace.Widget` runs it: its trace's own
  # (`KinoTrace.Widget.Controller`) and, for a recorder (`Kino.Trace.record/2`), a view of
  # each snapshot a browser opened from the recorder's panel. A view is a Controller of
  # the snapshot, the one a trace from `Kino.Trace.open/1` has (a snapshot is a trace
  # value): a snapshot shows in the usual tabs (Log, Sequence, Stats, Calls, Flame) by
  # the path every trace takes, and its requests (a row's terms, the flame, Mermaid, slow
  # calls) are answered from its events. Nothing here needs Kino.
  #
  # The wire (`assets/wire.schema.json`), besides the trace's controller's:
  #
  #   * `"open_snapshot"` (`%{"id" => id}`, an id of the panel's list, checked by
  #     `KinoTrace.Widget.RecorderPayload.find/2`): the reply `"snapshot"`, `%{id: id,
  #     view: connect}` (the view's connect payload, `Controller.connect/1`) or `%{id: id,
  #     error: message}`. A view already open is reused.
  #   * `"view"` (`%{"id" => id, "event" => event, "payload" => payload}`): a browser's
  #     event for a view, handed to its controller; one for a view no longer open is
  #     answered `"snapshot"` with an error.
  #   * What a view's controller sends goes as `"view"`, `%{id: id, event: event,
  #     payload: payload}`: its replies to the browser that asked, its broadcasts to every
  #     browser (one not showing that snapshot ignores them). Its timers come back as
  #     `{:kino_trace_view, id, message}`.
  #
  # Bounded: at most @max_views views, the least recently opened closed first; a view
  # whose snapshot left the panel's list (stopped, pushed out by newer ones, the recorder
  # ended) is closed when the panel says so. A closed view's events go with it, and the
  # widget no longer follows its snapshot.

  alias KinoTrace.Widget.{Controller, RecorderPayload}

  # (each holds up to `keep:` events, the widget's option)
  @max_views 4

  defstruct [:trace, :live, :opts, views: %{}, order: []]

  @type t :: %__MODULE__{}

  @doc """
  Starts following `trace`, as `KinoTrace.Widget.Controller.init/2` does (the same
  options; a view has them too, without the lifeline: its snapshot lives as long as the
  recorder keeps it).
  """
  @spec init(Kino.Trace.t(), keyword()) :: {t(), [Controller.effect()]}
  def init(trace, opts \\ []) do
    {live, effects} = Controller.init(trace, opts)

    {%__MODULE__{trace: trace, live: live, opts: Keyword.put(opts, :lifeline, false)}, effects}
  end

  @doc "The data a connecting browser starts from: the trace's (`Controller.connect/1`)."
  @spec connect(t()) :: {map(), t()}
  def connect(%__MODULE__{} = views) do
    {payload, live} = Controller.connect(views.live)
    {payload, %{views | live: live}}
  end

  @doc """
  Handles a message to the widget's process: a view's (its snapshot's events and status,
  its timers), or the trace's. `:unknown` for anything else.
  """
  @spec handle_info(t(), term()) :: {:ok, [Controller.effect()], t()} | :unknown
  def handle_info(%__MODULE__{} = views, {:kino_trace_view, id, message}),
    do: to_view(views, id, &Controller.handle_info(&1, message))

  def handle_info(%__MODULE__{views: open} = views, {:kino_trace, id, _} = message)
      when is_map_key(open, id),
      do: to_view(views, id, &Controller.handle_info(&1, message))

  def handle_info(%__MODULE__{} = views, message) do
    case Controller.handle_info(views.live, message) do
      {:ok, effects, live} -> {:ok, effects, prune(%{views | live: live}, effects)}
      :unknown -> :unknown
    end
  end

  @doc "Handles an event pushed by a browser."
  @spec handle_event(t(), String.t(), term()) :: {[Controller.effect()], t()}
  def handle_event(%__MODULE__{} = views, "open_snapshot", request) do
    case RecorderPayload.find(views.trace, request) do
      {:ok, snapshot} ->
        open(views, snapshot)

      {:error, message} ->
        {[snapshot_error(RecorderPayload.id_of(request), message)], views}
    end
  end

  def handle_event(%__MODULE__{} = views, "view", %{"id" => id, "event" => event} = request)
      when is_integer(id) and is_binary(event) do
    case Map.fetch(views.views, id) do
      {:ok, view} ->
        {effects, view} = Controller.handle_event(view, event, Map.get(request, "payload"))
        {wrap(effects, id), %{views | views: %{views.views | id => view}}}

      :error ->
        {[snapshot_error(id, closed())], views}
    end
  end

  def handle_event(%__MODULE__{} = views, event, payload) do
    {effects, live} = Controller.handle_event(views.live, event, payload)
    {effects, %{views | live: live}}
  end

  @doc "The snapshot ids of the views open, the most recently opened first."
  @spec open_ids(t()) :: [integer()]
  def open_ids(%__MODULE__{order: order}), do: order

  @doc "The most views open at once."
  @spec max_views() :: pos_integer()
  def max_views, do: @max_views

  ## Internals

  defp open(views, %{id: id} = snapshot) do
    {view, started} =
      case Map.fetch(views.views, id) do
        {:ok, view} -> {view, []}
        :error -> Controller.init(snapshot, views.opts)
      end

    {payload, view} = Controller.connect(view)

    views = %{
      views
      | views: Map.put(views.views, id, view),
        order: [id | List.delete(views.order, id)]
    }

    {[{:reply, "snapshot", %{id: id, view: payload}} | wrap(started, id)],
     close_over(views, @max_views)}
  end

  # A message for view `id`, or :unknown when it is not open (a closed view's timer).
  defp to_view(views, id, handle) do
    with {:ok, view} <- Map.fetch(views.views, id),
         {:ok, effects, view} <- handle.(view) do
      {:ok, wrap(effects, id), %{views | views: %{views.views | id => view}}}
    else
      _ -> :unknown
    end
  end

  defp wrap(effects, id) do
    Enum.map(effects, fn
      {:send_after, message, ms} -> {:send_after, {:kino_trace_view, id, message}, ms}
      {kind, event, payload} -> {kind, "view", %{id: id, event: event, payload: payload}}
    end)
  end

  # The panel the trace's controller sent: its views of snapshots it no longer lists close.
  defp prune(views, effects) do
    case for({:broadcast, "recorder", panel} <- effects, do: panel) do
      [] ->
        views

      panels ->
        listed = for %{id: id} <- List.last(panels).snapshots, do: id
        Enum.reduce(views.order -- listed, views, &close(&2, &1))
    end
  end

  defp close_over(%{order: order} = views, max) when length(order) > max,
    do: close_over(close(views, List.last(order)), max)

  defp close_over(views, _max), do: views

  defp close(views, id) do
    {view, open} = Map.pop(views.views, id)
    # (best effort: a snapshot that has ended has no subscriber left)
    if view, do: unsubscribe(view.trace)
    %{views | views: open, order: List.delete(views.order, id)}
  end

  defp unsubscribe(trace) do
    KinoTrace.Client.request(trace, {:unsubscribe, self()})
  catch
    :exit, _ -> :ok
  end

  defp snapshot_error(id, message), do: {:reply, "snapshot", %{id: id, error: message}}

  defp closed,
    do:
      "this snapshot's view was closed (the widget keeps #{@max_views} open): open it again from the list"
end
