defmodule KinoTrace.Widget.StatsController do
  @moduledoc false
  # Everything the Livebook stats widget does on the Elixir side, without Kino.
  #
  # `Kino.Trace.StatsWidget` (the `Kino.JS.Live` module) is a thin adapter over this
  # module, as `Kino.Trace.Widget` is over `KinoTrace.Widget.Controller`, and carries out
  # the same effects:
  #
  #   * `{:broadcast, event, payload}` - send to every connected browser
  #   * `{:reply, event, payload}` - send to the browser that made the request
  #   * `{:send_after, message, ms}` - deliver `message` to this process later (then pass
  #     it to `handle_info/2`)
  #
  # The controller reads the session's counters once per `:interval` (a second by
  # default) with `KinoTrace.Client.try_stats/2` (a session that has ended is a state
  # here, not an error), renders them with
  # `KinoTrace.Widget.StatsPayload.snapshot/2`, and broadcasts `"snapshot"` when the figures
  # changed (`%{status: status, snapshot: payload}`), else a small `"tick"`
  # (`%{status: status, elapsed_us: us, taken_at: us}`) so the header's clock moves. When the
  # session has ended (stopped, or its owner exited) it broadcasts `"status"` once and
  # stops reading; the last figures stay on screen.
  #
  # Events from the browser: `"reset"` (counters back to zero), `"stop"`, `"refresh"`
  # (read now).
  #
  # ## Examples
  #
  #     stats = Kino.Trace.stats(["Enum.sum/1"])
  #     {controller, [{:send_after, :refresh, 1000}]} = KinoTrace.Widget.StatsController.init(stats)
  #     {%{snapshot: %{rows: []}}, controller} = KinoTrace.Widget.StatsController.connect(controller)

  alias Kino.Trace.Stats
  alias KinoTrace.Client
  alias KinoTrace.Widget.{Lifeline, StatsPayload}

  defstruct [:stats, :interval, :payload_opts, :payload, status: :running, ended?: false]

  @type t :: %__MODULE__{}
  @type effect ::
          {:broadcast, String.t(), map()}
          | {:reply, String.t(), map()}
          | {:send_after, term(), non_neg_integer()}

  @doc """
  Starts following a stats session from the calling process.

  Options: those of `Kino.Trace.StatsWidget.new/2`, which lists them.
  """
  @spec init(Stats.t(), keyword()) :: {t(), [effect()]}
  def init(%Stats{} = stats, opts \\ []) do
    # The widget's process is kino_trace's own: no trace records it.
    KinoTrace.Internal.register(self())

    opts =
      KinoTrace.Options.validate!(opts,
        interval: {1_000, KinoTrace.Options.pos_integer()},
        rows: {500, KinoTrace.Options.pos_integer()},
        processes: {20, KinoTrace.Options.pos_integer()},
        lifeline: {true, KinoTrace.Options.boolean()}
      )

    controller = %__MODULE__{
      stats: stats,
      interval: opts[:interval],
      payload_opts: Keyword.take(opts, [:rows, :processes])
    }

    if opts[:lifeline] and Process.alive?(stats.server), do: Lifeline.start(stats, self())
    {_changed?, controller} = read(controller)

    {controller,
     if(controller.ended?, do: [], else: [{:send_after, :refresh, controller.interval}])}
  end

  @doc "The data a connecting browser starts from: status, refresh interval, the figures."
  @spec connect(t()) :: {map(), t()}
  def connect(%__MODULE__{} = controller) do
    {%{
       status: to_string(controller.status),
       interval: controller.interval,
       snapshot: controller.payload
     }, controller}
  end

  @doc """
  Handles a message to the widget's process (the controller's own `:refresh` timer).
  Returns `:unknown` for anything else.
  """
  @spec handle_info(t(), term()) :: {:ok, [effect()], t()} | :unknown
  def handle_info(%__MODULE__{ended?: true} = controller, :refresh), do: {:ok, [], controller}

  def handle_info(%__MODULE__{} = controller, :refresh) do
    {effects, controller} = refresh(controller)
    timer = if controller.ended?, do: [], else: [{:send_after, :refresh, controller.interval}]
    {:ok, effects ++ timer, controller}
  end

  def handle_info(%__MODULE__{}, _message), do: :unknown

  @doc "Handles an event pushed by a browser."
  @spec handle_event(t(), String.t(), term()) :: {[effect()], t()}
  def handle_event(%__MODULE__{ended?: false} = controller, "reset", _payload) do
    # (a session that has ended meanwhile is found so by the refresh)
    _ = Client.try_stats(controller.stats.server, :reset)
    refresh(controller, true)
  end

  def handle_event(%__MODULE__{ended?: false} = controller, "stop", _payload) do
    # the figures as they were at the stop
    {effects, controller} = refresh(controller)
    :ok = Stats.stop(controller.stats)
    controller = %{controller | status: :stopped, ended?: true}
    {effects ++ [status_effect(controller)], controller}
  end

  def handle_event(%__MODULE__{ended?: false} = controller, "refresh", _payload),
    do: refresh(controller)

  def handle_event(%__MODULE__{} = controller, _event, _payload), do: {[], controller}

  ## Internals

  defp refresh(controller, force? \\ false) do
    {changed?, controller} = read(controller)

    cond do
      controller.ended? ->
        {[status_effect(controller)], controller}

      changed? or force? ->
        {[{:broadcast, "snapshot", %{status: "running", snapshot: controller.payload}}],
         controller}

      true ->
        tick = %{
          status: "running",
          elapsed_us: controller.payload.elapsed_us,
          taken_at: controller.payload.taken_at
        }

        {[{:broadcast, "tick", tick}], controller}
    end
  end

  defp status_effect(controller) do
    {:broadcast, "status", %{status: to_string(controller.status), snapshot: controller.payload}}
  end

  # Reads the counters: {figures changed?, controller}. A session that has ended keeps
  # its last figures (or an empty table when none was ever read).
  defp read(controller) do
    case Client.try_stats(controller.stats.server, :snapshot) do
      {:ok, snapshot} ->
        payload = StatsPayload.snapshot(snapshot, controller.payload_opts)
        {figures(payload) != figures(controller.payload), %{controller | payload: payload}}

      {:error, :ended} ->
        {false, ended(controller)}
    end
  catch
    # it did not answer in time
    :exit, _ -> {false, ended(controller)}
  end

  defp ended(controller) do
    payload =
      controller.payload ||
        StatsPayload.snapshot(%Stats.Snapshot{id: controller.stats.id}, controller.payload_opts)

    %{controller | status: :stopped, ended?: true, payload: payload}
  end

  defp figures(nil), do: nil
  defp figures(payload), do: Map.drop(payload, [:taken_at, :elapsed_us])
end
