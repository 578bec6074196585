defmodule KinoTrace.Client do
  @moduledoc false
  # The one client of trace servers (KinoTrace.Server: a Session or a Coordinator):
  # every request's message, timeout and error. The API (Kino.Trace), capture, the
  # printer, Mermaid, the widgets' controllers and a coordinator (a client of its nodes'
  # sessions) make requests through here only.
  #
  # A trace is any map with the server's pid as `:session` and the trace's `:id` (a
  # `%Kino.Trace{}`): taken by its fields, so the modules below the API that use a trace
  # do not depend on the API's module.
  #
  # Requests are made as KinoTrace.Front makes them (nothing of Elixir's or OTP's
  # library code runs in the caller). A server that is gone raises ArgumentError ("the
  # trace has ended"); any other failure exits as GenServer.call does.

  alias KinoTrace.Session.Final
  alias KinoTrace.Front
  alias KinoTrace.Server

  @type trace :: %{required(:session) => pid(), required(:id) => term(), optional(atom()) => term()}

  # How long stop/1 lets a server end by itself before killing it.
  @stop_timeout 5_000
  # How long any other request may take.
  @call_timeout 30_000
  @trace_ended "the trace has ended (its session process is gone)"

  @doc "Subscribes `pid` (see `Kino.Trace.subscribe/2`)."
  @spec subscribe(trace(), pid()) :: :ok
  def subscribe(trace, pid), do: call(trace, {:subscribe, pid})

  @doc "Unsubscribes `pid`."
  @spec unsubscribe(trace(), pid()) :: :ok
  def unsubscribe(trace, pid), do: call(trace, {:unsubscribe, pid})

  @doc "Stops tracing `pid` in the trace."
  @spec exclude(trace(), pid()) :: :ok
  def exclude(trace, pid), do: call(trace, {:exclude, pid})

  @doc "Has everything queued so far delivered to the subscribers, then returns."
  @spec flush(trace(), timeout()) :: :ok
  def flush(trace, timeout \\ :infinity), do: call(trace, {:sync, :infinity}, timeout)

  @doc "The last `n` events."
  @spec events(trace(), pos_integer()) :: [Kino.Trace.Event.t()]
  def events(trace, n), do: call(trace, {:events, n})

  @doc "Replaces the patterns: a result per entry."
  @spec set_patterns(trace(), term()) :: [{term(), Kino.Trace.pattern_result()}]
  def set_patterns(trace, patterns), do: call(trace, {:set_patterns, patterns})

  @doc "Pauses tracing."
  @spec pause(trace()) :: :ok
  def pause(trace), do: call(trace, :pause)

  @doc "Resumes tracing."
  @spec resume(trace()) :: :ok
  def resume(trace), do: call(trace, :resume)

  @doc "What the trace's OTP session names as its tracer (`nil` when it has none here)."
  @spec tracer(trace()) :: term()
  def tracer(trace), do: call(trace, :tracer)

  @doc """
  What tests and debugging read of a server's state (the `:internals` request of
  `KinoTrace.Server`): a trace's server, or a session's pid.
  """
  @spec internals(trace() | pid()) :: map()
  def internals(trace_or_pid), do: call(trace_or_pid, :internals)

  @doc """
  The trace's info; once its server is gone, the info it left when it ended
  (`KinoTrace.Session.Final`).
  """
  @spec info(trace()) :: Kino.Trace.info()
  def info(%{session: pid, id: id}) do
    case Front.call(pid, :info, @call_timeout) do
      {:ok, info} ->
        info

      {:exit, reason} ->
        Front.run(fn ->
          case Final.fetch(id) do
            {:ok, info} -> info
            :error -> call_failed(reason, pid, :info, @call_timeout, @trace_ended)
          end
        end)
    end
  end

  @doc """
  Stops the trace (or the server `pid`, a stats session's) and waits until its server
  is gone: one that does not answer in time is killed (its OTP trace session goes with
  it). `:ok`, also when already stopped.
  """
  @spec stop(trace() | pid()) :: :ok
  def stop(%{session: pid}), do: stop(pid)

  def stop(pid) when is_pid(pid) do
    ref = :erlang.monitor(:process, pid)

    case Front.call(pid, :stop, @stop_timeout) do
      {:exit, :timeout} -> :erlang.exit(pid, :kill)
      # answered, already ended, or ending as we asked
      _ -> :ok
    end

    receive do
      {:DOWN, ^ref, :process, _, _} -> :ok
    end
  end

  @doc """
  A request to a server of kino_trace (a trace's, a stats session's): its reply, or
  raises `ArgumentError` with `ended` when the server is gone, else exits as
  `GenServer.call/3` does.
  """
  @spec call(trace() | pid(), term(), timeout(), String.t()) :: term()
  def call(trace_or_pid, request, timeout \\ @call_timeout, ended \\ @trace_ended)

  def call(%{session: pid}, request, timeout, ended), do: call(pid, request, timeout, ended)

  def call(pid, request, timeout, ended) when is_pid(pid) do
    case Front.call(pid, request, timeout) do
      {:ok, reply} -> reply
      {:exit, reason} -> Front.run(fn -> call_failed(reason, pid, request, timeout, ended) end)
    end
  end

  defp call_failed(reason, _pid, _request, _timeout, ended) when reason in [:noproc, :normal],
    do: raise(ArgumentError, ended)

  defp call_failed(reason, pid, request, timeout, _ended), do: exit({reason, {__MODULE__, :call, [pid, request, timeout]}})

  # --- a coordinator's requests to its nodes' sessions ---------------------------------

  @doc """
  Subscribes `pid` to the session `server` with `tag` on its messages (a coordinator
  tags each node's). Raises as `call/4`.
  """
  @spec subscribe_tagged(pid(), pid(), Server.tag()) :: :ok
  def subscribe_tagged(server, pid, tag), do: call(server, {:subscribe, pid, tag})

  @doc """
  Has the session `server` hold (not trace) `pid`, release it, or exclude it (`op`),
  waiting at most `timeout`; a session that is gone or late is left alone.
  """
  @spec on_pid(pid(), :hold | :release | :exclude, pid(), timeout()) :: :ok
  def on_pid(server, op, pid, timeout) when op in [:hold, :release, :exclude] do
    Front.call(server, {op, pid}, timeout)
    :ok
  end

  @doc """
  Sends `request` to `server` without waiting, labelled `label` in `requests` (a
  request id collection of `:gen_server`): the reply comes as a message, for
  `:gen_server.receive_response/3` or `check_response/3`.
  """
  @spec send_request(pid(), Server.request(), term(), :gen_server.request_id_collection()) ::
          :gen_server.request_id_collection()
  def send_request(server, request, label, requests), do: :gen_server.send_request(server, request, label, requests)
end
