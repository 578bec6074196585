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

  alias Kino.Trace.{Aliases, Event, MFA}

  @inspect_opts [limit: 20, printable_limit: 200, width: :infinity]

  @doc """
  Starts a process that prints the trace's events to the current group leader (or
  `:device`) until the trace stops. Options: `:colors` (default: whether ANSI is
  enabled), `:time` (show timestamps, default `true`), `:device`.
  """
  @spec attach(Kino.Trace.t(), keyword()) :: pid()
  def attach(%Kino.Trace{} = trace, opts \\ []) do
    # in kino_trace's own process, with the caller's group leader (Kino.Trace.Front)
    Kino.Trace.Front.run(fn -> start(trace, opts) end)
  end

  defp start(trace, opts) do
    device = Keyword.get(opts, :device, Process.group_leader())
    opts = Keyword.put_new(opts, :colors, IO.ANSI.enabled?())
    pid = spawn(fn -> init(trace, device, opts) end)
    Kino.Trace.Internal.register(pid)
    # What we print passes through the device and the console's I/O processes: a trace
    # recording them would feed on its own output (and so would every other trace that
    # records them), so no trace records them while this printer prints.
    for io <- output_chain(device), do: Kino.Trace.Internal.register(io, pid)
    Kino.Trace.subscribe(trace, pid)
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
  # Mermaid and the widget use (Kino.Trace.Aliases).
  defp loop(id, ref, device, opts, aliases) do
    receive do
      {:kino_trace, ^id, {:events, events}} ->
        {events, aliases} = Aliases.resolve(aliases, events)
        IO.write(device, Enum.map(events, &[format(&1, opts), ?\n]))
        loop(id, ref, device, opts, aliases)

      {:kino_trace, ^id, {:status, status}} when status in [:running, :paused] ->
        loop(id, ref, device, opts, aliases)

      {:kino_trace, ^id, {:status, status}} ->
        IO.write(device, colorize(["-- trace ", to_string(status), " --\n"], :faint, opts))

      {:DOWN, ^ref, :process, _, _} ->
        :ok
    end
  end

  # Before an event whose process lost events just before it (Kino.Trace.Event's :lost).
  @lost "(events lost before this) "

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
  def format(%Event{} = event, opts \\ []) do
    time = if Keyword.get(opts, :time, true) and event.time, do: [format_time(event.time), " "], else: []
    indent = String.duplicate("  ", event.depth)

    [
      colorize(time, :faint, opts),
      colorize([format_process(event), " "], :cyan, opts),
      indent,
      if(event.lost, do: colorize(@lost, :yellow, opts), else: []),
      format_body(event, opts)
    ]
  end

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
  def format_body(%Event{} = event, opts \\ []) do
    body(event, Keyword.merge(@inspect_opts, Keyword.get(opts, :inspect, [])), opts)
  end

  @doc """
  Formats the process of an event: its pid, its registered name if any, and its node
  first when that is not this node.

      iex> event = %Kino.Trace.Event{kind: :exit, pid: :c.pid(0, 42, 0), name: :cache, node: node()}
      iex> event |> Kino.Trace.Printer.format_process() |> IO.iodata_to_binary()
      "#PID<0.42.0> (:cache)"
  """
  @spec format_process(Event.t()) :: iodata()
  def format_process(%Event{} = event) do
    where = if event.node && event.node != node(), do: [to_string(event.node), " "], else: []
    [where, inspect(event.pid), if(event.name, do: [" (", inspect(event.name), ")"], else: [])]
  end

  defp body(%Event{kind: :call} = e, io, opts) do
    args = Enum.map_join(e.args || [], ", ", &inspect(&1, io))
    caller = if e.caller, do: colorize(["  (from ", format_caller(e.caller), ")"], :faint, opts), else: []
    [colorize([MFA.call(e.module, e.function), "(", args, ")"], :bright, opts), caller]
  end

  defp body(%Event{kind: :return} = e, io, opts) do
    [colorize("-> ", :green, opts), inspect(e.return, io), duration(e, opts), call_name(e, opts)]
  end

  defp body(%Event{kind: :exception, exception: {class, reason}} = e, io, opts) do
    text =
      case {class, reason} do
        {:error, %{__exception__: true} = ex} -> Exception.format_banner(:error, ex)
        {class, reason} -> "** (#{class}) " <> inspect(reason, io)
      end

    [colorize(["!! ", text], :red, opts), duration(e, opts), call_name(e, opts)]
  end

  # No function: the process's first call returned (and the process ends).
  defp body(%Event{kind: :return_to, module: nil}, _io, _opts), do: "<- returned to (no function)"
  defp body(%Event{kind: :return_to} = e, _io, _opts), do: ["<- returned to ", MFA.to_string(Event.mfa(e))]
  defp body(%Event{kind: :send} = e, io, _opts), do: ["send ", inspect(e.data, io), " to ", inspect(e.peer)]

  defp body(%Event{kind: :send_to_non_existing} = e, io, _opts),
    do: ["send ", inspect(e.data, io), " to ", inspect(e.peer), " (no such process)"]

  defp body(%Event{kind: :receive} = e, io, _opts), do: ["receive ", inspect(e.data, io)]

  # A `receive ... after` that timed out (traced with `timeouts: true`): no message.
  defp body(%Event{kind: :timeout}, _io, _opts), do: "after timeout"

  defp body(%Event{kind: :spawn} = e, io, _opts), do: ["spawn ", inspect(e.peer), " as ", format_spawn(e.data, io)]
  defp body(%Event{kind: :spawned} = e, io, _opts), do: ["spawned by ", inspect(e.peer), " as ", format_spawn(e.data, io)]
  defp body(%Event{kind: :exit} = e, io, opts), do: colorize(["exit ", inspect(e.data, io)], :yellow, opts)
  defp body(%Event{kind: kind, peer: peer} = e, io, _opts) when is_nil(e.data), do: [to_string(kind), " ", inspect(peer, io)]
  defp body(%Event{kind: kind} = e, io, _opts), do: [to_string(kind), " ", inspect(e.data, io)]

  defp format_spawn({m, f, args}, io) when is_atom(m) and is_atom(f) and is_list(args),
    do: [MFA.call(m, f), "(", Enum.map_join(args, ", ", &inspect(&1, io)), ")"]

  defp format_spawn(other, io), do: inspect(other, io)

  defp call_name(%Event{module: m, function: f, arity: a}, opts) when not is_nil(m),
    do: colorize(["  ", MFA.to_string({m, f, a})], :faint, opts)

  defp call_name(_, _), do: []

  defp duration(%Event{duration: nil}, _opts), do: []
  defp duration(%Event{duration: ns}, opts), do: colorize([" (", format_duration(ns), ")"], :yellow, opts)

  @doc """
  Formats a duration in nanoseconds for people.

      iex> Kino.Trace.Printer.format_duration(38_400)
      "38 µs"
      iex> Kino.Trace.Printer.format_duration(1_250_000)
      "1.3 ms"
  """
  @spec format_duration(non_neg_integer()) :: String.t()
  def format_duration(ns) when ns < 1_000, do: "#{ns} ns"
  def format_duration(ns) when ns < 10_000, do: "#{Float.round(ns / 1_000, 1)} µs"
  def format_duration(ns) when ns < 1_000_000, do: "#{div(ns + 500, 1_000)} µs"
  def format_duration(ns) when ns < 1_000_000_000, do: "#{Float.round(ns / 1_000_000, 1)} ms"
  def format_duration(ns), do: "#{Float.round(ns / 1_000_000_000, 2)} s"

  @doc """
  Formats an event's `:caller`: the function, and where it made the call when the
  trace recorded it (`caller: :line`).

      iex> Kino.Trace.Printer.format_caller({MyApp.Cache, :fetch, 2})
      "MyApp.Cache.fetch/2"
      iex> Kino.Trace.Printer.format_caller({MyApp.Cache, :fetch, 2, {"lib/my_app/cache.ex", 12}})
      "MyApp.Cache.fetch/2 at lib/my_app/cache.ex:12"
  """
  @spec format_caller(Event.caller()) :: String.t()
  def format_caller({m, f, a, {file, line}}),
    do: IO.iodata_to_binary([MFA.to_string({m, f, a}), " at ", file, ":", Integer.to_string(line)])

  def format_caller({m, f, a}), do: MFA.to_string({m, f, a})

  defp format_time(us) do
    {{_, _, _}, {h, m, s}} = :calendar.system_time_to_local_time(div(us, 1_000_000), :second)
    frac = rem(us, 1_000_000)
    :io_lib.format(~c"~2..0B:~2..0B:~2..0B.~6..0B", [h, m, s, frac])
  end

  defp colorize(text, color, opts) do
    if Keyword.get(opts, :colors, false), do: [apply(IO.ANSI, color, []), text, IO.ANSI.reset()], else: text
  end
end
