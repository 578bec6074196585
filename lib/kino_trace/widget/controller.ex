defmodule KinoTrace.Widget.Controller do
  # Bound of one "get_mermaid" event (the widget keeps at most :keep events anyway).
  @max_mermaid_ids 20_000

  @moduledoc false
  # Everything the Livebook widget does on the Elixir side, without Kino.
  #
  # `Kino.Trace.Widget` (the `Kino.JS.Live` module) is a thin adapter: it hands each
  # callback to this module and carries out the effects it returns. This keeps the
  # widget's behaviour testable where Kino is not installed.
  #
  # A controller subscribes to a trace, coalesces its event batches (see
  # `KinoTrace.Widget.Buffer`), keeps recent events (see `KinoTrace.Widget.Store`) for
  # browsers that connect later and for expanding a row, and turns browser requests into
  # calls on the trace (`Kino.Trace.set_patterns/2`, `pause/1`, `resume/1`, `stop/1`).
  #
  # Effects are tuples:
  #
  #   * `{:broadcast, event, payload}` - send to every connected browser
  #   * `{:reply, event, payload}` - send to the browser that made the request
  #   * `{:send_after, message, ms}` - deliver `message` to this process later (then pass
  #     it to `handle_info/2`)
  #
  # A message sent to a process alias (a `GenServer.call/3` reply, since OTP 24) is shown
  # sent to the process the alias belongs to, by the rule `Kino.Trace.Mermaid` follows.
  #
  # Events sent to the browser (the wire's schema, `assets/wire.schema.json`, has each
  # payload's fields): `"events"` (`%{events: rows, counters: counters}`),
  # `"status"` (`%{status: status, counters: counters}`), `"counters"`, `"patterns"` (see
  # `KinoTrace.Widget.Payload.pattern_results/2`), `"clear"`, and the replies `"term"`
  # (see `KinoTrace.Widget.Payload.full/2`), `"completions"` (see
  # `KinoTrace.Widget.Payload.completions/1`) and `"mermaid"` (see
  # `KinoTrace.Widget.Payload.mermaid/1`, or `%{error: message}`), `"flame"`
  # (`KinoTrace.Widget.FlamePayload`), `"slow_calls"` (`KinoTrace.Widget.SlowPayload.reply/4`)
  # and, at most once a tick when calls came, `"latency"`
  # (`KinoTrace.Widget.LatencyPayload`, with the trace's slow-call counts); a recorder's
  # panel (`KinoTrace.Widget.RecorderPayload`), `"recorder"` when it changed or a browser came.
  #
  # Events from the browser: `"set_patterns"` (`%{"patterns" => [line]}`), `"pause"`,
  # `"resume"`, `"stop"`, `"clear"`, `"get_term"` (`%{"id" => id}`), `"complete"`
  # (`%{"text" => line_up_to_the_cursor, "seq" => n}`), `"get_mermaid"`
  # (`%{"ids" => [id]}`: the events of the sequence rows in view, at most
  # `@max_mermaid_ids` ids), `"get_flame"` (`%{"process" => pid_text | nil}`),
  # `"get_slow_calls"` (`%{"mfa" => "Mod.fun/arity"}`: a Stats tab row's slow calls),
  # `"get_snapshot_file"` (`KinoTrace.Widget.RecorderPayload.reply/4`; `"open_snapshot"`:
  # `KinoTrace.Widget.Views`). A `"set_patterns"` event is bounded (`KinoTrace.Pattern.Edit.bounds/0`:
  # so many lines, bytes per line and bytes in all); a larger one is refused as a whole and
  # answered with a `"patterns"` reply whose `error` says why (`Payload.pattern_error/2`).
  #
  # ## Examples
  #
  #     trace = Kino.Trace.calls(["Enum.map/2"])
  #     {controller, effects} = KinoTrace.Widget.Controller.init(trace)
  #     Enum.map(1..3, & &1)
  #     receive do
  #       {:kino_trace, _id, {:events, _}} = message ->
  #         {:ok, effects, controller} = KinoTrace.Widget.Controller.handle_info(controller, message)
  #         # effects == [{:send_after, :flush, 0}]
  #     end

  alias KinoTrace.Client
  alias KinoTrace.Render.Pairs
  alias KinoTrace.Tracer.Aliases

  alias KinoTrace.Widget.{
    Buffer,
    FlamePayload,
    LatencyPayload,
    Lifeline,
    Payload,
    SlowPayload,
    Store
  }

  defstruct [
    :trace,
    :buffer,
    :store,
    :limits,
    :history,
    :browser,
    status: :running,
    patterns: [],
    what: nil,
    flush_armed?: false,
    seen_up_to: 0,
    last_counters: nil,
    last_info: nil,
    ended?: false,
    aliases: Aliases.new(),
    pairs: Pairs.new(),
    latency: LatencyPayload.new(),
    recorder: nil
  ]

  @type t :: %__MODULE__{}
  @type effect ::
          {:broadcast, String.t(), map()}
          | {:reply, String.t(), map()}
          | {:send_after, term(), non_neg_integer()}

  @tick_ms 1_000

  @doc """
  Starts following `trace` from the calling process (subscribes to it, and ties the
  trace's life to the caller with `KinoTrace.Widget.Lifeline`).

  Options: those of `Kino.Trace.Widget.new/2`, which lists them.
  """
  @spec init(Kino.Trace.t(), keyword()) :: {t(), [effect()]}
  def init(trace, opts \\ []) do
    # The widget's process is kino_trace's own: no trace records it.
    KinoTrace.Internal.register(self())

    opts = KinoTrace.Options.validate!(opts, options())

    # the first completion should not wait for the code path to be listed
    KinoTrace.Complete.Modules.warm_async()

    controller = %__MODULE__{
      trace: trace,
      buffer: Buffer.new(Keyword.take(opts, [:interval, :max_batch, :max_pending])),
      store: Store.new(capacity: opts[:keep]),
      limits: Keyword.take(opts, [:limit, :printable_limit, :max_chars]),
      history: min(opts[:history], opts[:keep]),
      browser: Keyword.take(opts, [:max_entries, :sequence_rows])
    }

    # (a trace that has ended is shown stopped)
    controller =
      with :ok <- Client.try_subscribe(trace, self()),
           _ = if(opts[:lifeline], do: Lifeline.start(trace, self())),
           {:ok, info} <- Client.try_info(trace),
           {:ok, events} <- Client.try_events(trace, opts[:history]) do
        {seed, aliases} = Aliases.resolve(controller.aliases, events)
        {rows, pairs} = Payload.paired(seed, controller.limits, controller.pairs)
        store = Store.add(controller.store, Enum.zip(rows, seed))

        seen = seed |> Enum.map(& &1.id) |> Enum.max(fn -> 0 end)

        %{
          controller
          | status: info.status,
            patterns: info.patterns,
            what: info[:what],
            store: store,
            seen_up_to: seen,
            aliases: aliases,
            pairs: pairs,
            latency: LatencyPayload.add(controller.latency, seed)
        }
      else
        {:error, :ended} -> %{controller | status: :stopped, ended?: true}
      end

    {controller, [{:send_after, :tick, @tick_ms}]}
  end

  @doc """
  The data a connecting browser starts from: patterns, what the trace traces (`trace`,
  see `Kino.Trace.Plan.summary/1`: the widget shows the call-pattern editor only for a
  trace of calls, and the targets and message pattern of the others), status, counters,
  recent rows, and how many log rows (`max_entries`) and sequence rows
  (`sequence_rows`) it holds. Every payload follows the wire's schema,
  `assets/wire.schema.json`.
  """
  @spec connect(t()) :: {map(), t()}
  def connect(%__MODULE__{} = controller) do
    {counters, controller} = counters(controller)

    payload = %{
      patterns: controller.patterns,
      # a trace whose session was gone before the widget started: its calls' editor
      trace:
        controller.what || %{calls: true, messages: nil, message_pattern: nil, processes: nil},
      status: to_string(controller.status),
      counters: counters,
      events: Store.rows(controller.store, controller.history),
      max_entries: controller.browser[:max_entries],
      sequence_rows: controller.browser[:sequence_rows]
    }

    # (its latency columns and a recorder's panel come with the next tick)
    {payload, %{controller | latency: LatencyPayload.changed(controller.latency), recorder: nil}}
  end

  @doc """
  Handles a message to the widget's process: trace batches and status changes, and the
  controller's own timers. Returns `:unknown` for anything else.
  """
  @spec handle_info(t(), term()) :: {:ok, [effect()], t()} | :unknown
  def handle_info(
        %__MODULE__{trace: %{id: id}} = controller,
        {:kino_trace, id, {:events, events}}
      ) do
    fresh = Enum.filter(events, &((&1.id || 0) > controller.seen_up_to))
    controller = %{controller | buffer: Buffer.add(controller.buffer, fresh)}
    {effects, controller} = arm_flush(controller)
    {:ok, effects, controller}
  end

  def handle_info(
        %__MODULE__{trace: %{id: id}} = controller,
        {:kino_trace, id, {:status, status}}
      ) do
    {flushes, controller} = flush_all(controller)
    controller = %{controller | status: status}
    {counters, controller} = counters(controller)

    {:ok, flushes ++ [{:broadcast, "status", %{status: to_string(status), counters: counters}}],
     controller}
  end

  def handle_info(%__MODULE__{} = controller, :flush) do
    controller = %{controller | flush_armed?: false}
    {effects, controller} = flush(controller)
    {more, controller} = arm_flush(controller)
    {:ok, effects ++ more, controller}
  end

  def handle_info(%__MODULE__{} = controller, :tick) do
    previous = controller.last_counters
    {counters, controller} = counters(controller)
    effects = if counters != previous, do: [{:broadcast, "counters", counters}], else: []

    # (the count of slow calls the trace keeps, for the Stats tab's links)
    slow = fn ->
      [slow: if(not controller.ended?, do: SlowPayload.kept_counts(controller.trace))]
    end

    {latency, l} = LatencyPayload.tick(controller.latency, slow)
    {recorder, r} = KinoTrace.Widget.RecorderPayload.tick(controller)

    controller = %{controller | latency: l, recorder: r}
    ticks = if controller.ended?, do: [], else: [{:send_after, :tick, @tick_ms}]
    {:ok, effects ++ latency ++ recorder ++ ticks, controller}
  end

  def handle_info(%__MODULE__{}, _message), do: :unknown

  @doc "Handles an event pushed by a browser."
  @spec handle_event(t(), String.t(), term()) :: {[effect()], t()}
  def handle_event(%__MODULE__{} = controller, "set_patterns", %{"patterns" => lines})
      when is_list(lines) do
    lines = Enum.filter(lines, &is_binary/1)

    case check_pattern_edit(lines) do
      :ok ->
        set_patterns(controller, lines)

      {:error, message} ->
        {[{:reply, "patterns", Payload.pattern_error(message, controller.patterns)}], controller}
    end
  end

  def handle_event(%__MODULE__{} = controller, action, _payload)
      when action in ["pause", "resume", "stop"] do
    result =
      case action do
        "pause" -> Client.try_pause(controller.trace)
        "resume" -> Client.try_resume(controller.trace)
        "stop" -> Client.stop(controller.trace)
      end

    case result do
      :ok -> {[], controller}
      # The trace has already ended: tell the browser.
      {:error, :ended} -> handle_status_gone(controller)
    end
  end

  def handle_event(%__MODULE__{} = controller, "clear", _payload) do
    controller = %{
      controller
      | buffer: Buffer.clear(controller.buffer),
        store: Store.clear(controller.store),
        latency: LatencyPayload.new()
    }

    {[{:broadcast, "clear", %{}}], controller}
  end

  def handle_event(%__MODULE__{} = controller, "get_term", %{"id" => id}) do
    payload =
      case Store.fetch(controller.store, id) do
        {:ok, event} ->
          Payload.full(event)

        :error ->
          %{
            id: id,
            error:
              "this event is no longer kept (the widget keeps the last #{controller.store.capacity})"
          }
      end

    {[{:reply, "term", payload}], controller}
  end

  def handle_event(%__MODULE__{} = controller, "complete", request) do
    {[{:reply, "completions", Payload.completions(request)}], controller}
  end

  def handle_event(%__MODULE__{} = controller, "get_mermaid", %{"ids" => ids})
      when is_list(ids) do
    {[{:reply, "mermaid", mermaid_reply(controller, ids)}], controller}
  end

  def handle_event(%__MODULE__{} = controller, "get_flame", request) do
    {[{:reply, "flame", FlamePayload.reply(Store.events(controller.store, :all), request)}],
     controller}
  end

  def handle_event(%__MODULE__{} = controller, "get_slow_calls", request) do
    events = fn -> Store.events(controller.store, :all) end
    kept = if not controller.ended?, do: SlowPayload.kept(controller.trace)
    reply = SlowPayload.reply(kept, events, request, controller.limits)
    {[{:reply, "slow_calls", reply}], controller}
  end

  def handle_event(%__MODULE__{} = c, event, request),
    do: {KinoTrace.Widget.RecorderPayload.reply(event, request, c.trace, c.limits), c}

  ## Internals

  # The options of init/2, with their defaults and checks (KinoTrace.Options).
  defp options do
    count = KinoTrace.Options.pos_integer()

    inspect_limit =
      {"a positive integer or :infinity",
       &(&1 == :infinity or KinoTrace.Options.pos_integer?(&1))}

    # the buffer's options are its own; keep: is the store's capacity
    Buffer.options() ++
      [
        keep: Keyword.fetch!(Store.options(), :capacity),
        history: {5_000, count},
        limit: {20, inspect_limit},
        printable_limit: {120, inspect_limit},
        max_chars: {400, count},
        max_entries: {200_000, count},
        sequence_rows: {4_000, count},
        lifeline: {true, KinoTrace.Options.boolean()}
      ]
  end

  defp set_patterns(controller, lines) do
    with {:ok, results} <- Client.try_set_patterns(controller.trace, lines),
         {:ok, %{patterns: patterns}} <- Client.try_info(controller.trace) do
      {[{:broadcast, "patterns", Payload.pattern_results(results, patterns)}],
       %{controller | patterns: patterns}}
    else
      {:error, :ended} ->
        results = Enum.map(lines, &{&1, {:error, Client.ended_message()}})

        {[{:broadcast, "patterns", Payload.pattern_results(results, controller.patterns)}],
         controller}
    end
  end

  defp mermaid_reply(_controller, ids) when length(ids) > @max_mermaid_ids do
    %{error: "too many events for one diagram (#{length(ids)}, at most #{@max_mermaid_ids})"}
  end

  defp mermaid_reply(controller, ids) do
    case Store.events(controller.store, ids) do
      [] ->
        %{
          error:
            "these events are no longer kept (the widget keeps the last #{controller.store.capacity})"
        }

      events ->
        Payload.mermaid(events)
    end
  end

  @doc """
  Bounds a pattern edit from a browser before anything parses it (what a browser sends
  is not trusted to be small): `:ok`, or `{:error, message}` saying which bound it
  passes. The smart cell's form (`KinoTrace.SmartCell.Controller`) has the same bounds.

      iex> KinoTrace.Widget.Controller.check_pattern_edit(["Enum.map/2"])
      :ok
  """
  @spec check_pattern_edit([String.t()]) :: :ok | {:error, String.t()}
  defdelegate check_pattern_edit(lines), to: KinoTrace.Pattern.Edit, as: :check

  defp handle_status_gone(controller) do
    {:ok, effects, controller} =
      handle_info(controller, {:kino_trace, controller.trace.id, {:status, :stopped}})

    {effects, controller}
  end

  defp arm_flush(%{flush_armed?: true} = controller), do: {[], controller}

  defp arm_flush(controller) do
    case Buffer.due_in(controller.buffer, now()) do
      nil -> {[], controller}
      ms -> {[{:send_after, :flush, ms}], %{controller | flush_armed?: true}}
    end
  end

  defp flush(controller) do
    {events, buffer} = Buffer.take(controller.buffer, now())
    controller = %{controller | buffer: buffer}

    if events == [] do
      {[], controller}
    else
      # a reply to a process alias goes to the alias's owner (the same rule as Mermaid's)
      {events, aliases} = Aliases.resolve(controller.aliases, events)
      # a send and its receive, a spawn and its spawned...: one rule with Mermaid's
      {rows, pairs} = Payload.paired(events, controller.limits, controller.pairs)
      # the latency columns count the events shown (within the push bounds), as the tab does
      latency = LatencyPayload.add(controller.latency, events)
      controller = %{controller | aliases: aliases, pairs: pairs, latency: latency}
      store = Store.add(controller.store, Enum.zip(rows, events))
      {counters, controller} = counters(%{controller | store: store})
      {[{:broadcast, "events", %{events: rows, counters: counters}}], controller}
    end
  end

  defp flush_all(controller, acc \\ []) do
    case flush(controller) do
      {[], controller} -> {Enum.reverse(acc), controller}
      {[effect], controller} -> flush_all(controller, [effect | acc])
    end
  end

  # The session is gone: the last known counters, with a final status.
  defp counters(%{ended?: true} = controller) do
    status = if controller.status in [:running, :paused], do: :stopped, else: controller.status

    counters =
      Payload.counters(
        Map.put(controller.last_info || %{}, :status, status),
        controller.buffer.dropped
      )

    {counters, %{controller | status: status, last_counters: counters}}
  end

  defp counters(controller) do
    case Client.try_info(controller.trace) do
      {:ok, info} ->
        status =
          if controller.status in [:stopped, :limit_reached, :timeout],
            do: controller.status,
            else: info.status

        counters = Payload.counters(%{info | status: status}, controller.buffer.dropped)
        # the final info of a trace whose session is gone: it has ended
        {counters,
         %{
           controller
           | last_counters: counters,
             last_info: info,
             ended?: session_gone?(controller.trace)
         }}

      {:error, :ended} ->
        counters(%{controller | ended?: true})
    end
  catch
    # its server did not answer in time
    :exit, _ -> counters(%{controller | ended?: true})
  end

  defp session_gone?(%Kino.Trace{session: pid}),
    do: node(pid) == node() and not Process.alive?(pid)

  defp now, do: System.monotonic_time(:millisecond)
end
