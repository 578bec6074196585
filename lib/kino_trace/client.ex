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
  # trace has ended"), what the API tells its users; any other failure exits as
  # GenServer.call does. The widgets' controllers, for which an ended trace is a state
  # and not an error, use the `try_` forms instead: `{:error, :ended}` where the others
  # raise.

  alias KinoTrace.{Front, Server}
  alias KinoTrace.Client.Final

  @type trace :: %{
          required(:session) => pid(),
          required(:id) => term(),
          optional(atom()) => term()
        }

  # How long stop/1 lets a server end by itself before killing it. A trace's session on
  # this node (KinoTrace.Session) ends at once when it takes the request, but it may be
  # waiting for the VM in a `:trace` call (setting up, moving a looping process), each of
  # which waits for the code modification permission, one at a time VM-wide: with traced
  # functions hot and other traces starting and ending, for seconds. It is killed sooner,
  # so that stop/1 returns within 2 s (issue 36 item 2); its OTP session goes with it, and
  # info/1 tells what it kept (KinoTrace.Client.Final). Another server (a coordinator of
  # other nodes) is waited for longer: it waits for those nodes to be as they were.
  @stop_timeout 5_000
  @session_stop_timeout 1_200
  # How long any other request may take.
  @call_timeout 30_000
  @trace_ended "the trace has ended (its session process is gone)"

  @doc "What a trace that has ended is, in words (what the API raises)."
  @spec ended_message() :: String.t()
  def ended_message, do: @trace_ended

  @doc "Subscribes `pid` (see `Kino.Trace.subscribe/2`)."
  @spec subscribe(trace(), pid()) :: :ok
  def subscribe(trace, pid), do: call(trace, {:subscribe, pid})

  @doc "`subscribe/2`, or `{:error, :ended}`."
  @spec try_subscribe(trace(), pid()) :: :ok | {:error, :ended}
  def try_subscribe(trace, pid), do: done(request(trace, {:subscribe, pid}))

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

  @doc "The trace's latency distributions since the start (`latency: true`), else `nil`."
  @spec latency(trace()) :: KinoTrace.Latency.t() | nil
  def latency(trace), do: call(trace, :latency)

  @doc "The slow calls the trace keeps (`slowest:`, `slower_than:`), else `nil`."
  @spec slow_calls(trace()) :: KinoTrace.Latency.SlowCalls.report() | nil
  def slow_calls(trace), do: call(trace, :slow_calls)

  @doc """
  The trace's latency distributions per function and process (a stats session's trace
  of durations: KinoTrace.Latency.Kept.latency_processes/1), else `nil`; or
  `{:error, :ended}`.
  """
  @spec try_latency_processes(trace()) ::
          {:ok, KinoTrace.Latency.t() | nil} | {:error, :ended}
  def try_latency_processes(trace), do: request(trace, :latency_processes)

  @doc "`slow_calls/1`, or `{:error, :ended}`."
  @spec try_slow_calls(trace()) ::
          {:ok, KinoTrace.Latency.SlowCalls.report() | nil} | {:error, :ended}
  def try_slow_calls(trace), do: request(trace, :slow_calls)

  @doc """
  How many slow calls the trace keeps per function (`slowest:`, `slower_than:`; `nil`
  when it keeps none), or `{:error, :ended}`.
  """
  @spec try_slow_counts(trace()) :: {:ok, %{mfa() => pos_integer()} | nil} | {:error, :ended}
  def try_slow_counts(trace), do: request(trace, :slow_counts)

  @doc "`latency/1`, or `{:error, :ended}`."
  @spec try_latency(trace()) :: {:ok, KinoTrace.Latency.t() | nil} | {:error, :ended}
  def try_latency(trace), do: request(trace, :latency)

  @doc "`events/2`, or `{:error, :ended}`."
  @spec try_events(trace(), pos_integer()) :: {:ok, [Kino.Trace.Event.t()]} | {:error, :ended}
  def try_events(trace, n), do: request(trace, {:events, n})

  @doc "Replaces the patterns: a result per entry."
  @spec set_patterns(trace(), term()) :: [{term(), Kino.Trace.pattern_result()}]
  def set_patterns(trace, patterns), do: call(trace, {:set_patterns, patterns})

  @doc "`set_patterns/2`, or `{:error, :ended}`."
  @spec try_set_patterns(trace(), term()) ::
          {:ok, [{term(), Kino.Trace.pattern_result()}]} | {:error, :ended}
  def try_set_patterns(trace, patterns), do: request(trace, {:set_patterns, patterns})

  @doc "Pauses tracing."
  @spec pause(trace()) :: :ok
  def pause(trace), do: call(trace, :pause)

  @doc "Resumes tracing."
  @spec resume(trace()) :: :ok
  def resume(trace), do: call(trace, :resume)

  @doc "`pause/1`, or `{:error, :ended}`."
  @spec try_pause(trace()) :: :ok | {:error, :ended}
  def try_pause(trace), do: done(request(trace, :pause))

  @doc "`resume/1`, or `{:error, :ended}`."
  @spec try_resume(trace()) :: :ok | {:error, :ended}
  def try_resume(trace), do: done(request(trace, :resume))

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
  (`KinoTrace.Client.Final`).
  """
  @spec info(trace()) :: Kino.Trace.info()
  def info(trace), do: unwrap(try_info(trace), @trace_ended)

  @doc "`info/1`, or `{:error, :ended}` when the server is gone and left no info."
  @spec try_info(trace()) :: {:ok, Kino.Trace.info()} | {:error, :ended}
  def try_info(%{session: pid, id: id}) do
    case Front.call(pid, :info, @call_timeout) do
      {:ok, info} ->
        {:ok, info}

      {:exit, reason} ->
        Front.run(fn ->
          case Final.fetch(id) do
            {:ok, info} -> {:ok, info}
            :error -> failed(reason, pid, :info, @call_timeout)
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

    case Front.call(pid, :stop, stop_timeout(pid)) do
      {:exit, :timeout} -> :erlang.exit(pid, :kill)
      # answered, already ended, or ending as we asked
      _ -> :ok
    end

    receive do
      {:DOWN, ^ref, :process, _, _} -> :ok
    end
  end

  # (in the caller, as KinoTrace.Front makes requests: its workers may all be busy, and
  # starting another waits for the VM too)
  defp stop_timeout(pid) when node(pid) == node() do
    case :erlang.process_info(pid, :dictionary) do
      {:dictionary, dictionary} ->
        if session?(dictionary), do: @session_stop_timeout, else: @stop_timeout

      # (gone)
      :undefined ->
        @stop_timeout
    end
  end

  defp stop_timeout(_pid), do: @stop_timeout

  defp session?([{:"$initial_call", {KinoTrace.Session, :init, 1}} | _]), do: true
  defp session?([_ | rest]), do: session?(rest)
  defp session?([]), do: false

  @doc """
  A request to a server of kino_trace (a trace's, a stats session's): its reply, or
  raises `ArgumentError` with `ended` when the server is gone, else exits as
  `GenServer.call/3` does.
  """
  @spec call(trace() | pid(), term(), timeout(), String.t()) :: term()
  def call(trace_or_pid, request, timeout \\ @call_timeout, ended \\ @trace_ended),
    do: unwrap(request(trace_or_pid, request, timeout), ended)

  @doc """
  `call/4` without raising: `{:ok, reply}`, or `{:error, :ended}` when the server is
  gone; exits as `GenServer.call/3` does for any other failure (a timeout).
  """
  @spec request(trace() | pid(), term(), timeout()) :: {:ok, term()} | {:error, :ended}
  def request(trace_or_pid, request, timeout \\ @call_timeout)

  def request(%{session: pid}, request, timeout), do: request(pid, request, timeout)

  def request(pid, request, timeout) when is_pid(pid) do
    case Front.call(pid, request, timeout) do
      {:ok, reply} -> {:ok, reply}
      {:exit, reason} -> Front.run(fn -> failed(reason, pid, request, timeout) end)
    end
  end

  # A request that got no reply: the server is gone (it has ended), or exits as
  # GenServer.call/3 does.
  defp failed(reason, _pid, _request, _timeout) when reason in [:noproc, :normal],
    do: {:error, :ended}

  defp failed(reason, pid, request, timeout),
    do: exit({reason, {__MODULE__, :call, [pid, request, timeout]}})

  defp done({:ok, :ok}), do: :ok
  defp done({:error, :ended}), do: {:error, :ended}

  defp unwrap({:ok, reply}, _ended), do: reply
  defp unwrap({:error, :ended}, ended), do: Front.run(fn -> raise ArgumentError, ended end)

  # --- a stats session's requests (KinoTrace.Stats.Server) ----------------------------

  @stats_ended "the stats session has ended (its process is gone)"

  @typedoc "What a stats session answers: its snapshot, a reset of its counters, its info."
  @type stats_request :: :snapshot | :reset | :info

  @doc "A stats session's answer to `request`; raises `ArgumentError` when it has ended."
  @spec stats(pid(), stats_request()) :: term()
  def stats(server, request) when request in [:snapshot, :reset, :info],
    do: call(server, request, @call_timeout, @stats_ended)

  @doc "`stats/2`, or `{:error, :ended}`."
  @spec try_stats(pid(), stats_request()) :: {:ok, term()} | {:error, :ended}
  def try_stats(server, request) when request in [:snapshot, :reset, :info],
    do: request(server, request)

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
  def send_request(server, request, label, requests),
    do: :gen_server.send_request(server, request, label, requests)
end
