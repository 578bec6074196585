defmodule KinoTrace.Assertions.Call do
  @moduledoc false
  # One traced function call with its outcome, as the assertions see it.
  #
  # `from_trace/1` pairs every `:call` event of a capture with its `:return` or
  # `:exception` event (through the event's `:call_id`):
  #
  #   * `outcome: {:returned, value}` - the call returned `value`
  #   * `outcome: {:raised, class, reason}` - the call ended with an exception, a throw or
  #     an exit (`reason` is the raw reason, as in `catch class, reason`)
  #   * `outcome: :unfinished` - no return was traced (the call was still running when the
  #     capture ended, or returns were not traced)

  alias Kino.Trace.Event

  @enforce_keys [:id, :module, :function, :arity, :args]
  defstruct [:id, :pid, :module, :function, :arity, :args, :time, outcome: :unfinished]

  @type outcome :: {:returned, term()} | {:raised, :error | :exit | :throw, term()} | :unfinished

  @type t :: %__MODULE__{
          id: pos_integer() | nil,
          pid: pid() | nil,
          module: module(),
          function: atom(),
          arity: non_neg_integer(),
          args: list(),
          time: integer() | nil,
          outcome: outcome()
        }

  @typedoc """
  What the assertions accept as a trace: a capture (any struct with `:events`), a list of
  events, or a `Kino.Trace` (which `KinoTrace.Assertions.Checks` reads as a capture of its
  events before anything here sees it).
  """
  @type trace ::
          %{required(:events) => [Event.t()], optional(atom()) => term()}
          | [Event.t()]
          | Kino.Trace.t()

  @doc """
  The calls in `trace`, in the order they were made, each with its outcome.

  Raises `ArgumentError` when `trace` is neither a capture nor a list of events.

  ## Examples

      iex> alias Kino.Trace.Event
      iex> events = [
      ...>   %Event{id: 1, kind: :call, module: Map, function: :fetch, arity: 2, args: [%{}, :a]},
      ...>   %Event{id: 2, kind: :return, module: Map, function: :fetch, arity: 2, return: :error, call_id: 1}
      ...> ]
      iex> [call] = KinoTrace.Assertions.Call.from_trace(events)
      iex> {call.function, call.args, call.outcome}
      {:fetch, [%{}, :a], {:returned, :error}}
      iex> KinoTrace.Assertions.Call.to_code(call)
      "Map.fetch(%{}, :a)"
  """
  @spec from_trace(trace()) :: [t()]
  def from_trace(%{events: events}) when is_list(events), do: from_events(events)
  def from_trace(events) when is_list(events), do: from_events(events)

  def from_trace(other) do
    raise ArgumentError,
          "expected a trace captured by Kino.Trace.capture/3 (or a list of Kino.Trace.Event), got: " <>
            inspect(other, limit: 5)
  end

  defp from_events(events) do
    ends =
      for %Event{kind: kind, call_id: call_id} = event <- events,
          kind in [:return, :exception] and call_id != nil,
          into: %{},
          do: {call_id, event}

    for %Event{kind: :call} = event <- events do
      %__MODULE__{
        id: event.id,
        pid: event.pid,
        module: event.module,
        function: event.function,
        arity: event.arity || length(event.args || []),
        args: event.args || [],
        time: event.time,
        outcome: outcome(Map.get(ends, event.id))
      }
    end
  end

  defp outcome(nil), do: :unfinished
  defp outcome(%Event{kind: :return, return: value}), do: {:returned, value}
  defp outcome(%Event{kind: :exception, exception: {class, reason}}), do: {:raised, class, reason}
  defp outcome(%Event{kind: :exception}), do: {:raised, :error, :unknown}

  @doc "The call's `{module, function, arity}`."
  @spec mfa(t()) :: mfa()
  def mfa(%__MODULE__{module: m, function: f, arity: a}), do: {m, f, a}

  @doc """
  The call written as Elixir code, e.g. `MyApp.Cache.fetch(:users, 42)`.

  Parts of the arguments that were too large to trace show as `...`.
  """
  @spec to_code(t()) :: String.t()
  def to_code(%__MODULE__{module: module, function: function, args: args}) do
    KinoTrace.Render.call(module, function, args)
  end

  @doc """
  The call's outcome as a short phrase: `returned {:ok, 1}`, `raised ArgumentError: bad`,
  `threw :oops`, `exited :normal` or `did not return`.
  """
  @spec outcome_to_string(t()) :: String.t()
  def outcome_to_string(%__MODULE__{outcome: outcome}) do
    alias KinoTrace.Render

    case outcome do
      {:returned, value} ->
        "returned " <> Render.code(value)

      {:raised, :error, reason} ->
        exception = normalize(reason)

        "raised " <>
          if is_exception(exception),
            do: inspect(exception.__struct__) <> ": " <> safe_message(exception),
            else: Render.code(reason)

      {:raised, :throw, reason} ->
        "threw " <> Render.code(reason)

      {:raised, :exit, reason} ->
        "exited " <> Render.code(reason)

      :unfinished ->
        "did not return (no return was traced)"
    end
  end

  @doc """
  The exception an `:error` reason stands for (`:badarg` becomes `%ArgumentError{}`), or
  the reason itself when it is not one.
  """
  @spec normalize(term()) :: term()
  def normalize(reason) do
    Exception.normalize(:error, reason, [])
  rescue
    _ -> reason
  end

  defp safe_message(exception) do
    Exception.message(exception)
  rescue
    _ -> inspect(exception)
  end
end
