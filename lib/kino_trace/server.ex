defmodule KinoTrace.Server do
  @moduledoc false
  # Something that answers trace requests: the process behind a `Kino.Trace`. Two
  # implement it: `KinoTrace.Session` (one trace on one node) and
  # `KinoTrace.Remote.Coordinator` (one trace over several nodes, itself a client of
  # one session per node). Requests are GenServer calls; `KinoTrace.Client` is the one
  # module that makes them (their shapes, timeouts and errors), `KinoTrace.Launcher`
  # the one that starts a server for a plan.
  #
  # What every server shares besides the requests lives here too: the ids of traces the
  # native tracer does not number, the tick of its counters and the cap on what one
  # request drains. How it sends its subscribers their events, and when it holds back,
  # is `KinoTrace.Server.Delivery`.

  alias Kino.Trace.Plan

  @typedoc "What a subscriber's messages carry: `{:kino_trace, tag, notice}`."
  @type tag :: term()

  @typedoc """
  Requests every server answers:

    * `:await_setup` - `{:ok, id}` once it traces, or `{:error, exception}` (then it
      ends); sent by `KinoTrace.Starter` as it starts one;
    * `{:subscribe, pid}`, `{:unsubscribe, pid}` - `:ok`; a subscriber gets
      `t:notice/0`s and is not traced while subscribed;
    * `{:exclude, pid}` - `:ok`; `pid` is no longer traced;
    * `{:events, n}` - the last `n` events of the history, after delivering (a bounded
      part of) what is queued;
    * `:latency` - the latency distributions since the start
      (`KinoTrace.Latency`), after delivering as `{:events, n}` does; `nil`
      without `latency: true`;
    * `:slow_calls` - the slow calls kept (`KinoTrace.Latency.SlowCalls.report/1`), after
      delivering as `{:events, n}` does; `nil` without `slowest:` or `slower_than:`;
    * `:latency_processes` - the distributions per function and process
      (`KinoTrace.Latency.Kept.latency_processes/1`), likewise;
    * `:slow_counts` - how many slow calls it keeps per function
      (`KinoTrace.Latency.Kept.slow_counts/1`), likewise;
    * `{:sync, cap}` - `:ok` once what is queued (at most `cap` events) is in the
      subscribers' mailboxes;
    * `:info` - `t:Kino.Trace.info/0`;
    * `:tracer` - what this node's OTP session names as its tracer, `nil` if none;
    * `:workers` - node => the pid of its agent's worker (`nil` for this node), for
      each node it traces: where `KinoTrace.File.Writer` writes that node's files;
    * `{:set_patterns, inputs}` - a result per input;
    * `:pause`, `:resume`, `:stop` - `:ok`;
    * `:internals` - what tests and debugging read of its state, a map: a session's
      `:plan`, `:held` (pids it does not trace for its subscribers), `:resource` (the
      native session), `:otp_session` and `:worker` (another node's agent worker, else
      `nil`), `:slow_open_calls` (the open calls kept for slow calls, else `nil`); a coordinator's `:plan`, `:nodes` (node => its session's pid),
      `:waiting` (nodes asked for info that have not answered), `:held_batches` and
      `:held_events` (held for backlogged subscribers).
  """
  @type request ::
          :await_setup
          | {:subscribe, pid()}
          | {:unsubscribe, pid()}
          | {:exclude, pid()}
          | {:events, pos_integer()}
          | :latency
          | :latency_processes
          | :slow_calls
          | :slow_counts
          | {:sync, non_neg_integer() | :infinity}
          | :info
          | :tracer
          | :workers
          | {:set_patterns, term()}
          | :pause
          | :resume
          | :stop
          | :internals

  @typedoc """
  Requests a coordinator makes of the session of each of its nodes (a session answers
  them, a coordinator does not): subscribing with its own `tag`, and holding (not
  tracing) or releasing one of its subscribers on that subscriber's node.
  """
  @type node_request :: {:subscribe, pid(), tag()} | {:hold, pid()} | {:release, pid()}

  @typedoc "What subscribers receive, as `{:kino_trace, tag, notice}`."
  @type notice ::
          {:events, [Kino.Trace.Event.t()]}
          | {:status, Kino.Trace.status()}
          | {:node_down, node(), term()}

  @doc "Starts a server that runs `plan`, owned by `owner` (it ends when `owner` does)."
  @callback start(owner :: pid(), plan :: Plan.t()) ::
              {:ok, pid(), pos_integer()} | {:error, term()}

  @doc "Answers one request (the server's `handle_call/3` hands every call to it)."
  @callback handle_request(request() | node_request(), GenServer.from(), state) ::
              {:reply, term(), state} | {:stop, term(), term(), state} | {:stop, term(), state}
            when state: term()

  # Trace ids: the native tracer numbers its own sessions from 1; every other trace (a
  # fallback's, another node's, a coordinator's) takes one from here, far above them, and
  # unique on this node, so no two traces share an id (KinoTrace.Client.Final keeps infos by id).
  @id_base Bitwise.bsl(1, 40)

  @doc "A trace id for a trace the native tracer does not number."
  @spec new_id() :: pos_integer()
  def new_id, do: @id_base + System.unique_integer([:positive, :monotonic])

  # How often a server samples its counters (the rate of `info/1`, a node's liveness).
  @tick_ms 1_000

  @doc "Milliseconds between a server's ticks."
  @spec tick_ms() :: pos_integer()
  def tick_ms, do: @tick_ms

  # At most this many queued events are delivered to answer one request for events
  # (events/2): under a flood the queue never empties, and a request must not wait for it.
  @max_sync_drain 10_000

  @doc "The most events one request for events delivers before it answers (per node)."
  @spec max_sync_drain() :: pos_integer()
  def max_sync_drain, do: @max_sync_drain

  @doc """
  Runs `fun` at high priority and returns what it returns: bounded work of kino_trace's
  that someone waits for (a trace starting or ending, a request). Each `:trace` call
  waits for the VM (code barriers, the code modification permission) and is then
  resumed: at normal priority it waits behind every runnable process each time, which
  the processes it traces may keep busy (issue 36 item 2).
  """
  @spec urgent((-> result)) :: result when result: term()
  def urgent(fun) do
    priority = Process.flag(:priority, :high)

    try do
      fun.()
    after
      Process.flag(:priority, priority)
    end
  end
end
