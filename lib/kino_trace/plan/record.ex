defmodule KinoTrace.Plan.Record do
  @moduledoc false
  # The options of a recorder (`Kino.Trace.record/2`) besides those of the trace it runs,
  # checked before anything is traced, into what a session's recorder
  # (`KinoTrace.Session.Recorder`) runs: the plan's `:record`.
  #
  #   * `events:`, `bytes:` - the ring's bounds (the newest events kept);
  #   * `snapshots:`, `snapshot_bytes:` - how many snapshots are kept, and their bytes in
  #     all (the oldest go first);
  #   * `on:` - the triggers: `exception: true` (an exception raised out of a traced
  #     call), `slower_than: ms` (a call that returned, or raised, after more than `ms`),
  #     `match: "Mod.fun(args) when guard"` (a call that matches a pattern in the
  #     patterns' syntax); `message: "{:error, _}"` (a message sent or received that
  #     matches a message pattern, as the `:pattern` option takes it); `telemetry:
  #     [:my_app, :repo, :query]` (a `:telemetry` event, or a list of them; only when the
  #     optional `:telemetry` package is loaded, and on this node);
  #   * `after:` - what a triggered snapshot records after its trigger: `n` (or `{n,
  #     :events}`) events, or `{ms, :ms}` milliseconds; `0` (none) by default.
  #
  # The defaults and bounds of the first four are KinoTrace.Limits' (`{:record, _}` rows).

  alias KinoTrace.{Limits, Options, Pattern}

  @typedoc """
  A trigger, as `:kino_trace_trigger` runs it (src/kino_trace_trigger.erl, the one
  definition of when an event fires one, here and in the agent on another node): plain
  terms, a call pattern's MFA and match spec (compiled where it runs).
  """
  @type trigger :: :kino_trace_trigger.trigger()

  @type t :: %{
          events: pos_integer(),
          bytes: pos_integer(),
          snapshots: pos_integer(),
          snapshot_bytes: pos_integer(),
          on: [trigger()],
          after: {:events | :ms, non_neg_integer()}
        }

  @keys [:events, :bytes, :snapshots, :snapshot_bytes, :on, :after]
  # the :telemetry events one recorder may attach to
  @max_telemetry_events KinoTrace.Limits.default(:telemetry_events)

  @doc """
  How long an after-window of n events waits for them at most (ms): after a crash that
  ends the triggering process, or on a trace that goes quiet, they may never come.
  """
  @spec events_window_ms() :: pos_integer()
  def events_window_ms, do: 5_000

  @doc "The options that are a recorder's (not the trace's)."
  @spec keys() :: [atom()]
  def keys, do: @keys

  @doc """
  The options with their defaults and checks (`KinoTrace.Options`).

      iex> KinoTrace.Options.defaults(KinoTrace.Plan.Record.schema())[:events]
      100000
  """
  @spec schema() :: Options.schema()
  def schema do
    [
      events: cap(:record_events),
      bytes: cap(:record_bytes),
      snapshots: cap(:snapshots),
      snapshot_bytes: cap(:snapshot_bytes),
      on:
        {[],
         {"a keyword list of triggers: exception: true, slower_than: ms, match: \"Mod.fun(args)\", telemetry: [:app, :event]",
          &Keyword.keyword?/1}},
      after: {0, &check_after/1}
    ]
  end

  defp cap(name), do: {Limits.default(name), Options.bounded_pos_integer(Limits.max(name))}

  defp check_after(n) when is_integer(n) and n >= 0, do: :ok
  defp check_after({n, unit}) when is_integer(n) and n >= 0 and unit in [:events, :ms], do: :ok
  defp check_after(_), do: {:error, "a number of events, {n, :events} or {milliseconds, :ms}"}

  @doc """
  Checks a recorder's options against the trace's (`trace_options`, validated: the
  triggers need what they look at traced) and compiles the triggers. Raises
  `ArgumentError` naming the bad option.

      iex> KinoTrace.Plan.Record.new!([after: {50, :ms}], KinoTrace.Plan.Options.validate!([])).after
      {:ms, 50}
      iex> KinoTrace.Plan.Record.new!([on: [slower_than: 10]], KinoTrace.Plan.Options.validate!(return: false))
      ** (ArgumentError) invalid value for :on: slower_than: needs the calls' returns traced (return: true)
  """
  @spec new!(keyword(), keyword()) :: t()
  def new!(opts, trace_options, what \\ [:calls]) do
    opts = opts |> Options.validate!(schema()) |> Map.new()
    on = Enum.map(opts.on, &trigger!(&1, Keyword.put(trace_options, :what, what)))

    after_ =
      case opts.after do
        n when is_integer(n) -> {:events, n}
        {n, unit} -> {unit, n}
      end

    case after_ do
      {:events, n} when n > opts.events ->
        raise ArgumentError,
              "invalid value for :after: at most the ring's #{opts.events} events (events:), got: #{n}"

      {:ms, n} when n > 4_294_967_295 ->
        raise ArgumentError, "invalid value for :after: at most 4294967295 ms, got: #{n}"

      _ ->
        :ok
    end

    %{opts | on: on} |> Map.put(:after, after_)
  end

  defp trigger!({:exception, true}, options) do
    if options[:exceptions] || options[:return],
      do: {:exception, true},
      else: invalid!("exception: true needs exceptions traced (exceptions: true)")
  end

  defp trigger!({:exception, false} = trigger, _options), do: trigger

  defp trigger!({:slower_than, ms}, options) when is_integer(ms) and ms > 0 do
    if options[:return],
      do: {:slower_than, ms},
      else: invalid!("slower_than: needs the calls' returns traced (return: true)")
  end

  defp trigger!({:match, text}, _options) when is_binary(text) do
    parsed =
      try do
        Pattern.parse_all!([text])
      rescue
        e in ArgumentError -> invalid!("match: " <> Exception.message(e))
      end

    case parsed do
      {[pattern], _warnings} ->
        {:match, {text, Pattern.mfa(pattern), Pattern.match_spec(pattern, [true])}}

      _ ->
        invalid!("match: expected one call pattern, got: #{inspect(text)}")
    end
  end

  defp trigger!({:message, text}, options) when is_binary(text) do
    if :messages not in options[:what],
      do: invalid!("message: needs messages traced (Kino.Trace.trace/2's messages:)")

    case KinoTrace.Plan.MessagePattern.compile(text, false, max_bytes: options[:max_bytes]) do
      {:ok, %{send: send}} when is_list(send) ->
        # (the send match spec matches [receiver, message]; its actions become `true`)
        {:message, {text, for({head, guards, _} <- send, do: {head, guards, [true]})}}

      {:error, message} ->
        invalid!("message: " <> message)
    end
  end

  defp trigger!({:telemetry, names}, options) when is_list(names) and names != [] do
    names = if Enum.all?(names, &is_atom/1), do: [names], else: names

    cond do
      not Enum.all?(names, &telemetry_name?/1) or length(names) > @max_telemetry_events ->
        invalid!(
          "telemetry: expected an event name (a list of atoms) or at most " <>
            "#{@max_telemetry_events} of them, got: #{inspect(names)}"
        )

      options[:nodes] not in [nil, [], node(), [node()]] ->
        invalid!("telemetry: runs on this node only (a recorder with nodes: cannot take it)")

      not Code.ensure_loaded?(:telemetry) ->
        invalid!(
          "telemetry: needs the :telemetry package loaded (an optional dependency: " <>
            "add {:telemetry, \"~> 1.0\"} to your dependencies)"
        )

      true ->
        {:telemetry, Enum.uniq(names)}
    end
  end

  defp trigger!({key, value}, _options)
       when key in [:exception, :slower_than, :match, :message, :telemetry] do
    expected =
      %{
        exception: "true",
        slower_than: "a positive number of milliseconds",
        match: "a call pattern as a string",
        message: "a message pattern as a string",
        telemetry: "an event name (a list of atoms) or a list of them"
      }[key]

    invalid!("#{key}: expected #{expected}, got: #{inspect(value)}")
  end

  defp trigger!({key, _value}, _options) do
    invalid!(
      "unknown trigger #{inspect(key)} (known: :exception, :slower_than, :match, :message, :telemetry)"
    )
  end

  defp telemetry_name?(name),
    do: is_list(name) and name != [] and Enum.all?(name, &is_atom/1)

  defp invalid!(message), do: raise(ArgumentError, "invalid value for :on: " <> message)
end
