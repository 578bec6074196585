defmodule Kino.Trace.Printer do
  @moduledoc """
  Prints trace events to the console as Elixir code, for IEx and scripts. With
  `print: true`, a trace prints each event as it comes:

      Kino.Trace.calls(["MyApp.Cache.fetch/2"], print: true)

  prints, for one call:

      12:01:03.123456 #PID<0.210.0> MyApp.Cache.fetch(:users, 42)
      12:01:03.123494 #PID<0.210.0> -> {:ok, %User{...}} (38 µs)  MyApp.Cache.fetch/2

  Calls are indented by their depth in the process, terms are shown with `inspect/2`
  limits (what the tracer cut shows as `...`), and lines are coloured when the terminal
  supports ANSI colours.

  `format/2` turns one event into a line (iodata) and can be used on its own:

      iex> event = %Kino.Trace.Event{kind: :call, module: Enum, function: :sum, arity: 1,
      ...>   args: [[1, 2]], pid: :c.pid(0, 42, 0), time: 0}
      iex> event |> Kino.Trace.Printer.format(colors: false, time: false) |> IO.iodata_to_binary()
      "#PID<0.42.0> Enum.sum([1, 2])"
  """

  alias Kino.Trace.Event
  alias KinoTrace.{Client, Render}
  alias KinoTrace.Tracer.Aliases

  @doc """
  Starts a process that prints the trace's events to the current group leader (or
  `:device`) until the trace stops, and returns its pid. Options: `:colors` (default:
  whether ANSI is enabled), `:time` (show timestamps, default `true`), `:device`,
  `:inspect` (as for `format/2`). Raises `ArgumentError` naming an unknown or bad option.

      iex> {:ok, device} = StringIO.open("")
      iex> trace = Kino.Trace.calls(["Enum.sum/1"], pids: self())
      iex> printer = Kino.Trace.Printer.attach(trace, device: device, colors: false, time: false)
      iex> Enum.sum([1, 2])
      3
      iex> ref = Process.monitor(printer)
      iex> Kino.Trace.flush(trace)
      :ok
      iex> Kino.Trace.stop(trace)
      :ok
      iex> receive do: ({:DOWN, ^ref, :process, _, _} -> :ok)
      :ok
      iex> {_, printed} = StringIO.contents(device)
      iex> {printed =~ "Enum.sum([1, 2])", printed =~ "-- trace stopped --"}
      {true, true}
  """
  @spec attach(Kino.Trace.t(), keyword()) :: pid()
  def attach(%{session: session} = trace, opts \\ []) when is_pid(session) do
    # in kino_trace's own process, with the caller's group leader (KinoTrace.Front)
    KinoTrace.Front.run(fn -> start(trace, opts) end)
  end

  defp start(trace, opts) do
    KinoTrace.Options.validate!(opts, KinoTrace.Plan.Options.print_schema())
    device = Keyword.get(opts, :device, Process.group_leader())
    opts = Keyword.put_new(opts, :colors, IO.ANSI.enabled?())
    pid = spawn(fn -> init(trace, device, opts) end)
    KinoTrace.Internal.register(pid)
    # What we print passes through the device and the console's I/O processes: a trace
    # recording them would feed on its own output (and so would every other trace that
    # records them), so no trace records them while this printer prints.
    for io <- output_chain(device), do: KinoTrace.Internal.register(io, pid)
    Client.subscribe(trace, pid)
    send(pid, :subscribed)
    pid
  end

  @console [:user_drv, :user_drv_writer, :user, :standard_error]

  defp output_chain(device) do
    device =
      case device do
        :stdio -> Process.group_leader()
        name when is_atom(name) -> Process.whereis(name)
        pid -> pid
      end

    ios = [device | Enum.map(@console, &Process.whereis/1)]
    for io <- ios, is_pid(io), node(io) == node(), uniq: true, do: io
  end

  defp init(trace, device, opts) do
    # Until subscribed, a trace on :all or :new processes follows this process: do
    # nothing it could see before then.
    receive do
      :subscribed -> loop(trace.id, Process.monitor(trace.session), device, opts, Aliases.new())
    after
      5_000 -> :ok
    end
  end

  # A reply sent to a process alias is printed as sent to the alias's owner, by the rule
  # Mermaid and the widget use (KinoTrace.Tracer.Aliases).
  defp loop(id, ref, device, opts, aliases) do
    receive do
      {:kino_trace, ^id, {:events, events}} ->
        {events, aliases} = Aliases.resolve(aliases, events)
        IO.write(device, Enum.map(events, &[format(&1, opts), ?\n]))
        loop(id, ref, device, opts, aliases)

      {:kino_trace, ^id, {:status, status}} when status in [:running, :paused] ->
        loop(id, ref, device, opts, aliases)

      {:kino_trace, ^id, {:status, status}} ->
        IO.write(device, Render.colorize(["-- trace ", to_string(status), " --\n"], :faint, opts))

      {:DOWN, ^ref, :process, _, _} ->
        :ok
    end
  end

  @doc """
  Formats one event as a line of Elixir code (iodata, no newline).

  An event whose process lost events just before it (a limit or a full queue; its
  depth restarts at 0) says so:

      iex> event = %Kino.Trace.Event{kind: :return, pid: :c.pid(0, 42, 0), module: Enum,
      ...>   function: :sum, arity: 1, return: 3, lost: true}
      iex> event |> Kino.Trace.Printer.format(time: false) |> IO.iodata_to_binary()
      "#PID<0.42.0> (events lost before this) -> 3  Enum.sum/1"

  Options: `:colors` (default `false`), `:time` (default `true`), `:inspect` (options for
  `inspect/2`, merged into the defaults).
  """
  @spec format(Event.t(), keyword()) :: iodata()
  defdelegate format(event, opts \\ []), to: Render

  @doc """
  Formats what an event says, the part of `format/2`'s line after the process and the
  indentation: a call as Elixir code, a return's value, duration and function, a
  message... Options: `:colors` and `:inspect`, as for `format/2`.

      iex> event = %Kino.Trace.Event{kind: :return, module: Enum, function: :sum, arity: 1,
      ...>   return: 3, duration: 38_400}
      iex> event |> Kino.Trace.Printer.format_body() |> IO.iodata_to_binary()
      "-> 3 (38 µs)  Enum.sum/1"
  """
  @spec format_body(Event.t(), keyword()) :: iodata()
  defdelegate format_body(event, opts \\ []), to: Render

  @doc """
  Formats the process of an event: its pid, its registered name if any, and its node
  first when that is not this node.

      iex> event = %Kino.Trace.Event{kind: :exit, pid: :c.pid(0, 42, 0), name: :cache, node: node()}
      iex> event |> Kino.Trace.Printer.format_process() |> IO.iodata_to_binary()
      "#PID<0.42.0> (:cache)"
  """
  @spec format_process(Event.t()) :: iodata()
  defdelegate format_process(event), to: Render

  @doc """
  Prints `Kino.Trace.slow_calls/2`'s slow calls to `:device` (default: the group
  leader): per function its slowest, slowest first, then the calls over the threshold,
  each as a line (duration, process, the call as Elixir code, how it ended) followed by
  its events as `format/2` prints them, indented by depth under the call. Options: those
  of `format/2` (`:time` defaults to `false` here), `:device`, and `events: false` to
  print the calls alone.

      iex> capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      iex> {:ok, device} = StringIO.open("")
      iex> Kino.Trace.Printer.print_slow_calls(Kino.Trace.slow_calls(capture), device: device)
      :ok
      iex> {_, printed} = StringIO.contents(device)
      iex> printed =~ "Enum.sum/1: the 1 slowest" and printed =~ "Enum.sum([1, 2]) -> 3"
      true
  """
  @spec print_slow_calls(map(), keyword()) :: :ok
  def print_slow_calls(%{slowest: _, slower_than: _} = report, opts \\ []) do
    {device, opts} = Keyword.pop(opts, :device, :stdio)
    IO.write(device, KinoTrace.Render.SlowCalls.format(report, Keyword.put_new(opts, :time, false)))
  end

  @doc """
  Formats a duration in nanoseconds for people.

      iex> Kino.Trace.Printer.format_duration(38_400)
      "38 µs"
      iex> Kino.Trace.Printer.format_duration(1_250_000)
      "1.3 ms"
  """
  @spec format_duration(non_neg_integer()) :: String.t()
  defdelegate format_duration(ns), to: Render

  @doc """
  Formats an event's `:caller`: the function, and where it made the call when the
  trace recorded it (`caller: :line`).

      iex> Kino.Trace.Printer.format_caller({MyApp.Cache, :fetch, 2})
      "MyApp.Cache.fetch/2"
      iex> Kino.Trace.Printer.format_caller({MyApp.Cache, :fetch, 2, {"lib/my_app/cache.ex", 12}})
      "MyApp.Cache.fetch/2 at lib/my_app/cache.ex:12"
  """
  @spec format_caller(Event.caller()) :: String.t()
  defdelegate format_caller(caller), to: Render
end
