defmodule KinoTraceTest.Sample.Math do
  @moduledoc false
  # Small deterministic functions for the tracing API tests. Nothing else calls them,
  # so a trace on this module only sees what a test does.

  def add(a, b), do: a + b

  def double(x), do: add(x, x)

  # Body recursive: one nested call per level (depth 0, 1, 2, ...).
  def fact(0), do: 1
  def fact(n) when is_integer(n) and n > 0, do: n * fact(n - 1)

  # Calls a private function.
  def secret(x), do: hidden(x) + 1

  defp hidden(x), do: x * 2

  def boom(message), do: raise(ArgumentError, message)

  def safe_boom(message) do
    boom(message)
  rescue
    e in ArgumentError -> {:rescued, e.message}
  end

  def toss(value), do: throw(value)

  def echo(term), do: term

  def first(list) when is_list(list), do: hd(list)

  def lookup(table, key), do: {table, key}

  # Spends a little CPU so a duration is clearly above zero.
  def busy(n), do: Enum.reduce(1..n, 0, &(&1 + &2))
end

defmodule KinoTraceTest.Sample.Other do
  @moduledoc false
  # A second module, for "mixed patterns" and "non-matching calls don't appear".

  def ping(x), do: {:pong, x}
  def pong(x), do: {:ping, x}
end

defmodule KinoTraceTest.Sample.Worker do
  @moduledoc false
  # A process that runs functions on request, so a test can make calls from a process
  # it controls (to trace by pid, by name, and as a spawner of children).

  @doc "Starts a worker linked to the caller."
  def start(name \\ nil) do
    parent = self()

    pid =
      spawn_link(fn ->
        if name, do: Process.register(self(), name)
        send(parent, {:worker_ready, self()})
        loop()
      end)

    receive do
      {:worker_ready, ^pid} -> pid
    after
      5_000 -> raise "worker did not start"
    end
  end

  @doc """
  Runs `fun` in `worker` and returns its result. When this returns, every trace event
  of the call has been handed to the native tracer (it runs inside the traced process).
  """
  def run(worker, fun) do
    ref = make_ref()
    send(worker, {:run, fun, self(), ref})

    receive do
      {^ref, result} -> result
    after
      10_000 -> raise "worker did not answer"
    end
  end

  @doc "Stops a worker and waits until it is gone."
  def stop(worker) do
    ref = Process.monitor(worker)
    Process.unlink(worker)
    Process.exit(worker, :kill)

    receive do
      {:DOWN, ^ref, :process, _, _} -> :ok
    end
  end

  defp loop do
    receive do
      {:run, fun, from, ref} ->
        send(from, {ref, fun.()})
        loop()
    end
  end
end

defmodule KinoTraceTest.Helpers do
  @moduledoc false

  alias KinoTraceTest.Sample.Worker

  @doc """
  Makes the traces started from now on use the pure-Erlang tracer (the application
  environment's `tracer: :fallback`), until the calling test ends (call it in a test or
  its `setup`).
  """
  def use_fallback_tracer do
    previous = Application.fetch_env(:kino_trace, :tracer)
    Application.put_env(:kino_trace, :tracer, :fallback)

    ExUnit.Callbacks.on_exit(fn ->
      case previous do
        {:ok, value} -> Application.put_env(:kino_trace, :tracer, value)
        :error -> Application.delete_env(:kino_trace, :tracer)
      end
    end)
  end

  @doc """
  Makes the traces started from now on use `tracer`: `:native` (the default, nothing to
  change) or `:fallback` (`use_fallback_tracer/0`), for the tests written once for both.
  """
  def use_tracer(:native), do: :ok
  def use_tracer(:fallback), do: use_fallback_tracer()

  @doc "Starts a worker (linked to the caller), stopped when the calling test ends."
  def start_worker do
    worker = Worker.start()
    ExUnit.Callbacks.on_exit(fn -> Process.alive?(worker) && Worker.stop(worker) end)
    worker
  end

  @doc """
  Polls `fun` every 10 ms until it returns a truthy value, and returns that value; fails the
  test after `tries` polls, with `message.()` as the reason. The one polling loop of the
  suite: use it only where no message, monitor or `trace_delivered` says the thing happened.
  """
  def wait_until(fun, tries \\ 1000, message \\ fn -> "condition not met in time" end) do
    cond do
      value = fun.() ->
        value

      tries == 0 ->
        ExUnit.Assertions.flunk(message.())

      true ->
        # time is the subject: the one poll interval, for states no event announces
        Process.sleep(10)
        wait_until(fun, tries - 1, message)
    end
  end

  @doc """
  Samples `fun` every `every` ms while `while` holds (a window of that many ms, or a
  function that says whether to go on), and once more when it no longer does; returns the
  samples in order. The one sampling loop of the suite: for a figure measured while a
  workload runs (a peak of memory or of a stack), where no event marks the peak.
  """
  def observe(while, every, fun) when is_integer(while) do
    deadline = System.monotonic_time(:millisecond) + while
    observe(fn -> System.monotonic_time(:millisecond) < deadline end, every, fun)
  end

  def observe(while, every, fun) when is_function(while, 0), do: observe(while, every, fun, [])

  defp observe(while, every, fun, samples) do
    if while.() do
      # time is the subject: a figure sampled every `every` ms while a workload runs
      Process.sleep(every)
      observe(while, every, fun, [fun.() | samples])
    else
      :lists.reverse([fun.() | samples])
    end
  end

  @doc """
  Waits until each of `pids` has received `message` `n` times from now (a timer's tick,
  say a session's once a second), watching their receives with the caller as their
  tracer. Mailbox order then puts a call made after this behind those messages.

  The watch is in the VM's legacy trace session, so stopping it ends no trace session
  (on OTP 27.3 that switches off the tracing of BIFs everywhere, erlang/otp#10349); its
  receive pattern lets `message` alone through, so a flood of other messages costs the
  caller nothing. Written with `:lists`, not `Enum` nor `for`: a test may be tracing
  `Enum`.
  """
  def await_received(pids, message, n \\ 1, timeout \\ 30_000) do
    pids = List.wrap(pids)
    :erlang.trace_pattern(:receive, [{[:_, :_, message], [], []}], [])

    :lists.foreach(
      fn pid -> 1 = :erlang.trace(pid, true, [:receive, {:tracer, self()}]) end,
      pids
    )

    try do
      :lists.foreach(
        fn pid ->
          :lists.foreach(fn _ -> await_receive(pid, message, timeout) end, :lists.seq(1, n))
        end,
        pids
      )
    after
      :lists.foreach(
        fn pid ->
          untrace_receives(pid)
          flush_received(pid)
        end,
        pids
      )

      :erlang.trace_pattern(:receive, true, [])
    end
  end

  defp await_receive(pid, message, timeout) do
    receive do
      {:trace, ^pid, :receive, ^message} -> :ok
    after
      timeout ->
        state = if Process.alive?(pid), do: "alive", else: "ended"

        ExUnit.Assertions.flunk(
          "#{inspect(pid)} (#{state}) did not receive #{inspect(message)} in #{timeout} ms"
        )
    end
  end

  defp untrace_receives(pid) do
    :erlang.trace(pid, false, [:receive])
  rescue
    # it has ended
    ArgumentError -> 0
  end

  defp flush_received(pid) do
    receive do
      {:trace, ^pid, :receive, _message} -> flush_received(pid)
    after
      0 -> :ok
    end
  end

  @doc """
  Polls `Kino.Trace.events/2` until `fun` accepts the events (for events that arrive
  from other processes or nodes, with no delivery notice to wait on).
  """
  def await_events(trace, fun, tries \\ 300) do
    wait_until(
      fn ->
        events = Kino.Trace.events(trace, 10_000)
        fun.(events) && events
      end,
      tries,
      fn ->
        "expected events never arrived; got: #{inspect(Kino.Trace.events(trace, 10_000), limit: 30)}"
      end
    )
  end

  @doc """
  The kino_trace entries of `:trace.session_info(:all)`, once the reaper has dealt with
  every session handed to it so far (ended traces hand theirs over and return).
  """
  def kino_sessions do
    KinoTrace.Backend.Reaper.sync()
    for {:kino_trace, _} = s <- :trace.session_info(:all), do: s
  end

  @doc "Waits until `pid`'s scheduled trace messages are delivered, then drains the trace."
  def events_after(trace, pid \\ :all) do
    trace_delivered(pid, 10_000)
    Kino.Trace.events(trace, 10_000)
  end

  @doc "Waits until the trace messages `pid` (or `:all`) has scheduled are delivered."
  def trace_delivered(pid, timeout \\ 5_000) do
    ref = :erlang.trace_delivered(pid)

    receive do
      {:trace_delivered, ^pid, ^ref} -> :ok
    after
      timeout -> ExUnit.Assertions.flunk("trace_delivered did not answer in #{timeout} ms")
    end
  end

  @doc """
  Every raw event a native tracer's `resource` holds, or that `drain` (a function of a
  batch size, as `KinoTrace.Tracer.drain/2` takes it) gives, until none is left.
  """
  def drain_all(drain, acc \\ [])

  def drain_all(drain, acc) when is_function(drain, 1) do
    case drain.(1000) do
      {[], false} -> Enum.concat(Enum.reverse(acc))
      {batch, _more} -> drain_all(drain, [batch | acc])
    end
  end

  def drain_all(resource, []), do: drain_all(&KinoTrace.Tracer.drain(resource, &1))

  @doc "The `{kind, m, f, args_or_value}` summary of events, for compact assertions."
  def summary(events) do
    Enum.map(events, fn
      %{kind: :call} = e -> {:call, e.module, e.function, e.args}
      %{kind: :return} = e -> {:return, e.module, e.function, e.return}
      %{kind: :exception} = e -> {:exception, e.module, e.function, e.exception}
      e -> {e.kind, e.module, e.function, e.data}
    end)
  end

  @doc "The calls among `events`, as `{function, args}`."
  def calls(events), do: for(%{kind: :call} = e <- events, do: {e.function, e.args})

  @doc "Runs `fun` in a fresh worker, returns {worker, result}. The worker lives on (linked)."
  def in_worker(fun) do
    worker = Worker.start()
    {worker, Worker.run(worker, fun)}
  end

  @doc "Waits for `pid` to exit."
  def await_down(pid, timeout \\ 10_000) do
    ref = Process.monitor(pid)

    receive do
      {:DOWN, ^ref, :process, ^pid, _} -> :ok
    after
      timeout -> raise "process #{inspect(pid)} did not exit"
    end
  end
end
