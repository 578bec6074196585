defmodule Kino.Trace do
  @moduledoc """
  Live function-call tracing for the BEAM.

  In a Livebook cell, a trace renders as a live widget that shows every matching call as
  it happens. Outside Livebook it is a plain handle: print events to the console, read
  them, stream them, or capture a block's calls in a test.

      trace = Kino.Trace.calls(["MyApp.Repo.get/2", "Enum.map(list, _) when length(list) > 100"])
      Kino.Trace.events(trace)      # the last events, as Kino.Trace.Event structs
      Kino.Trace.info(trace)        # counters: accepted, delivered, dropped by reason, rate
      Kino.Trace.stop(trace)

      # in IEx: print each call as Elixir code, indented by call depth
      Kino.Trace.calls([MyApp.Cache], print: true, limit: 100)

      # in a test
      capture = Kino.Trace.capture(["MyApp.Cache.fetch/2"], fn -> MyApp.run() end)
      capture.events

      # left running: the newest events, frozen into a snapshot when an exception is raised
      rec = Kino.Trace.record(["MyApp.Orders"], on: [exception: true])
      [snapshot | _] = Kino.Trace.snapshots(rec)

  ## Patterns

  Mixed freely in one list: `"Mod"`, `"Mod.fun"`, `"Mod.fun/2"`, `"Mod.fun/*"`,
  `":ets.insert/2"`, `":ets"`, `Mod`, `&Mod.fun/2`, `{Mod, :fun, 2}`, and argument
  patterns with guards in Elixir syntax: `"MyApp.Cache.fetch(:users, _)"`,
  `"Enum.map(list, _) when length(list) > 100"`. The "Patterns" guide has the grammar.

  Every pattern is checked before anything is traced: an unknown module or function, a
  syntax error or a bad option raises an `ArgumentError` naming the bad entry, with a
  suggestion when a close name exists.

  ## Options

  `:pids` (whose calls), `:children`, `:return`, `:exceptions`, `:caller`, `:return_to`,
  `:local`, the limits (`:limit`, `:rate`, `:queue`, `:timeout`), the term caps
  (`:max_depth`, `:max_items`, `:max_binary`, `:max_bytes`), `:print`, `:to` (stream to rotating trace files), `:force`,
  `:history`, `:nodes` and `:agent`: the "Options and limits" guide has them all in one
  table, each with its default and its bound.

  ## Where the time goes

  `latency/2` gives each function's latency distribution (p50, p99, ... and a histogram),
  `flame/2` its call trees as flame graph data, and `slow_calls/2` the slowest calls
  kept whole: arguments, result, duration, process and the events beneath each. A trace
  started with `latency: true`, `slowest: k` or `slower_than: ms` keeps them since its
  start; any trace, capture or list of events gives those of its events.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> %{slowest: %{{Enum, :sum, 1} => [slow]}} = Kino.Trace.slow_calls(capture)
      iex> {slow.args, slow.result, length(slow.events)}
      {[[1, 2]], {:return, 3}, 2}

  ## Safety

  Limits are enforced in the native tracer before the VM builds a trace message, so a
  flood costs little and never grows memory without bound: what does not fit is dropped
  and counted (`info/1`). Each trace is its own OTP trace session, so several traces,
  `:dbg` and other tools run side by side. A trace ends when its owner process exits,
  on `stop/1`, at its `:timeout` or `:limit`; then nothing of it remains in the VM.

  No trace records kino_trace's own work: its processes are left out of every trace and
  stats session, and the API does its work in them, not in the process that calls it,
  which only sends a request and takes the reply (with BIFs of `:erlang`). So a trace of
  that process (in Livebook, the cell's evaluator) shows only the user's own calls.
  """

  alias Kino.Trace.Plan
  alias KinoTrace.{Client, Front, Launcher}

  @enforce_keys [:id, :session]
  defstruct [:id, :session, node: nil]

  @type t :: %__MODULE__{id: pos_integer(), session: pid(), node: node()}
  @type status :: :running | :paused | :stopped | :limit_reached | :timeout

  @typedoc "Events dropped, by reason."
  @type dropped :: %{
          rate: non_neg_integer(),
          queue_full: non_neg_integer(),
          max_events: non_neg_integer(),
          closed: non_neg_integer(),
          no_memory: non_neg_integer()
        }

  @typedoc """
  What `info/1` returns: the status and counters of a trace. A trace of several nodes
  has the sums, and `:nodes` with each node's own info and status (`:gone` for a node
  that went away, `:unresponsive` for one that does not answer). A recorder
  (`record/2`) has `:recorder`, a snapshot `:snapshot` (see `snapshots/1`). `:tracer` says what
  traces a node: `:native`, or `{:fallback, why}` for the pure-Erlang tracer another
  node's agent falls back to (see the "Other nodes" guide); then `:fallback` has the trace
  messages it `received` (each accepted or dropped) and how often its mailbox guard
  `switched_off` tracing (calls meanwhile are not traced).
  """
  @type info :: %{
          required(:id) => pos_integer(),
          required(:status) => status(),
          required(:patterns) => [String.t()],
          optional(:what) => Kino.Trace.Plan.summary(),
          required(:accepted) => non_neg_integer(),
          required(:delivered) => non_neg_integer(),
          required(:queued) => non_neg_integer(),
          required(:discarded) => non_neg_integer(),
          required(:bytes_queued) => non_neg_integer(),
          required(:dropped) => dropped(),
          required(:rate) => float(),
          required(:started_at) => integer(),
          required(:limit) => pos_integer() | nil,
          required(:traced) => boolean(),
          required(:stack_guarded) => non_neg_integer(),
          required(:subscribers) => non_neg_integer(),
          required(:reapplied) => non_neg_integer(),
          optional(:tracer) => :native | {:fallback, String.t()},
          optional(:fallback) => %{received: non_neg_integer(), switched_off: non_neg_integer()},
          optional(:nodes) => %{node() => map()},
          optional(:recorder) => map(),
          optional(:snapshot) => map()
        }

  @typedoc "The result of `set_patterns/2` for each entry."
  @type pattern_result :: :ok | {:ok, [String.t()]} | {:error, String.t()}

  @doc """
  Starts tracing calls that match `patterns` and returns the trace.

  The calling process owns the trace: when it exits, the trace ends. See the module
  documentation for patterns and options.

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> Enum.sum([1, 2, 3])
      6
      iex> Kino.Trace.flush(trace)
      :ok
      iex> for event <- Kino.Trace.events(trace), do: {event.kind, event.args, event.return}
      [{:call, [[1, 2, 3]], nil}, {:return, nil, 6}]
      iex> Kino.Trace.stop(trace)
      :ok
  """
  @spec calls(term(), keyword()) :: t()
  def calls(patterns, opts \\ []), do: trace([calls: patterns], opts)

  @doc """
  Starts tracing messages sent and received by `targets` and returns the trace.

  `targets` is a pid, a name (a registered atom, `{:global, name}` or `{:via, module,
  name}`), a list of them, `:all`, `:new`, `:existing`, or the preset `:distributed`: every message that crosses to or from another node.
  The `:pattern` option keeps only messages that match an Elixir pattern with an
  optional guard, e.g. `pattern: "{:ok, _}"` or `pattern: "{:get, key} when is_atom(key)"`.
  Events have kind `:send` (`:data` is the message, `:peer` the receiver) and `:receive`.
  A `receive ... after` that times out (`Process.sleep/1` is one) receives no message
  and is left out; with `timeouts: true` it is traced as an event of kind `:timeout`,
  shown as "after timeout" (whatever the `:pattern`).

      Kino.Trace.messages(:distributed)
      Kino.Trace.messages([MyApp.Cache], pattern: "{:\"$gen_call\", _, {:fetch, _}}")
      Kino.Trace.messages([pid], timeouts: true)

  Here the calling process sends itself a message and receives it:

      iex> me = self()
      iex> trace = Kino.Trace.messages([me], pattern: "{:ping, _}")
      iex> send(me, {:ping, 1})
      iex> receive do: ({:ping, 1} -> :ok)
      :ok
      iex> Kino.Trace.flush(trace)
      :ok
      iex> trace |> Kino.Trace.events() |> Enum.map(&{&1.kind, &1.data}) |> Enum.sort()
      [{:receive, {:ping, 1}}, {:send, {:ping, 1}}]
  """
  @spec messages(term(), keyword()) :: t()
  def messages(targets, opts \\ []), do: trace([messages: targets], opts)

  @doc """
  Starts tracing the lifecycle of `targets` (same forms as `messages/2`, without
  presets): `:spawn`/`:spawned`, `:exit` (with the reason), `:link`/`:unlink`,
  `:getting_linked`/`:getting_unlinked`, `:register`/`:unregister`. With
  `children: true`, processes they spawn are followed too.

      iex> pid = spawn(fn -> receive do: (:stop -> exit(:done)) end)
      iex> trace = Kino.Trace.processes([pid])
      iex> ref = Process.monitor(pid)
      iex> send(pid, :stop)
      iex> receive do: ({:DOWN, ^ref, :process, _, reason} -> reason)
      :done
      iex> Kino.Trace.flush(trace)
      :ok
      iex> for event <- Kino.Trace.events(trace), event.kind == :exit, do: event.data
      [:done]
  """
  @spec processes(term(), keyword()) :: t()
  def processes(targets, opts \\ []), do: trace([processes: targets], opts)

  @doc """
  Starts one trace that combines calls, messages and process events:

      Kino.Trace.trace([calls: ["MyApp.Cache"], messages: [MyApp.Cache], processes: [MyApp.Cache]])

  Options are those of `calls/2` (`:pids` applies to calls) plus `:pattern` and `:timeouts` for messages.

      iex> trace = Kino.Trace.trace([calls: ["Enum.sum/1"], messages: [self()]], pids: self(), pattern: ":go")
      iex> send(self(), :go)
      iex> receive do: (:go -> Enum.sum([1]))
      1
      iex> Kino.Trace.flush(trace)
      :ok
      iex> trace |> Kino.Trace.events() |> Enum.map(& &1.kind) |> Enum.sort()
      [:call, :receive, :return, :send]
  """
  @spec trace(keyword(), keyword()) :: t()
  def trace(what, opts \\ []) do
    # (every function of the API does its work in kino_trace's own processes: see
    # KinoTrace.Front; at high priority, as a session sets up: with the traced functions
    # hot, checking the patterns waited behind them for seconds, issue 36 item 2)
    owner = self()
    Front.run(fn -> KinoTrace.Server.urgent(fn -> start(Plan.new!(what, opts), owner) end) end)
  end

  @doc """
  Starts a flight recorder: a trace of `what` that keeps its *newest* events in bounded
  memory, made to be left running, and freezes them into snapshots when a trigger fires
  or on `snapshot/1`. The "Post-mortem tracing" guide shows it at work.

  `what` is what `calls/2` takes (patterns), or what `trace/2` takes (`[calls: ...,
  messages: ..., processes: ...]`). Options are those of `calls/2` (`:history` aside:
  the ring is the history) and:

    * `events: 100_000`, `bytes: 67_108_864` - the ring: at most this many events and
      bytes (each event's size in memory); older events are overwritten, and counted;
    * `snapshots: 8`, `snapshot_bytes: 268_435_456` - the snapshots kept: beyond
      either, the oldest is ended (counted);
    * `on:` - the triggers, each taking a snapshot: `exception: true` (an exception raised
      out of a traced call: once, where it is raised, not again as it goes up through
      the traced calls of its process), `slower_than: ms` (a traced call that took longer),
      `match: "MyApp.Orders.place(%{total: t}) when t > 1000"` (a call that matches a
      pattern, in the syntax of `calls/2`'s patterns), `message: "{:error, _}"` (a
      message sent or received that matches a message pattern, as `messages/2`'s
      `:pattern` takes it), `telemetry: [:my_app, :order, :failed]` (a `:telemetry`
      event, or a list of them: when the optional `:telemetry` package is loaded, and
      on this node only; the ring is frozen as the recorder hears of the event, with
      the emitting process's open calls);
    * `after:` - what a triggered snapshot records after its trigger: `n` events (or
      `{n, :events}`; when fewer come, the window ends 5 s after its trigger with those
      that came) or `{ms, :ms}`; none by default.

  A triggered snapshot holds what the ring held up to the trigger, the calls still open
  in the triggering process that led to it (even those the ring overwrote), then the
  `:after` window. While a window is open, other triggers count in `info/1` but take no
  other snapshot.

  `info/1` has the recorder's figures under `:recorder`: `:kept` (and `:kept_bytes`),
  `:overwritten`, `:own` (events of kino_trace's own processes left out), so that
  `accepted == kept + overwritten + own + queued + discarded`; `:fired` per trigger,
  `:snapshots`, `:snapshots_taken` and `:snapshots_dropped`.

  With `nodes:`, each node keeps its own ring, bounded there (another node's is kept by
  kino_trace's agent there, and nothing of it comes to this node until a snapshot asks):
  `snapshot/1` fetches every node's ring and merges them by time into one snapshot.
  Triggers (`on:`) run where each ring is, and another node's snapshots wait there
  (at most `snapshots:` and `snapshot_bytes:`, the oldest going first) until
  `snapshots/1` fetches them. `slower_than:` needs the native tracer there (the
  pure-Erlang one pairs no calls: such a node refuses it); a triggered snapshot of
  another node holds what its ring held, without the open calls it overwrote.

      iex> rec = Kino.Trace.record(["Enum.sum/1"], pids: self(), events: 4, return: false)
      iex> for n <- 1..6, do: Enum.sum([n])
      [1, 2, 3, 4, 5, 6]
      iex> snapshot = Kino.Trace.snapshot(rec)
      iex> snapshot |> Kino.Trace.events() |> Enum.map(& &1.args)
      [[[3]], [[4]], [[5]], [[6]]]
      iex> Kino.Trace.info(rec).recorder.overwritten
      2
      iex> Kino.Trace.stop(rec)
      :ok
  """
  @spec record(term(), keyword()) :: t()
  def record(what, opts \\ []) do
    owner = self()
    what = if Keyword.keyword?(what) and what != [], do: what, else: [calls: what]

    Front.run(fn ->
      KinoTrace.Server.urgent(fn ->
        {record_opts, trace_opts} = Keyword.split(opts, KinoTrace.Plan.Record.keys())

        if Keyword.has_key?(trace_opts, :history),
          do:
            raise(
              ArgumentError,
              "invalid option :history for record/2: the ring is its history (events: and bytes:)"
            )

        plan = Plan.new!(what, trace_opts)
        record = KinoTrace.Plan.Record.new!(record_opts, plan.options, Keyword.keys(what))
        start(%{plan | record: record}, owner)
      end)
    end)
  end

  @doc """
  Takes a snapshot of a recorder (`record/2`) now: its ring's events, frozen, as a trace
  that every front end takes (`events/2`, `stream/1`, `print/2`, `to_mermaid/2`, the
  widget, `save/2`, the assertions). It lives until it is stopped, the recorder ends, or
  newer snapshots push it out (see `snapshots/1`). Raises `ArgumentError` for a trace
  that is not a recorder.

      iex> rec = Kino.Trace.record(["Enum.sum/1"], pids: self())
      iex> Enum.sum([1, 2])
      3
      iex> snapshot = Kino.Trace.snapshot(rec)
      iex> snapshot |> Kino.Trace.events() |> Enum.map(& &1.kind)
      [:call, :return]
      iex> Kino.Trace.snapshots(rec) == [snapshot]
      true
  """
  @spec snapshot(t()) :: t()
  def snapshot(%__MODULE__{} = recorder) do
    case Client.call(recorder, :snapshot) do
      {pid, id} when is_pid(pid) ->
        %__MODULE__{id: id, session: pid, node: node()}

      _ ->
        raise ArgumentError,
              "#{inspect(recorder)} is not a recorder: start one with Kino.Trace.record/2"
    end
  end

  @doc """
  A recorder's snapshots, newest first (triggered or taken with `snapshot/1`); each is a
  trace, whose `info/1` has `:snapshot`: its `:trigger` (`:exception`, `:slower_than`,
  `:match`, `:message`, `:telemetry` or `:manual`), the triggering event's `:event` id
  and `:pid` (the emitting process for `:telemetry`), `:trigger_time` (the event's time) and `:taken_at` (system microseconds), its `:events` and `:bytes`.

      iex> rec = Kino.Trace.record(["Enum.sum/1"], pids: self())
      iex> Kino.Trace.snapshots(rec)
      []
  """
  @spec snapshots(t()) :: [t()]
  def snapshots(%__MODULE__{} = recorder) do
    case Client.call(recorder, :snapshots) do
      list when is_list(list) ->
        for %{session: pid, id: id} <- list, do: %__MODULE__{id: id, session: pid, node: node()}

      _ ->
        raise ArgumentError,
              "#{inspect(recorder)} is not a recorder: start one with Kino.Trace.record/2"
    end
  end

  defp start(plan, owner) do
    trace = run(plan, owner)

    case plan.options[:print] do
      false -> :ok
      true -> Kino.Trace.Printer.attach(trace)
      printer_opts -> Kino.Trace.Printer.attach(trace, printer_opts)
    end

    if spec = KinoTrace.Plan.Options.to_spec(plan.options[:to]) do
      try do
        KinoTrace.File.Writer.attach(trace, spec)
      rescue
        e ->
          Client.stop(trace)
          reraise e, __STACKTRACE__
      end
    end

    trace
  end

  # How long a trace of this node may take to set its patterns before it is returned,
  # still setting them: each `:trace` call waits for the VM, one at a time VM-wide, and
  # with the traced functions hot and other traces starting and ending that took seconds
  # (issue 36 item 2). The application's `:setup_wait` (ms, or :infinity) changes it.
  @setup_wait 1_000

  defp setup_wait do
    case Application.get_env(:kino_trace, :setup_wait, @setup_wait) do
      ms when (is_integer(ms) and ms >= 0) or ms == :infinity ->
        ms

      bad ->
        raise ArgumentError,
              "invalid :setup_wait in the :kino_trace application's environment: " <>
                "expected a non-negative integer (ms) or :infinity, got: #{inspect(bad)}"
    end
  end

  @doc """
  Starts a trace that runs `plan` (`Kino.Trace.Plan.new!/3`), owned by `owner`, and
  returns it. `calls/2` and the others build a plan and run it; this is for those that
  build or keep their own (the widget, a capture). The `:print` option is not acted on
  here.

      iex> plan = Kino.Trace.Plan.new!([calls: ["Enum.sum/1"]], limit: 10)
      iex> trace = Kino.Trace.run(plan)
      iex> Kino.Trace.info(trace).patterns
      ["Enum.sum/1"]
      iex> Kino.Trace.stop(trace)
      :ok
  """
  @spec run(Plan.t(), pid()) :: t()
  def run(%Plan{} = plan, owner \\ self()) do
    %{id: id, session: pid, node: node} = Launcher.start!(plan, owner, setup_wait())
    %__MODULE__{id: id, session: pid, node: node}
  end

  @doc """
  Traces the calling process (and the processes it spawns) while `fun` runs, and returns
  every matching call with its return value or exception.

  Waits until every event of the block has been delivered, then ends the trace.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2, 3]) end)
      iex> capture.result
      6
      iex> Enum.map(capture.events, & &1.kind)
      [:call, :return]

  Options are those of `calls/2`; `:pids` adds processes to trace besides the caller
  (default none), `:children` defaults to `true`, `:limit` to 1_000_000 events and
  `:queue` to as many events as the limit and 256 MB. If `fun` raises, the trace is
  ended and the exception re-raised.

  Tracing never blocks the block, so a capture can lose events: dropped when the queue
  is full or over the rate (counted by reason in `capture.dropped`), or not traced once
  the limit or the timeout ended the trace before the block (`capture.truncated`).
  `Kino.Trace.Capture.complete?/1` tells whether it lost none; every assertion of
  `Kino.Trace.Assertions` on an incomplete capture fails and says why.

  Work done in another process, such as a GenServer the block calls, is captured only
  when that process is traced too: `pids: [MyApp.Cache]`. The capture notes the
  processes the block sent messages to that it did not trace
  (`capture.untraced_receivers`), and an assertion about a missing call names them and
  suggests that option.
  """
  @spec capture(term(), (-> term()), keyword()) :: Kino.Trace.Capture.t()
  def capture(patterns, fun, opts \\ []) when is_function(fun, 0) do
    Kino.Trace.Capture.run(patterns, fun, opts)
  end

  @doc """
  Counts calls, time and memory per function with the VM's own counters, in its own
  trace session: no message per call. See `Kino.Trace.Stats`.

      iex> stats = Kino.Trace.stats(["Enum.sum/1"], pids: self())
      iex> Enum.sum([1, 2]) + Enum.sum([3])
      6
      iex> Kino.Trace.stats_snapshot(stats).rows |> Enum.map(&{&1.mfa, &1.calls})
      [{{Enum, :sum, 1}, 2}]
      iex> Kino.Trace.stop(stats)
      :ok
  """
  @spec stats(term(), keyword()) :: Kino.Trace.Stats.t()
  defdelegate stats(patterns, opts \\ []), to: Kino.Trace.Stats, as: :start

  @doc """
  The statistics so far, per function. See `Kino.Trace.Stats.snapshot/1`.

      iex> stats = Kino.Trace.stats(["Enum.sum/1"], pids: self())
      iex> Enum.sum([1, 2])
      3
      iex> snapshot = Kino.Trace.stats_snapshot(stats)
      iex> Kino.Trace.Stats.Snapshot.row(snapshot, {Enum, :sum, 1}).calls
      1
  """
  @spec stats_snapshot(Kino.Trace.Stats.t()) :: Kino.Trace.Stats.Snapshot.t()
  defdelegate stats_snapshot(stats), to: Kino.Trace.Stats, as: :snapshot

  @doc """
  Sets a stats session's counters to zero.

      iex> stats = Kino.Trace.stats(["Enum.sum/1"], pids: self())
      iex> Enum.sum([1, 2])
      3
      iex> Kino.Trace.reset_stats(stats)
      :ok
      iex> Kino.Trace.stats_snapshot(stats).rows
      []
  """
  @spec reset_stats(Kino.Trace.Stats.t()) :: :ok
  defdelegate reset_stats(stats), to: Kino.Trace.Stats, as: :reset

  @doc """
  Prints a stats session (or snapshot) as a table, with the options of
  `Kino.Trace.Stats.print/2`.

      iex> stats = Kino.Trace.stats(["Enum.sum/1"], pids: self(), memory: false)
      iex> Enum.sum([1, 2])
      3
      iex> {:ok, device} = StringIO.open("")
      iex> Kino.Trace.print_stats(stats, device: device)
      :ok
      iex> {_, table} = StringIO.contents(device)
      iex> table =~ "Enum.sum/1"
      true
  """
  @spec print_stats(Kino.Trace.Stats.t() | Kino.Trace.Stats.Snapshot.t(), keyword()) :: :ok
  defdelegate print_stats(stats_or_snapshot, opts \\ []), to: Kino.Trace.Stats, as: :print

  @doc """
  Latency distributions per function, in microseconds, from a trace's paired calls and
  returns: a running trace, a capture, or a list of events. A trace started with
  `latency: true` keeps every function's distribution since its start, as its events
  are decoded (nothing kept per call); any other trace gives those of its last
  `last: 10_000` events (see `events/2`).

  Keyed by `{module, function, arity}`, each function has the `:count` of calls that
  returned and their `:min`, `:p50`, `:p90`, `:p99`, `:p999` and `:max`, with the
  `:histogram` they come from (`[{bucket_low_us, count}]`); `:exceptions`, the same
  for calls that ended with an exception (raise, throw or exit); and `:unknown`, the
  calls whose end the events do not have (functions traced without returns, such as
  tail-call loops, calls still running, returns lost to a limit), never counted as
  zero. Percentiles are within 1/64 (1.6 %) of the exact ones (log-linear buckets as an
  HDR histogram keeps them, at most 2 561 per function); min and max are exact.
  Durations need returns: a trace made with `return: false` has only `:unknown` calls.

  A stats session (`stats/2`) started with `latency: true` gives its rows'
  distributions (those of the functions called since its start or reset); the VM's
  counters of any other keep no duration per call.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) + Enum.sum([3]) end)
      iex> %{{Enum, :sum, 1} => sum} = Kino.Trace.latency(capture)
      iex> {sum.count, sum.unknown, sum.exceptions.count, sum.min <= sum.p50 and sum.p50 <= sum.max}
      {2, 0, 0, true}
  """
  @spec latency(Kino.Trace.Mermaid.source() | Kino.Trace.Stats.t(), keyword()) :: %{
          mfa() => map()
        }
  def latency(source, opts \\ []) do
    Front.run(fn ->
      opts = KinoTrace.Options.validate!(opts, last: {10_000, KinoTrace.Options.pos_integer()})

      with nil <- kept_latency(source) do
        KinoTrace.Latency.new()
        |> KinoTrace.Latency.add(events_of(source, opts[:last]))
        |> KinoTrace.Latency.report()
      end
    end)
  end

  @doc """
  Flame graph data of a trace's call trees (a running trace's last `last: 10_000`
  events, a capture or a list of events), built from its paired calls and returns.

    * `format: :folded` (default) - folded stacks, the input of flamegraph.pl, Inferno
      and speedscope: one line per distinct stack, root first, frames in Elixir's
      spelling, then the stack's self time: `MyApp.a/0;MyApp.b/1 1234` (a stack whose
      time rounds to 0 in `unit` has no line)
    * `format: :callgrind` - a callgrind file for KCachegrind: per function its self
      time, and per function it called the number of calls and their inclusive time

  Times add up over processes, or are those of one with `process: pid`; `unit:
  :microsecond` (default) or `:nanosecond`. A call whose end the events do not have (a
  tail-call loop traced without returns, a call still running) is the frame
  `Mod.fun/1 [no return]`: its own time is unknown, so it has no line of its own, and
  the calls it made keep theirs under it. Calls of a function traced without returns
  open no frame (they are siblings, never a deep false stack).

      iex> capture = Kino.Trace.capture(["Enum.sum/1", "Enum.reduce/3"], fn -> Enum.sum([1, 2]) end)
      iex> Kino.Trace.flame(capture, unit: :nanosecond) |> String.split([";", " "]) |> Enum.take(1)
      ["Enum.sum/1"]
  """
  @spec flame(Kino.Trace.Mermaid.source(), keyword()) :: String.t()
  def flame(source, opts \\ []) do
    Front.run(fn ->
      opts =
        KinoTrace.Options.validate!(opts,
          format: {:folded, {"one of :folded, :callgrind", &(&1 in [:folded, :callgrind])}},
          process: {nil, {"a pid", &(is_nil(&1) or is_pid(&1))}},
          unit:
            {:microsecond,
             {"one of :microsecond, :nanosecond", &(&1 in [:microsecond, :nanosecond])}},
          last: {10_000, KinoTrace.Options.pos_integer()}
        )

      events = events_of(source, opts[:last])

      events =
        if opts[:process], do: Enum.filter(events, &(&1.pid == opts[:process])), else: events

      trees = KinoTrace.Render.CallTree.build(events)

      case opts[:format] do
        :folded -> KinoTrace.Render.Flame.folded(trees, opts[:unit])
        :callgrind -> KinoTrace.Render.Flame.callgrind(trees, opts[:unit])
      end
    end)
  end

  @doc """
  The slowest calls, kept whole: per function the `slowest: k` slowest (slowest first),
  and with `slower_than: ms` every call that took at least `ms` milliseconds (oldest
  first). Each is a map with its `:mfa`, `:pid` and `:name`, its `:args` (`nil` when the
  trace did not have its call), its `:result` (`{:return, value}` or `{:exception,
  {class, reason}}`), its `:duration` in nanoseconds, the `:call_id` and `:end_id` of its
  events, and `:events`: the call, what its process did beneath it (its call tree, as
  `flame/2`, `to_mermaid/2` and the printer take it) and its end, at most 200 of them
  (`:events_cut` says when some beneath were left out), `nil` when the trace no longer had
  them.

  A trace started with `slowest: k` or `slower_than: ms` keeps them since its start, as
  its events are decoded: the calls' events from its history (`:history`) when the call
  ends, and their arguments from the open calls it keeps (at most 100 000 in all; calls
  past that are kept without arguments and counted in `:untracked`). The calls over
  the threshold it keeps are the newest 1 000: `:over` counts every one, `:left_out`
  those not kept. It keeps the slowest of at most 2 000 functions, and the kept calls
  hold at most 100 000 events in all (past that, a call is kept without its events,
  `:events_cut` true). Any other source (a trace started without them, a capture, a list of
  events, an opened file) gives those of its last `last: 10_000` events, with `slowest:`
  (default 5) and `slower_than:` given here.

  Print them with `Kino.Trace.Printer.print_slow_calls/2`.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) + Enum.sum([3]) end)
      iex> %{slowest: %{{Enum, :sum, 1} => calls}} = Kino.Trace.slow_calls(capture, slowest: 2)
      iex> calls |> Enum.map(& &1.args) |> Enum.sort()
      [[[1, 2]], [[3]]]
      iex> [slowest, _] = calls
      iex> {slowest.result, Enum.map(slowest.events, & &1.kind)}
      {{:return, 3}, [:call, :return]}
  """
  @spec slow_calls(Kino.Trace.Mermaid.source(), keyword()) :: KinoTrace.Latency.SlowCalls.report()
  def slow_calls(source, opts \\ []) do
    Front.run(fn ->
      opts =
        KinoTrace.Options.validate!(opts,
          slowest:
            {5, KinoTrace.Options.bounded_pos_integer(KinoTrace.Limits.max(:slowest), nil: true)},
          slower_than:
            {nil,
             {"a number of milliseconds (0 or more)",
              &(is_nil(&1) or (is_number(&1) and &1 >= 0))}},
          last: {10_000, KinoTrace.Options.pos_integer()}
        )

      case source do
        %__MODULE__{} -> KinoTrace.Latency.SlowCalls.of_trace(source, opts[:last], opts)
        _ -> KinoTrace.Latency.SlowCalls.of_events(events_of(source, opts[:last]), opts)
      end
    end)
  end

  # The distributions a trace with `latency: true` keeps since its start, or a stats
  # session's rows; nil for anything else.
  defp kept_latency(%__MODULE__{} = trace) do
    with %KinoTrace.Latency{} = kept <- Client.latency(trace),
         do: KinoTrace.Latency.report(kept)
  end

  defp kept_latency(%Kino.Trace.Stats{} = stats) do
    case Kino.Trace.Stats.snapshot(stats) do
      %{latency?: true, rows: rows} ->
        for row <- rows, row.latency, into: %{}, do: {row.mfa, row.latency}

      _ ->
        nil
    end
  end

  defp kept_latency(_source), do: nil

  defp events_of(%Kino.Trace.Stats{}, _last) do
    raise ArgumentError,
          "this stats session counts calls with the VM's counters, which keep no duration per call: " <>
            "start it with latency: true, or trace the same functions with Kino.Trace.calls/2 and pass that trace"
  end

  defp events_of(source, last), do: KinoTrace.Render.Source.events!(source, last)

  @doc """
  The source of a Mermaid `sequenceDiagram` of a trace's last events, a capture or a
  list of events: processes as participants (named by their registered names),
  messages as arrows, calls as activations, spawns, links and exits as notes. At most
  `max_messages: 200` arrows and notes; labels are escaped, so any term is safe. See
  `Kino.Trace.Mermaid` for the options.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> Kino.Trace.to_mermaid(capture) |> String.split("\\n") |> hd()
      "sequenceDiagram"
  """
  @spec to_mermaid(Kino.Trace.Mermaid.source(), keyword()) :: String.t()
  def to_mermaid(source, opts \\ []),
    do: Front.run(fn -> Kino.Trace.Mermaid.diagram(source, opts) end)

  @doc """
  Renders `to_mermaid/2`'s diagram with `Kino.Mermaid` (Livebook). Raises when Kino is
  not loaded. Takes the options of `to_mermaid/2` and Kino.Mermaid's `:caption`.

      capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      Kino.Trace.mermaid(capture, caption: "Enum.sum/1")
  """
  @spec mermaid(Kino.Trace.Mermaid.source(), keyword()) :: struct()
  def mermaid(source, opts \\ []),
    do: Front.run(fn -> Kino.Trace.Mermaid.render(source, opts) end)

  @doc """
  Stops tracing and ends the trace's session. Returns `:ok`, also when already stopped.

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> Kino.Trace.stop(trace)
      :ok
      iex> Kino.Trace.info(trace).status
      :stopped
      iex> Kino.Trace.stop(trace)
      :ok
  """
  @spec stop(t() | Kino.Trace.Stats.t()) :: :ok
  def stop(%Kino.Trace.Stats{} = stats), do: Kino.Trace.Stats.stop(stats)

  def stop(%__MODULE__{} = trace), do: Client.stop(trace)

  @doc """
  Subscribes `pid` to the trace. It receives
  `{:kino_trace, id, {:events, [Kino.Trace.Event.t()]}}` batches and
  `{:kino_trace, id, {:status, status}}` when the status changes. While subscribed, the
  subscriber is not traced by this trace (what it does with the events would feed the
  trace); `unsubscribe/2` traces it again as before.

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: :new)
      iex> id = trace.id
      iex> Kino.Trace.subscribe(trace)
      :ok
      iex> {worker, ref} = spawn_monitor(fn -> Enum.sum([1, 2]) end)
      iex> receive do: ({:DOWN, ^ref, :process, ^worker, :normal} -> :ok)
      :ok
      iex> Kino.Trace.flush(trace)
      :ok
      iex> receive do: ({:kino_trace, ^id, {:events, events}} -> Enum.map(events, & &1.kind))
      [:call, :return]
      iex> Kino.Trace.unsubscribe(trace)
      :ok
  """
  @spec subscribe(t(), pid()) :: :ok
  def subscribe(%__MODULE__{} = trace, pid \\ self()), do: Client.subscribe(trace, pid)

  @doc """
  Stops tracing `pid` in this trace (e.g. a process that prints or forwards the trace's
  own events, which would otherwise feed back into it).

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: :new)
      iex> worker = spawn(fn -> receive do: (:sum -> Enum.sum([1])) end)
      iex> Kino.Trace.exclude(trace, worker)
      :ok
      iex> ref = Process.monitor(worker)
      iex> send(worker, :sum)
      iex> receive do: ({:DOWN, ^ref, :process, _, _} -> :ok)
      :ok
      iex> Kino.Trace.flush(trace)
      :ok
      iex> for event <- Kino.Trace.events(trace), event.pid == worker, do: event
      []
  """
  @spec exclude(t(), pid()) :: :ok
  def exclude(%__MODULE__{} = trace, pid) when is_pid(pid), do: Client.exclude(trace, pid)

  @doc """
  Unsubscribes `pid`: it gets no more batches, and the trace traces it again as before.

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> Kino.Trace.subscribe(trace)
      :ok
      iex> Kino.Trace.unsubscribe(trace)
      :ok
      iex> Kino.Trace.info(trace).subscribers
      0
  """
  @spec unsubscribe(t(), pid()) :: :ok
  def unsubscribe(%__MODULE__{} = trace, pid \\ self()), do: Client.unsubscribe(trace, pid)

  @doc """
  Delivers the events queued so far to the subscribers and the history, then returns:
  a subscriber that calls it has them in its mailbox when it returns. Under a flood it
  delivers what was queued when asked, not what keeps coming. `capture/3` uses it once
  every event of its block is queued.

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> Enum.sum([1])
      1
      iex> Kino.Trace.flush(trace)
      :ok
      iex> Kino.Trace.info(trace).delivered
      2
  """
  @spec flush(t(), timeout()) :: :ok
  def flush(%__MODULE__{} = trace, timeout \\ :infinity), do: Client.flush(trace, timeout)

  @doc """
  The last `n` events (oldest first), from a bounded history (see `:history`).

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self(), return: false)
      iex> for n <- 1..3, do: Enum.sum([n])
      [1, 2, 3]
      iex> Kino.Trace.flush(trace)
      :ok
      iex> trace |> Kino.Trace.events(2) |> Enum.map(& &1.args)
      [[[2]], [[3]]]
  """
  @spec events(t(), pos_integer()) :: [Kino.Trace.Event.t()]
  def events(%__MODULE__{} = trace, n \\ 1000) when is_integer(n) and n > 0,
    do: Client.events(trace, n)

  @doc """
  A live stream of the trace's events, ending when the trace stops (a trace that has
  already ended gives an empty stream; one opened from a file, `open/2`, gives its
  events).

  While the stream runs, the process reading it is a subscriber and is not traced by
  this trace; tracing it resumes as before when the stream ends (halted or done).

      trace |> Kino.Trace.stream() |> Stream.filter(&(&1.kind == :call)) |> Enum.take(10)

  The stream of a trace that has ended is empty:

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> Kino.Trace.stop(trace)
      :ok
      iex> trace |> Kino.Trace.stream() |> Enum.to_list()
      []
  """
  @spec stream(t()) :: Enumerable.t()
  def stream(%__MODULE__{id: id} = trace) do
    Stream.resource(
      fn ->
        ref = :erlang.monitor(:process, trace.session)

        ended? =
          try do
            subscribe(trace)
            status_ended?(trace)
          rescue
            ArgumentError -> true
          end

        {ended?, ref}
      end,
      fn
        # ended: what subscribing delivered is in the mailbox already (a trace opened
        # from a file sends its events, then its status, before it answers)
        {true, ref} ->
          receive do
            {:kino_trace, ^id, {:events, events}} -> {events, {true, ref}}
            {:kino_trace, ^id, {:status, _}} -> {:halt, {true, ref}}
          after
            0 -> {:halt, {true, ref}}
          end

        {false, ref} ->
          receive do
            {:kino_trace, ^id, {:events, events}} ->
              {events, {false, ref}}

            {:kino_trace, ^id, {:status, status}} when status in [:running, :paused] ->
              {[], {false, ref}}

            {:kino_trace, ^id, {:status, _ended}} ->
              {:halt, {true, ref}}

            {:DOWN, ^ref, :process, _, _} ->
              {:halt, {true, ref}}
          end
      end,
      fn {_, ref} ->
        :erlang.demonitor(ref, [:flush])
        # The trace may have ended: then there is nothing to unsubscribe from.
        try do
          unsubscribe(trace)
        rescue
          ArgumentError -> :ok
        catch
          :exit, _ -> :ok
        end
      end
    )
  end

  defp status_ended?(trace), do: info(trace).status not in [:running, :paused]

  @doc """
  The trace's status and counters: `:accepted`, `:delivered`, `:queued`, `:dropped` by
  reason (`:rate`, `:queue_full`, `:max_events`, `:closed`, `:no_memory` when the tracer
  could not allocate), `:rate` (events per second
  over the last second), `:patterns`, `:status`, and `:stack_guarded`: processes whose
  returns are no longer traced because their stack kept growing (its stack guard).

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> Enum.sum([1])
      1
      iex> Kino.Trace.flush(trace)
      :ok
      iex> info = Kino.Trace.info(trace)
      iex> {info.status, info.accepted, info.delivered, info.patterns}
      {:running, 2, 2, ["Enum.sum/1"]}
  """
  @spec info(t()) :: info()
  def info(%__MODULE__{} = trace), do: Client.info(trace)

  @doc """
  Replaces the patterns of a running trace. Good entries apply, bad ones are reported:
  returns `{input, :ok | {:ok, warnings} | {:error, message}}` per entry.

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> Kino.Trace.set_patterns(trace, ["Enum.map/2", "Enum.mpa/2"])
      [{"Enum.map/2", :ok}, {"Enum.mpa/2", {:error, "Enum.mpa/2 is not a function; did you mean Enum.map/2?"}}]
      iex> Kino.Trace.patterns(trace)
      ["Enum.map/2"]
  """
  @spec set_patterns(t(), term()) :: [{term(), pattern_result()}]
  def set_patterns(%__MODULE__{} = trace, patterns), do: Client.set_patterns(trace, patterns)

  @doc """
  The trace's current patterns, as text.

      iex> trace = Kino.Trace.calls([&Enum.sum/1, {Enum, :map, 2}], pids: self())
      iex> Kino.Trace.patterns(trace)
      ["Enum.sum/1", "Enum.map/2"]
  """
  @spec patterns(t()) :: [String.t()]
  def patterns(%__MODULE__{} = trace), do: info(trace).patterns

  @doc """
  Completes a pattern line as typed so far: modules, functions with their arities, and
  the arities of a function.

      iex> Kino.Trace.complete(":ets.insert_n")
      %{prefix: "insert_n", items: [%{label: "insert_new/2", insert: "insert_new/2", kind: :function, detail: ":ets.insert_new/2"}]}
  """
  @spec complete(String.t(), keyword()) :: KinoTrace.Complete.result()
  def complete(text, opts \\ []), do: Front.run(fn -> KinoTrace.Complete.complete(text, opts) end)

  @doc """
  Pauses tracing: nothing is recorded until `resume/1`.

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> Kino.Trace.pause(trace)
      :ok
      iex> Enum.sum([1])
      1
      iex> Kino.Trace.flush(trace)
      :ok
      iex> {Kino.Trace.info(trace).status, Kino.Trace.events(trace)}
      {:paused, []}
  """
  @spec pause(t()) :: :ok
  def pause(%__MODULE__{} = trace), do: Client.pause(trace)

  @doc """
  Resumes a paused trace.

      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self(), return: false)
      iex> Kino.Trace.pause(trace)
      :ok
      iex> Kino.Trace.resume(trace)
      :ok
      iex> Enum.sum([2])
      2
      iex> Kino.Trace.flush(trace)
      :ok
      iex> trace |> Kino.Trace.events() |> Enum.map(& &1.args)
      [[[2]]]
  """
  @spec resume(t()) :: :ok
  def resume(%__MODULE__{} = trace), do: Client.resume(trace)

  @doc """
  Writes the trace's events and info to a trace file at `path` (replacing it), which
  `open/2` opens here or on any other node. Takes a trace (its last events, as many as
  its `:history` keeps; the trace goes on) or a `Kino.Trace.Capture`. Returns `:ok`;
  raises `File.Error` when the file cannot be written. The "Trace files" guide has the
  format.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> path = Path.join(System.tmp_dir!(), "kino_trace_doc_#{System.unique_integer([:positive])}.ktrace")
      iex> Kino.Trace.save(capture, path)
      :ok
      iex> trace = Kino.Trace.open(path)
      iex> File.rm!(path)
      :ok
      iex> trace |> Kino.Trace.events() |> Enum.map(&{&1.kind, &1.args, &1.return})
      [{:call, [[1, 2]], nil}, {:return, nil, 3}]
  """
  @spec save(t() | Kino.Trace.Capture.t(), Path.t()) :: :ok
  def save(trace_or_capture, path) do
    path = IO.chardata_to_string(path)

    Front.run(fn ->
      {info, events} = contents(trace_or_capture)

      case KinoTrace.File.Format.write(path, info, events) do
        :ok ->
          :ok

        {:error, reason} ->
          raise File.Error, reason: reason, action: "write trace file", path: path
      end
    end)
  end

  # (a trace's whole history: at most its :history events)
  defp contents(%__MODULE__{} = trace), do: {Client.info(trace), Client.events(trace, 0xFFFFFFFF)}

  defp contents(%Kino.Trace.Capture{} = capture),
    do:
      {Map.merge(capture.info, %{patterns: capture.patterns, dropped: capture.dropped}),
       capture.events}

  @doc """
  Opens the trace file at `path` (`save/2`) and returns a trace that serves its events:
  `events/2`, `stream/1`, `info/1`, `print/2`, `to_mermaid/2`, `mermaid/2`, the widget
  and `Kino.Trace.Assertions` take it as they take a live trace, but it traces nothing
  (its status is `:stopped`). The calling process owns it: it ends when its owner
  exits, or on `stop/1`.

  `info/1` tells what the trace was when saved, with `:file`: the `:path`, the `:events`
  read, `:complete` (the file has its end frame) and `:torn_bytes` (a file cut short
  opens: its incomplete last frame is left out and counted here).

  A file is untrusted input: opening it never creates an atom (an atom this node does
  not know stays its name, which inspects as the atom), never makes a fun or runs its
  code (funs, and the pids of nodes this node does not know, come back as
  `Kino.Trace.Foreign`, which inspects as they did), and stops at `max_events:` events (default 1_000_000) and
  `max_bytes:` bytes decompressed (default 64 MB). A file it cannot open raises
  `Kino.Trace.FileError`, naming the file and the byte offset of the fault.

  `open({node, path})` opens a file on another (connected) node, such as the files the
  `:to` option of a trace of that node (`nodes:`) writes there, which stay there: its
  bytes are fetched over the distribution (with OTP's `:file` alone; that node needs
  nothing of kino_trace), only when the file is no larger than `max_bytes:`, then
  opened here with the same rules. `info/1`'s `:file` has `:fetched_from`, the node;
  an error names the node too.

      iex> Kino.Trace.open("no/such.ktrace")
      ** (Kino.Trace.FileError) cannot open the trace file no/such.ktrace: no such file or directory
  """
  @spec open(Path.t() | {node(), Path.t()}, keyword()) :: t()
  def open(path, opts \\ [])

  def open({node, path}, opts) when is_atom(node) do
    path = IO.chardata_to_string(path)
    if node == node(), do: open(path, opts), else: open_source({node, path}, path, opts)
  end

  def open(path, opts) do
    path = IO.chardata_to_string(path)
    open_source(path, path, opts)
  end

  defp open_source(source, path, opts) do
    schema =
      for {key, default} <- KinoTrace.File.Format.default_caps(),
          do: {key, {default, KinoTrace.Options.pos_integer()}}

    caps = KinoTrace.Options.validate!(opts, schema)
    owner = self()

    Front.run(fn ->
      case KinoTrace.Replay.start(owner, {:file, source, caps}) do
        {:ok, pid, id} ->
          %__MODULE__{id: id, session: pid, node: node()}

        {:error, %Kino.Trace.FileError{} = error} ->
          raise error

        {:error, reason} ->
          raise RuntimeError, "kino_trace could not open #{path}: #{inspect(reason)}"
      end
    end)
  end

  @doc """
  Prints the trace's events to the console as they arrive (see `Kino.Trace.Printer`
  for the options) and returns the trace.

      iex> {:ok, device} = StringIO.open("")
      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self()) |> Kino.Trace.print(device: device, colors: false)
      iex> Kino.Trace.info(trace).subscribers
      1
      iex> Kino.Trace.stop(trace)
      :ok
      iex> Stream.repeatedly(fn -> StringIO.contents(device) end) |> Enum.find(&(elem(&1, 1) != "")) |> elem(1)
      "-- trace stopped --\\n"
  """
  @spec print(t(), keyword()) :: t()
  def print(%__MODULE__{} = trace, opts \\ []) do
    Kino.Trace.Printer.attach(trace, opts)
    trace
  end
end
