defmodule KinoTrace.Widget.RecorderPayload do
  @moduledoc false
  # The widget's recorder panel (`Kino.Trace.record/2`), as JSON-able maps. Nothing here
  # needs Kino.
  #
  #   * `panel/2` - the ring (kept of its capacity, in events and bytes; overwritten),
  #     the triggers armed and how often each fired, and the frozen snapshots, newest
  #     first (time, trigger, events, bytes). The controller broadcasts it as
  #     `"recorder"` when it changed or a browser connected (checked once a tick, from
  #     the info it asks anyway).
  #   * `find/2` - the snapshot a browser's `%{"id" => id}` names, as a trace: what
  #     `KinoTrace.Widget.Views` opens in the usual tabs for `"open_snapshot"` (the
  #     controller a trace from `Kino.Trace.open/1` has: a snapshot is a trace value).
  #   * `snapshot_file/2` - the reply to `"get_snapshot_file"` (`%{"id" => id}`): the
  #     snapshot's trace file, the bytes `Kino.Trace.save/2` writes (it writes them),
  #     base64, at most @max_file_bytes (a larger one is an error saying to save it).
  #
  # A snapshot is named by its trace id, checked against the recorder's list (a
  # browser's id is never trusted to name anything else).

  alias KinoTrace.Widget.Payload

  # the largest trace file a browser is sent to download
  @max_file_bytes 32 * 1024 * 1024

  @typedoc "The panel."
  @type panel :: %{
          kept: non_neg_integer(),
          capacity: pos_integer(),
          kept_bytes: non_neg_integer(),
          capacity_bytes: pos_integer(),
          overwritten: non_neg_integer(),
          triggers: [%{trigger: String.t(), text: String.t(), fired: non_neg_integer()}],
          recording_after: boolean(),
          snapshots_taken: non_neg_integer(),
          snapshots_dropped: non_neg_integer(),
          snapshots: [snapshot()]
        }

  @typedoc "One frozen snapshot."
  @type snapshot :: %{
          id: pos_integer(),
          trigger: String.t(),
          taken_at: integer(),
          trigger_time: integer() | nil,
          pid: String.t() | nil,
          events: non_neg_integer(),
          bytes: non_neg_integer()
        }

  @doc """
  The panel of a recorder whose `info/1` is `info`, with its snapshots (`snapshots/1`'s
  list); `nil` for a trace that is not a recorder.

      iex> KinoTrace.Widget.RecorderPayload.panel(%{status: :running}, [])
      nil
  """
  @spec panel(map(), [map()]) :: panel() | nil
  def panel(%{recorder: rec}, snapshots) when is_map(rec) do
    %{
      kept: rec.kept,
      capacity: rec.events,
      kept_bytes: rec.kept_bytes,
      capacity_bytes: rec.bytes,
      overwritten: rec.overwritten,
      triggers: Enum.map(rec.triggers, &trigger(&1, rec.fired)),
      recording_after: rec.recording_after,
      snapshots_taken: rec.snapshots_taken,
      snapshots_dropped: rec.snapshots_dropped,
      snapshots: Enum.map(snapshots, &snapshot/1)
    }
  end

  def panel(_info, _snapshots), do: nil

  @doc """
  The panel of `trace` now (its info and snapshots asked of it), `nil` when it is not a
  recorder or has ended.
  """
  @spec of_trace(KinoTrace.Client.trace()) :: panel() | nil
  def of_trace(trace) do
    case KinoTrace.Client.try_info(trace) do
      {:ok, %{recorder: _} = info} -> with_snapshots(trace, info)
      _ -> nil
    end
  catch
    # (its server did not answer in time)
    :exit, _ -> nil
  end

  # the panel of a recorder whose info is `info`: its snapshots asked of it
  defp with_snapshots(trace, info) do
    case KinoTrace.Client.request(trace, :snapshots) do
      {:ok, list} when is_list(list) -> panel(info, list)
      _ -> nil
    end
  catch
    :exit, _ -> nil
  end

  @doc """
  Once a tick, of the widget's controller (its `trace`, its `last_info` and the panel
  it last sent, `recorder`): the `"recorder"` broadcast when the panel changed, and the
  panel. Nothing is asked of a trace that is not a recorder; of a recorder, its
  snapshots (its figures are in the info the controller asked this tick). A recorder
  that has ended has no snapshot left (they end with it).
  """
  @spec tick(%{recorder: panel() | nil, last_info: map() | nil, trace: KinoTrace.Client.trace()}) ::
          {[{:broadcast, String.t(), panel()}], panel() | nil}
  def tick(%{recorder: previous, last_info: %{recorder: _} = info, trace: trace}) do
    case with_snapshots(trace, info) do
      # the recorder has ended, and its snapshots with it: its last figures, no snapshot
      nil when previous != nil and previous.snapshots != [] ->
        panel = %{previous | snapshots: []}
        {[{:broadcast, "recorder", panel}], panel}

      nil ->
        {[], previous}

      ^previous ->
        {[], previous}

      panel ->
        {[{:broadcast, "recorder", panel}], panel}
    end
  end

  def tick(%{recorder: previous}), do: {[], previous}

  @doc """
  The trace file of the snapshot `request` names (`%{"id" => id}`), as
  `Kino.Trace.save/2` writes it: `%{id: id, name: file_name, data: base64}`, or
  `%{id: id, error: message}`.
  """
  @spec snapshot_file(KinoTrace.Client.trace(), term()) :: map()
  def snapshot_file(recorder, request) do
    with {:ok, snapshot} <- find(recorder, request),
         {:ok, bytes} <- saved(snapshot) do
      %{id: snapshot.id, name: "snapshot-#{snapshot.id}.ktrace", data: Base.encode64(bytes)}
    else
      {:error, message} -> %{id: id_of(request), error: message}
    end
  end

  @doc """
  The reply to a browser's `"get_snapshot_file"` (`"snapshot_file"`, `snapshot_file/2`),
  as the controller's effects; none for any other event (the controller hands it every
  event it does not know).
  """
  @spec reply(String.t(), term(), KinoTrace.Client.trace(), Payload.limits()) :: [
          {:reply, String.t(), map()}
        ]
  def reply("get_snapshot_file", request, trace, _limits),
    do: [{:reply, "snapshot_file", snapshot_file(trace, request)}]

  # (any other event of a browser is ignored)
  def reply(_event, _request, _trace, _limits), do: []

  @doc "The largest trace file `snapshot_file/2` sends."
  @spec max_file_bytes() :: pos_integer()
  def max_file_bytes, do: @max_file_bytes

  @doc """
  The snapshot of `recorder`'s list that a browser's `request` (`%{"id" => id}`) names,
  as a trace: `{:ok, trace}`, or `{:error, message}` when the recorder does not list it
  (it was stopped, pushed out by newer ones, or never was).
  """
  @spec find(KinoTrace.Client.trace(), term()) :: {:ok, Kino.Trace.t()} | {:error, String.t()}
  def find(recorder, request) do
    with id when is_integer(id) <- id_of(request),
         {:ok, list} when is_list(list) <- KinoTrace.Client.request(recorder, :snapshots),
         %{session: pid, id: ^id} <- Enum.find(list, &(&1.id == id)) do
      {:ok, %Kino.Trace{id: id, session: pid, node: node()}}
    else
      _ -> {:error, gone()}
    end
  catch
    :exit, _ -> {:error, gone()}
  end

  defp saved(snapshot) do
    path =
      Path.join(
        System.tmp_dir!(),
        "kino_trace_widget_#{System.unique_integer([:positive])}.ktrace"
      )

    try do
      Kino.Trace.save(snapshot, path)

      case File.stat(path) do
        {:ok, %{size: size}} when size > @max_file_bytes ->
          {:error,
           "this snapshot's file is #{size} bytes, more than the widget downloads (#{@max_file_bytes}): save it with Kino.Trace.save/2"}

        {:ok, _} ->
          {:ok, File.read!(path)}

        {:error, reason} ->
          {:error, "could not write the snapshot's file: #{:file.format_error(reason)}"}
      end
    rescue
      error in [File.Error, ArgumentError] -> {:error, Exception.message(error)}
    catch
      :exit, _ -> {:error, gone()}
    after
      File.rm(path)
    end
  end

  @doc """
  The snapshot id a browser's request names, or `nil`.

      iex> KinoTrace.Widget.RecorderPayload.id_of(%{"id" => 7})
      7
      iex> KinoTrace.Widget.RecorderPayload.id_of(%{"id" => "7"})
      nil
  """
  @spec id_of(term()) :: integer() | nil
  def id_of(%{"id" => id}) when is_integer(id), do: id
  def id_of(_request), do: nil

  defp gone, do: "this snapshot is no longer kept (stopped, or pushed out by newer ones)"

  defp trigger(true_or_config, fired) do
    {kind, text} =
      case true_or_config do
        {:exception, _} -> {:exception, "exception"}
        {:slower_than, ms} -> {:slower_than, "slower than #{ms} ms"}
        {:match, text} -> {:match, "match #{text}"}
        {:message, text} -> {:message, "message #{text}"}
        {:telemetry, names} -> {:telemetry, "telemetry #{Enum.map_join(names, ", ", &inspect/1)}"}
        other -> {:other, inspect(other)}
      end

    %{trigger: Atom.to_string(kind), text: text, fired: Map.get(fired, kind, 0)}
  end

  defp snapshot(entry) do
    %{
      id: entry.id,
      trigger: Atom.to_string(entry.trigger),
      taken_at: entry.taken_at,
      trigger_time: entry.trigger_time,
      pid: entry.pid && inspect(entry.pid),
      events: entry.events,
      bytes: entry.bytes
    }
  end
end
