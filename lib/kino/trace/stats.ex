defmodule Kino.Trace.Stats do
  @moduledoc """
  Live statistics per function: call count, time and memory, from the VM's own counters.

  Per-call tracing sends a message for every call; for hot functions that costs a lot.
  A stats session instead turns on the VM's call counters (`call_time`, `call_memory`,
  see `:trace.function/4`) in its own `:trace` session and reads them when asked. No
  message is sent per call; the cost is a counter update at each call and return.

      stats = Kino.Trace.Stats.start(["MyApp.Repo", "Jason.encode!/1"])
      # ... run the workload ...
      Kino.Trace.Stats.print(stats)
      # 2 functions, 2000 calls in 3.1 s
      # FUNCTION               CALLS  TIME µs  PER CALL   %TIME  MEMORY words  PER CALL
      # MyApp.Repo.get/2        1000    81234     81.23   92.11         40000     40.00
      # Jason.encode!/1         1000     6962      6.96    7.89         90000     90.00
      # TOTAL                   2000    88196            100.00        130000

      snapshot = Kino.Trace.Stats.snapshot(stats)
      [top | _] = snapshot.rows      # sorted by total time, highest first
      top.mfa                        #=> {MyApp.Repo, :get, 2}
      top.processes                  # per-process calls, time and memory

      Kino.Trace.Stats.reset(stats)  # counters back to zero
      Kino.Trace.Stats.stop(stats)

  ## What is measured

    * calls - calls made in the traced processes (never in kino_trace's own: its
      sessions, printers and widgets are not counted)
    * time - microseconds the function ran while its process was scheduled in. Waiting
      (`receive`, `Process.sleep/1`, a full run queue) is not counted; neither is time
      spent in other functions of the same stats session, which have their own rows.
    * memory - words allocated on the process heap by the function, likewise without
      other functions of the session.

  ## Patterns

  The forms of `Kino.Trace.calls/2` (`"Mod"`, `"Mod.fun/2"`, `&Mod.fun/2`, ...), with
  the same pre-flight check. Argument patterns and guards are refused: the counters
  count every call. Functions are those of the code loaded when the session starts; a
  module reloaded later is no longer counted.

  ## Options

    * `:pids` - whose calls: `:all` (default), `:new`, `:existing`, a pid, a name (a
      registered atom, `{:global, name}` or `{:via, module, name}`), or a list of them
    * `:children` - also count in processes they spawn (default `false`)
    * `:time` - measure time (default `true`)
    * `:memory` - measure memory (default `true`)
    * `:latency` - also measure each call's wall time, as a distribution per function
      (default `false`): `p50`, `p99` and `max` columns in the table, `:latency` in each
      `Kino.Trace.Stats.Row` (as `Kino.Trace.latency/2` gives it). The VM's counters keep
      no time per call, so this runs a trace of the same functions with their returns
      (`Kino.Trace.calls/2` with `latency: true`), owned by the stats session: an event
      per call and return, decoded into bounded histograms, nothing kept per call.
      Tail-call loops are traced without returns: their calls are `unknown`.
    * `:local` - include private functions of module patterns (default `true`); every
      call of a counted function is counted, local or remote
    * `:force` - allow counting everything or kino_trace's own modules
    * `:nodes` - where calls are counted: `nil` (default, this node), a node, a list of
      nodes, or `:all` (this node and every connected one), as in `Kino.Trace.calls/2`.
      Another node needs no kino_trace: patterns are checked against its modules and
      names in `:pids` looked up there (errors name the node), and its counters run in
      a session of kino_trace's agent (see the "Other nodes" guide), which leaves nothing there
      once the stats session ends, its owner dies or the connection drops. A function's
      figures are added up over the nodes in one row; its per-process breakdown keeps
      the pids, so `node(pid)` tells where (registered names are shown for this node's
      processes only). Reading or resetting a node's counters is one round trip to
      it, however many functions. A node that goes away is marked `:gone` in
      `info/1` and its figures leave later snapshots.

          stats = Kino.Trace.Stats.start(["MyApp.Repo"], nodes: [node(), :"app@host"])

  The calling process owns the session: when it exits, the session ends. Several stats
  sessions, call traces and other tools can count the same functions side by side.
  """

  alias Kino.Trace.Stats.Snapshot
  alias KinoTrace.Front
  alias KinoTrace.Stats.{Options, Server, Table}

  @enforce_keys [:id, :server]
  defstruct [:id, :server, node: nil]

  @type t :: %__MODULE__{id: pos_integer(), server: pid(), node: node()}

  @doc """
  Starts counting calls of the functions matching `patterns` and returns the session.

  Raises `ArgumentError` for a bad pattern or option before anything is counted. See
  the module documentation for patterns and options.

      iex> stats = Kino.Trace.Stats.start(["Enum.sum/1"], pids: self(), memory: false)
      iex> Enum.sum([1])
      1
      iex> [row] = Kino.Trace.Stats.snapshot(stats).rows
      iex> {row.mfa, row.calls}
      {{Enum, :sum, 1}, 1}
  """
  @spec start(term(), keyword()) :: t()
  def start(patterns, opts \\ []) do
    # (the API's work runs in kino_trace's own processes: see KinoTrace.Front)
    owner = self()
    Front.run(fn -> start(patterns, opts, owner) end)
  end

  defp start(patterns, opts, owner) do
    opts = Options.validate!(opts)
    # Every node's part is built and checked (by the Plan, as a trace's) before anything
    # is counted anywhere; so is the plan of the trace of durations (`latency: true`).
    parts = Kino.Trace.Plan.counters_parts!(patterns, opts)
    latency_plan = Options.latency_plan(patterns, opts)

    case Server.start(owner, elem(hd(parts), 1), parts, opts, latency_plan) do
      {:ok, pid, id} ->
        %__MODULE__{id: id, server: pid, node: node()}

      {:error, {:node, node, message}} ->
        raise RuntimeError,
              "kino_trace could not start a stats session on node #{inspect(node)}: #{message}"

      {:error, reason} ->
        raise RuntimeError, "kino_trace could not start a stats session: #{inspect(reason)}"
    end
  end

  @doc """
  The statistics so far (since the start or the last `reset/1`): one row per function
  called at least once, sorted by total time. See `Kino.Trace.Stats.Snapshot`.

      iex> stats = Kino.Trace.Stats.start(["Enum.sum/1", "Enum.reverse/1"], pids: self())
      iex> Enum.sum([1]) + Enum.sum([2])
      3
      iex> Kino.Trace.Stats.snapshot(stats).rows |> Enum.map(&{&1.mfa, &1.calls})
      [{{Enum, :sum, 1}, 2}]
  """
  @spec snapshot(t()) :: Snapshot.t()
  def snapshot(%__MODULE__{} = stats), do: call(stats, :snapshot)

  @doc """
  Sets every counter back to zero.

      iex> stats = Kino.Trace.Stats.start(["Enum.sum/1"], pids: self())
      iex> Enum.sum([1])
      1
      iex> Kino.Trace.Stats.reset(stats)
      :ok
      iex> Kino.Trace.Stats.snapshot(stats).rows
      []
  """
  @spec reset(t()) :: :ok
  def reset(%__MODULE__{} = stats), do: call(stats, :reset)

  @doc """
  The session's settings: `:patterns` (text), `:functions` (how many are counted, all
  nodes together), `:counters` (the VM counters in use), `:opts`, `:session` (this
  node's trace session, `nil` when this node is not counted) and `:nodes`, per node
  its `:status` (`:running`, `:unresponsive` when it did not answer the last read,
  `:gone`) and its number of `:functions`.

      iex> stats = Kino.Trace.Stats.start(["Enum.sum/1"], pids: self())
      iex> info = Kino.Trace.Stats.info(stats)
      iex> {info.patterns, info.functions}
      {["Enum.sum/1"], 1}
  """
  @spec info(t()) :: map()
  def info(%__MODULE__{} = stats), do: call(stats, :info)

  @doc """
  Stops counting and ends the session: returns `:ok` once its process is gone (a session
  that does not answer in time is ended all the same), also when already stopped.

      iex> stats = Kino.Trace.Stats.start(["Enum.sum/1"], pids: self())
      iex> Kino.Trace.Stats.stop(stats)
      :ok
      iex> Kino.Trace.Stats.stop(stats)
      :ok
  """
  @spec stop(t()) :: :ok
  def stop(%__MODULE__{server: pid}), do: KinoTrace.Client.stop(pid)

  @doc """
  Prints the statistics so far as a table to the group leader, or to `:device`. Takes
  a session or a snapshot. One line per function, highest total time first, then a
  total line; columns for what the session does not measure are left out.

  Options:

    * `:limit` - the most functions shown (default 50); the rest are summarised in one line
    * `:processes` - also show each function's per-process figures (default `false`)
    * `:device` - where to print (default: the group leader)

      iex> stats = Kino.Trace.Stats.start(["Enum.sum/1"], pids: self(), memory: false)
      iex> Enum.sum([1])
      1
      iex> {:ok, device} = StringIO.open("")
      iex> Kino.Trace.Stats.print(stats, device: device)
      :ok
      iex> {_, table} = StringIO.contents(device)
      iex> table |> String.split("\\n") |> hd() |> String.starts_with?("1 function, 1 call in")
      true
  """
  @spec print(t() | Snapshot.t(), keyword()) :: :ok
  def print(stats_or_snapshot, opts \\ [])

  def print(%__MODULE__{} = stats, opts), do: print(snapshot(stats), opts)

  def print(%Snapshot{} = snapshot, opts) do
    # formatted in kino_trace's own process, with the caller's group leader
    Front.run(fn ->
      {device, opts} = Keyword.pop(opts, :device, Process.group_leader())
      IO.puts(device, Table.format(snapshot, opts))
    end)
  end

  defp call(%__MODULE__{server: pid}, request), do: KinoTrace.Client.stats(pid, request)
end
