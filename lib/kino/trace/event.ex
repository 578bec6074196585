defmodule Kino.Trace.Event do
  @moduledoc """
  One traced event, decoded from the native tracer.

  Every front end (the Livebook widget, the console printer, the ExUnit assertions and
  `Kino.Trace.stream/1`) receives these structs.

  Fields:

    * `:id` - a positive integer, unique and increasing within one trace
    * `:kind` - `:call`, `:return`, `:exception`, `:return_to`, or (for message and process
      traces) `:send`, `:send_to_non_existing`, `:receive`, `:spawn`, `:spawned`,
      `:exit`, `:link`, `:unlink`, `:getting_linked`, `:getting_unlinked`,
      `:register`, `:unregister`
    * `:node` - the node the traced process runs on
    * `:pid` - the traced process, and `:name` its registered name (or `nil`)
    * `:module`, `:function`, `:arity` - the MFA, for call-related kinds (`nil` otherwise)
    * `:args` - the call's arguments (`:call` only), a list
    * `:return` - the return value (`:return` only)
    * `:exception` - `{class, reason}` (`:exception` only)
    * `:caller` - `{m, f, a}` of the caller when the trace asked for it, else `nil`
    * `:data` - the payload of message and process events (the message, the exit reason,
      the linked pid, the registered name, ...), and `:peer` the other process (the
      receiver of a send, the spawned process, the linked process), else `nil`
    * `:time` - system time in microseconds (as `System.os_time(:microsecond)`)
    * `:monotonic` - monotonic time in nanoseconds, for ordering and durations
    * `:scheduler` - the scheduler that ran the traced process (0 when unknown)
    * `:depth` - call depth within the process at this event (0 for the outermost call)
    * `:call_id` - for `:return` and `:exception`, the `:id` of the matching `:call` (or `nil`)
    * `:duration` - for `:return` and `:exception`, nanoseconds since the matching call

  Terms that were too large to copy whole are cut: the cut parts are
  `Kino.Trace.Cut` structs, which `inspect/2` shows as `...`.

  ## Examples

      iex> event = %Kino.Trace.Event{kind: :call, module: Enum, function: :map, arity: 2, args: [[1, 2], :f]}
      iex> Kino.Trace.Event.mfa(event)
      {Enum, :map, 2}
  """

  @type kind ::
          :call
          | :return
          | :exception
          | :return_to
          | :send
          | :send_to_non_existing
          | :receive
          | :spawn
          | :spawned
          | :exit
          | :link
          | :unlink
          | :getting_linked
          | :getting_unlinked
          | :register
          | :unregister

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
          caller: {module(), atom(), non_neg_integer()} | nil,
          data: term(),
          peer: pid() | port() | nil,
          time: integer() | nil,
          monotonic: integer() | nil,
          scheduler: non_neg_integer(),
          depth: non_neg_integer(),
          call_id: pos_integer() | nil,
          duration: non_neg_integer() | nil
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
    duration: nil
  ]

  @doc "The event's `{module, function, arity}`, or `nil` for events without one."
  @spec mfa(t()) :: {module(), atom(), non_neg_integer()} | nil
  def mfa(%__MODULE__{module: nil}), do: nil
  def mfa(%__MODULE__{module: m, function: f, arity: a}), do: {m, f, a}
end
