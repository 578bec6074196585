defmodule KinoTrace.Session.TelemetryTrigger do
  @moduledoc false
  # A recorder's `:telemetry` trigger (`on: [telemetry: names]`, KinoTrace.Plan.Record).
  # A :telemetry event is no trace event: the recorder's process attaches a handler for
  # the names when its recorder is made (`attach/1`), the handler tells it of each event
  # (`{:kino_trace_telemetry, name, pid, time}`, which the session hands to
  # `KinoTrace.Session.Recorder.telemetry/3`), and it detaches when tracing ends
  # (`detach/1`). A handler whose recorder is gone (killed: nothing detached it)
  # detaches itself at its next event. `:telemetry` is an optional dependency: the plan
  # takes the trigger only when it is loaded, so it is only called through apply/3.

  @doc "Attaches the calling process's handler when `on` (the triggers) has `:telemetry`."
  @spec attach(keyword()) :: :ok
  def attach(on) do
    with {:telemetry, names} <- List.keyfind(on, :telemetry, 0) do
      :ok = apply(:telemetry, :attach_many, [id(self()), names, &__MODULE__.handle/4, self()])
    end

    :ok
  end

  @doc "Detaches the calling process's handler when `on` has `:telemetry`."
  @spec detach(keyword()) :: :ok
  def detach(on) do
    if List.keymember?(on, :telemetry, 0), do: apply(:telemetry, :detach, [id(self())])
    :ok
  end

  @doc false
  # The handler, in the process that emitted the event.
  def handle(name, _measurements, _metadata, recorder) do
    if Process.alive?(recorder),
      do: send(recorder, {:kino_trace_telemetry, name, self(), System.os_time(:microsecond)}),
      else: apply(:telemetry, :detach, [id(recorder)])
  end

  defp id(recorder), do: {__MODULE__, recorder}
end
