defmodule Kino.Trace.Event do
  @moduledoc """
  One traced event, decoded from the native tracer.

  Every front end (the Livebook widget, the console printer, the ExUnit assertions and
  `Kino.Trace.stream/1`) receives these structs.

  Fields:

    * `:id` - a positive integer, unique and increasing within one trace
    * `:kind` - `:call`, `:return`, `:exception`, `:return_to`, or (for message and process
      traces) `:send`, `:send_to_non_existing`, `:receive`, `:timeout` (a `receive ...
      after` that timed out, traced with `timeouts: true`), `:spawn`, `:spawned`,
      `:exit`, `:link`, `:unlink`, `:getting_linked`, `:getting_unlinked`,
      `:register`, `:unregister`
    * `:node` - the node the traced process runs on
    * `:pid` - the traced process, and `:name` its registered name (or `nil`)
    * `:module`, `:function`, `:arity` - the MFA, for call-related kinds (`nil` otherwise)
    * `:args` - the call's arguments (`:call` only), a list
    * `:return` - the return value (`:return` only)
    * `:exception` - `{class, reason}` (`:exception` only)
    * `:caller` - `{m, f, a}` of the caller when the trace asked for it (`caller: true`),
      `{m, f, a, {file, line}}` with where the call was made (`caller: :line`; `{m, f, a}`
      when the caller's code has no line information), else `nil`
    * `:data` - the payload of message and process events (the message, the exit reason,
      the linked pid, the registered name, ...), and `:peer` the other process (the
      receiver of a send, the spawned process, the linked process), else `nil`
    * `:time` - system time in microseconds (as `System.os_time(:microsecond)`)
    * `:monotonic` - monotonic time in nanoseconds, for ordering and durations
    * `:scheduler` - the scheduler that ran the traced process (0 when unknown)
    * `:depth` - call depth within the process at this event (0 for the outermost call)
    * `:call_id` - for `:return` and `:exception`, the `:id` of the matching `:call` (or `nil`)
    * `:duration` - for `:return` and `:exception`, nanoseconds since the matching call
    * `:lost` - `true` when events of this process may have been dropped (a queue or
      rate limit) just before this one: its open calls were forgotten, so its depth
      restarts at 0 and earlier calls stay unpaired

  Terms that were too large to copy whole are cut: the cut parts are
  `Kino.Trace.Cut` structs, which `inspect/2` shows as `...`.

  ## Examples

      iex> event = %Kino.Trace.Event{kind: :call, module: Enum, function: :map, arity: 2, args: [[1, 2], :f]}
      iex> Kino.Trace.Event.mfa(event)
      {Enum, :map, 2}

  ## Inspecting

  An event inspects as its console line (see `Kino.Trace.Printer`): what happened, then
  the process. Call-related kinds start with the kind.

      iex> pid = :c.pid(0, 210, 0)
      iex> %Kino.Trace.Event{kind: :call, pid: pid, module: MyApp.Repo, function: :get,
      ...>   arity: 2, args: [:users, 42]}
      #Kino.Trace.Event<call MyApp.Repo.get(:users, 42) #PID<0.210.0>>
      iex> %Kino.Trace.Event{kind: :return, pid: pid, name: :repo, module: MyApp.Repo,
      ...>   function: :get, arity: 2, return: {:ok, %{id: 42}}, duration: 38_400}
      #Kino.Trace.Event<return -> {:ok, %{id: 42}} (38 µs)  MyApp.Repo.get/2 #PID<0.210.0> (:repo)>
      iex> %Kino.Trace.Event{kind: :exception, pid: pid, module: MyApp.Repo, function: :get,
      ...>   arity: 2, exception: {:error, %ArgumentError{message: "negative id"}}, duration: 1_250_000}
      #Kino.Trace.Event<exception !! ** (ArgumentError) negative id (1.3 ms)  MyApp.Repo.get/2 #PID<0.210.0>>
      iex> %Kino.Trace.Event{kind: :return_to, pid: pid, module: MyApp, function: :run, arity: 0}
      #Kino.Trace.Event<return_to <- returned to MyApp.run/0 #PID<0.210.0>>

  Message and process events start with what happened:

      iex> pid = :c.pid(0, 210, 0)
      iex> peer = :c.pid(0, 211, 0)
      iex> %Kino.Trace.Event{kind: :send, pid: pid, data: {:fetch, 42}, peer: peer}
      #Kino.Trace.Event<send {:fetch, 42} to #PID<0.211.0> #PID<0.210.0>>
      iex> %Kino.Trace.Event{kind: :send_to_non_existing, pid: pid, data: :hi, peer: peer}
      #Kino.Trace.Event<send :hi to #PID<0.211.0> (no such process) #PID<0.210.0>>
      iex> %Kino.Trace.Event{kind: :receive, pid: pid, data: {:ok, 42}}
      #Kino.Trace.Event<receive {:ok, 42} #PID<0.210.0>>
      iex> %Kino.Trace.Event{kind: :spawn, pid: pid, peer: peer, data: {MyApp, :work, [1]}}
      #Kino.Trace.Event<spawn #PID<0.211.0> as MyApp.work(1) #PID<0.210.0>>
      iex> %Kino.Trace.Event{kind: :spawned, pid: peer, peer: pid, data: {MyApp, :work, [1]}}
      #Kino.Trace.Event<spawned by #PID<0.210.0> as MyApp.work(1) #PID<0.211.0>>
      iex> %Kino.Trace.Event{kind: :exit, pid: pid, data: {:shutdown, :done}}
      #Kino.Trace.Event<exit {:shutdown, :done} #PID<0.210.0>>
      iex> %Kino.Trace.Event{kind: :link, pid: pid, peer: peer}
      #Kino.Trace.Event<link #PID<0.211.0> #PID<0.210.0>>
      iex> %Kino.Trace.Event{kind: :getting_unlinked, pid: pid, peer: peer}
      #Kino.Trace.Event<getting_unlinked #PID<0.211.0> #PID<0.210.0>>
      iex> %Kino.Trace.Event{kind: :register, pid: pid, data: :my_server}
      #Kino.Trace.Event<register :my_server #PID<0.210.0>>

  `inspect/2`'s `:limit` and `:printable_limit` apply to the terms, and
  `structs: false` shows every field (as ExUnit's diffs do when two events inspect the
  same but differ in a field not shown, such as `:time`):

      iex> event = %Kino.Trace.Event{kind: :call, pid: :c.pid(0, 210, 0), module: Enum,
      ...>   function: :sum, arity: 1, args: [[1, 2, 3, 4]]}
      iex> inspect(event, limit: 2)
      "#Kino.Trace.Event<call Enum.sum([1, 2, ...]) #PID<0.210.0>>"
      iex> inspect(event, structs: false) =~ "kind: :call"
      true
  """

  @type kind ::
          :call
          | :return
          | :exception
          | :return_to
          | :send
          | :send_to_non_existing
          | :receive
          | :timeout
          | :spawn
          | :spawned
          | :exit
          | :link
          | :unlink
          | :getting_linked
          | :getting_unlinked
          | :register
          | :unregister

  @typedoc "The function that made a call, and with `caller: :line` the file and line of the call."
  @type caller ::
          {module(), atom(), arity()} | {module(), atom(), arity(), {String.t(), pos_integer()}}

  @type t :: %__MODULE__{
          id: pos_integer() | nil,
          kind: kind(),
          node: node() | nil,
          pid: pid() | port() | nil,
          name: atom() | nil,
          module: module() | nil,
          function: atom() | nil,
          arity: non_neg_integer() | nil,
          args: list() | nil,
          return: term(),
          exception: {atom(), term()} | nil,
          caller: caller() | nil,
          data: term(),
          peer: pid() | port() | nil,
          time: integer() | nil,
          monotonic: integer() | nil,
          scheduler: non_neg_integer(),
          depth: non_neg_integer(),
          call_id: pos_integer() | nil,
          duration: non_neg_integer() | nil,
          lost: boolean()
        }

  defstruct [
    :id,
    :kind,
    :node,
    :pid,
    :name,
    :module,
    :function,
    :arity,
    :args,
    :return,
    :exception,
    :caller,
    :data,
    :peer,
    :time,
    :monotonic,
    scheduler: 0,
    depth: 0,
    call_id: nil,
    duration: nil,
    lost: false
  ]

  @kinds [
    :call,
    :return,
    :exception,
    :return_to,
    :send,
    :send_to_non_existing,
    :receive,
    :timeout,
    :spawn,
    :spawned,
    :exit,
    :link,
    :unlink,
    :getting_linked,
    :getting_unlinked,
    :register,
    :unregister
  ]

  @doc """
  Every event kind, as in `t:kind/0`.

      iex> :call in Kino.Trace.Event.kinds()
      true
  """
  @spec kinds() :: [kind()]
  def kinds, do: @kinds

  @doc """
  The event's `{module, function, arity}`, or `nil` for events without one.

      iex> Kino.Trace.Event.mfa(%Kino.Trace.Event{kind: :call, module: Enum, function: :sum, arity: 1})
      {Enum, :sum, 1}
      iex> Kino.Trace.Event.mfa(%Kino.Trace.Event{kind: :send, data: :hello})
      nil
  """
  @spec mfa(t()) :: {module(), atom(), non_neg_integer()} | nil
  def mfa(%__MODULE__{module: nil}), do: nil
  def mfa(%__MODULE__{module: m, function: f, arity: a}), do: {m, f, a}
end

# Its Inspect implementation is in event/inspect.ex.
