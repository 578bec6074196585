defmodule KinoTrace.Render do
  @moduledoc false
  # Turns an event or a term into text: the line Kino.Trace.Printer prints, the pieces
  # of it (body, process, duration, caller), terms within limits and terms as short
  # code, which an event's Inspect, Mermaid's labels, the widget's payload and
  # assertion messages show. Below all of them, so none of them depends on another to
  # render; the public documentation is on Kino.Trace.Printer, KinoTrace.Widget.Payload
  # and KinoTrace.Assertions.Format.

  alias Kino.Trace.{Cut, Event}
  alias KinoTrace.Base.MFA

  @inspect_opts [limit: 20, printable_limit: 200, width: :infinity]

  # Before an event whose process lost events just before it (Kino.Trace.Event's :lost).
  @lost "(events lost before this) "

  @spec format(Event.t(), keyword()) :: iodata()
  def format(%Event{} = event, opts \\ []) do
    time =
      if Keyword.get(opts, :time, true) and event.time,
        do: [format_time(event.time), " "],
        else: []

    indent = String.duplicate("  ", event.depth)

    [
      colorize(time, :faint, opts),
      colorize([format_process(event), " "], :cyan, opts),
      indent,
      if(event.lost, do: colorize(@lost, :yellow, opts), else: []),
      format_body(event, opts)
    ]
  end

  @spec format_body(Event.t(), keyword()) :: iodata()
  def format_body(%Event{} = event, opts \\ []) do
    body(event, Keyword.merge(@inspect_opts, Keyword.get(opts, :inspect, [])), opts)
  end

  @spec format_process(Event.t()) :: iodata()
  def format_process(%Event{} = event) do
    where =
      if event.node && event.node != node(),
        do: [KinoTrace.Base.Name.text(event.node), " "],
        else: []

    [
      where,
      inspect(event.pid),
      if(event.name, do: [" (", process_name(event.name), ")"], else: [])
    ]
  end

  @doc """
  A process's registered name as Elixir writes it, wherever one is shown (the printer,
  Mermaid's participants, the widget's rows and lanes, the stats): `Counter`, `:cache`.

      iex> KinoTrace.Render.process_name(Counter)
      "Counter"
      iex> KinoTrace.Render.process_name(:cache)
      ":cache"
  """
  @spec process_name(atom()) :: String.t()
  def process_name(name) when is_atom(name), do: inspect(name)

  defp body(%Event{kind: :call} = e, io, opts) do
    caller =
      if e.caller,
        do: colorize(["  (from ", format_caller(e.caller), ")"], :faint, opts),
        else: []

    [colorize(call(e.module, e.function, e.args || [], io), :bright, opts), caller]
  end

  defp body(%Event{kind: :return} = e, io, opts) do
    [colorize("-> ", :green, opts), inspect(e.return, io), duration(e, opts), call_name(e, opts)]
  end

  defp body(%Event{kind: :exception, exception: {class, reason}} = e, io, opts) do
    [
      colorize(["!! ", banner(class, reason, io)], :red, opts),
      duration(e, opts),
      call_name(e, opts)
    ]
  end

  # No function: the process's first call returned (and the process ends).
  defp body(%Event{kind: :return_to, module: nil}, _io, _opts), do: "<- returned to (no function)"

  defp body(%Event{kind: :return_to} = e, _io, _opts),
    do: ["<- returned to ", MFA.to_string(Event.mfa(e))]

  defp body(%Event{kind: :send} = e, io, _opts),
    do: ["send ", inspect(e.data, io), " to ", inspect(e.peer)]

  defp body(%Event{kind: :send_to_non_existing} = e, io, _opts),
    do: ["send ", inspect(e.data, io), " to ", inspect(e.peer), " (no such process)"]

  defp body(%Event{kind: :receive} = e, io, _opts), do: ["receive ", inspect(e.data, io)]

  # A `receive ... after` that timed out (traced with `timeouts: true`): no message.
  defp body(%Event{kind: :timeout}, _io, _opts), do: "after timeout"

  defp body(%Event{kind: :spawn} = e, io, _opts),
    do: ["spawn ", inspect(e.peer), " as ", format_spawn(e.data, io)]

  defp body(%Event{kind: :spawned} = e, io, _opts),
    do: ["spawned by ", inspect(e.peer), " as ", format_spawn(e.data, io)]

  defp body(%Event{kind: :exit} = e, io, opts),
    do: colorize(["exit ", inspect(e.data, io)], :yellow, opts)

  defp body(%Event{kind: kind, peer: peer} = e, io, _opts) when is_nil(e.data),
    do: [to_string(kind), " ", inspect(peer, io)]

  defp body(%Event{kind: kind} = e, io, _opts), do: [to_string(kind), " ", inspect(e.data, io)]

  defp format_spawn({m, f, args}, io) when is_atom(m) and is_atom(f) and is_list(args),
    do: [MFA.call(m, f), "(", Enum.map_join(args, ", ", &inspect(&1, io)), ")"]

  defp format_spawn(other, io), do: inspect(other, io)

  defp call_name(%Event{module: m, function: f, arity: a}, opts) when not is_nil(m),
    do: colorize(["  ", MFA.to_string({m, f, a})], :faint, opts)

  defp call_name(_, _), do: []

  defp duration(%Event{duration: nil}, _opts), do: []

  defp duration(%Event{duration: ns}, opts),
    do: colorize([" (", format_duration(ns), ")"], :yellow, opts)

  @spec format_duration(non_neg_integer()) :: String.t()
  def format_duration(ns) when ns < 1_000, do: "#{ns} ns"
  def format_duration(ns) when ns < 10_000, do: "#{Float.round(ns / 1_000, 1)} µs"
  def format_duration(ns) when ns < 1_000_000, do: "#{div(ns + 500, 1_000)} µs"
  def format_duration(ns) when ns < 1_000_000_000, do: "#{Float.round(ns / 1_000_000, 1)} ms"
  def format_duration(ns), do: "#{Float.round(ns / 1_000_000_000, 2)} s"

  @spec format_caller(Event.caller()) :: String.t()
  def format_caller({m, f, a, {file, line}}),
    do:
      IO.iodata_to_binary([MFA.to_string({m, f, a}), " at ", file, ":", Integer.to_string(line)])

  def format_caller({m, f, a}), do: MFA.to_string({m, f, a})

  defp format_time(us) do
    {{_, _, _}, {h, m, s}} = :calendar.system_time_to_local_time(div(us, 1_000_000), :second)
    frac = rem(us, 1_000_000)
    :io_lib.format(~c"~2..0B:~2..0B:~2..0B.~6..0B", [h, m, s, frac])
  end

  # Printer colours its end-of-trace line the same way.
  @spec colorize(iodata(), atom(), keyword()) :: iodata()
  def colorize(text, color, opts) do
    if Keyword.get(opts, :colors, false),
      do: [apply(IO.ANSI, color, []), text, IO.ANSI.reset()],
      else: text
  end

  # Terms within limits, for the widget's rows (KinoTrace.Widget.Payload documents the
  # limits) and Mermaid's labels.
  @term_limits [limit: 20, printable_limit: 120, max_chars: 400]

  @spec term_limits() :: keyword()
  def term_limits, do: @term_limits

  # A term in one line within the limits: {text, whether something was left out}.
  @spec term(term(), keyword()) :: {String.t(), boolean()}
  def term(term, limits \\ []) do
    limits = Keyword.merge(@term_limits, limits)
    text = inspect(term, inspect_opts(limits))
    {text, chars_cut?} = cap(text, limits[:max_chars])
    {text, chars_cut? or over_limits?(term, limits)}
  end

  @spec inspect_opts(keyword()) :: keyword()
  def inspect_opts(limits) do
    [limit: limits[:limit], printable_limit: limits[:printable_limit], width: :infinity]
  end

  @spec cap(String.t(), non_neg_integer()) :: {String.t(), boolean()}
  def cap(text, max_chars) do
    if byte_size(text) > max_chars and String.length(text) > max_chars do
      {String.slice(text, 0, max_chars) <> " ...", true}
    else
      {text, false}
    end
  end

  # Whether inspect with these limits leaves something out, including native cuts.
  # Walks no further than the limits allow, so it costs about as much as the inspect.
  @spec over_limits?(term(), keyword()) :: boolean()
  def over_limits?(term, limits), do: over?(term, limits[:limit], limits[:printable_limit])

  defp over?(%Cut{}, _limit, _plimit), do: true

  defp over?(binary, limit, plimit) when is_binary(binary) do
    if String.printable?(binary, plimit + 1),
      do: String.length(binary) > plimit,
      else: byte_size(binary) > limit
  end

  defp over?(list, limit, plimit) when is_list(list), do: list_over?(list, limit, limit, plimit)

  defp over?(tuple, limit, plimit) when is_tuple(tuple) do
    tuple_size(tuple) > limit or list_over?(Tuple.to_list(tuple), limit, limit, plimit)
  end

  defp over?(%_{} = struct, limit, plimit) do
    over?(Map.from_struct(struct), limit, plimit)
  end

  defp over?(map, limit, plimit) when is_map(map) do
    map_size(map) > limit or
      Enum.any?(map, fn {k, v} -> over?(k, limit, plimit) or over?(v, limit, plimit) end)
  end

  defp over?(_term, _limit, _plimit), do: false

  defp list_over?([], _left, _limit, _plimit), do: false
  defp list_over?([_ | _], 0, _limit, _plimit), do: true

  defp list_over?([head | tail], left, limit, plimit) do
    over?(head, limit, plimit) or list_over?(tail, left - 1, limit, plimit)
  end

  defp list_over?(improper_tail, _left, limit, plimit), do: over?(improper_tail, limit, plimit)

  # A term as Elixir code, kept short: how assertion messages write values.
  @code_opts [limit: 20, printable_limit: 120, pretty: false, width: :infinity]

  @spec code(term()) :: String.t()
  def code(value), do: inspect(value, @code_opts)

  # A call as Elixir code, `Mod.fun(1, :a)`, its arguments inspected with `inspect_opts`
  # (by default as code/1 writes them).
  @spec call(module() | nil, atom(), [term()], keyword()) :: String.t()
  def call(module, function, args, inspect_opts \\ @code_opts),
    do:
      MFA.call(module, function) <>
        "(" <> Enum.map_join(args, ", ", &inspect(&1, inspect_opts)) <> ")"

  ## The widget's rows (KinoTrace.Widget.Payload): {text or nil, whether something was cut}

  # A call, the function as a person reads it (MFA.label_call/3).
  @spec row_call(Event.t(), keyword()) :: {String.t() | nil, boolean()}
  def row_call(%Event{kind: :call, args: args} = event, limits) when is_list(args) do
    rendered = Enum.map_join(args, ", ", &inspect(&1, inspect_opts(limits)))
    {text, chars_cut?} = cap(rendered, limits[:max_chars])
    cut? = chars_cut? or Enum.any?(args, &over_limits?(&1, limits))

    text =
      if event.module == nil,
        do: "(" <> text <> ")",
        else: MFA.label_call(event.module, event.function, text)

    {text, cut?}
  end

  def row_call(_event, _limits), do: {nil, false}

  @doc """
  A message as a person reads it (the widget's rows and lanes, Mermaid's arrows):
  `{text, whether something was cut}`. The envelopes OTP wraps requests and replies in
  read by what they carry: a GenServer call `{:"$gen_call", from, request}` as
  `call request`, a cast as `cast request`, a reply (or a Task's result) `{ref, value}`
  as `reply value`. Any other message is the term (`term/2`). The raw message is the
  event's `:data`.

      iex> KinoTrace.Render.message({:"$gen_call", {self(), [:alias | make_ref()]}, :bump}) |> elem(0)
      "call :bump"
      iex> KinoTrace.Render.message({[:alias | make_ref()], 0}) |> elem(0)
      "reply 0"
      iex> KinoTrace.Render.message({:"$gen_cast", {:push, 1}}) |> elem(0)
      "cast {:push, 1}"
      iex> KinoTrace.Render.message({:ping, 1})
      {"{:ping, 1}", false}
  """
  @spec message(term(), keyword()) :: {String.t(), boolean()}
  def message(message, limits \\ []) do
    case otp_message(message) do
      {what, payload} ->
        {text, cut?} = term(payload, limits)
        {what <> " " <> text, cut?}

      nil ->
        term(message, limits)
    end
  end

  defp otp_message({:"$gen_call", {from, _tag}, request}) when is_pid(from), do: {"call", request}
  defp otp_message({:"$gen_cast", request}), do: {"cast", request}
  defp otp_message({ref, reply}) when is_reference(ref), do: {"reply", reply}
  defp otp_message({[:alias | ref], reply}) when is_reference(ref), do: {"reply", reply}
  defp otp_message(_message), do: nil

  # The function a spawn runs, as a person reads it (MFA.label/1): `Mod.fun/arity`, nil
  # for data that is not a {module, function, args}.
  @spec row_spawn(Event.t()) :: String.t() | nil
  def row_spawn(%Event{kind: kind, data: {m, f, args}})
      when kind in [:spawn, :spawned] and is_atom(m) and is_atom(f) do
    if is_list(args) and not improper?(args), do: MFA.label({m, f, length(args)})
  end

  def row_spawn(_event), do: nil

  defp improper?([_ | tail]), do: improper?(tail)
  defp improper?(tail), do: tail != []

  # An exception's banner.
  @spec row_exception(Event.t(), keyword()) :: {String.t() | nil, boolean()}
  def row_exception(%Event{kind: :exception, exception: {class, reason}}, limits) do
    {text, chars_cut?} = cap(banner(class, reason, inspect_opts(limits)), limits[:max_chars])
    {text, chars_cut? or over_limits?(reason, limits)}
  end

  def row_exception(_event, _limits), do: {nil, false}

  @doc """
  What an exception raised out of a call reads as, everywhere (the printer, Mermaid,
  the widget's rows and details): Elixir's banner, the Erlang error normalized to its
  exception (`:function_clause` is a `FunctionClauseError`); throws and exits as
  `** (throw) value`, `** (exit) reason`. Terms in it are inspected with `io`. The raw
  class and reason are the event's `:exception`.

      iex> KinoTrace.Render.banner(:error, :function_clause)
      "** (FunctionClauseError) no function clause matches"
      iex> KinoTrace.Render.banner(:error, %RuntimeError{message: "boom"})
      "** (RuntimeError) boom"
      iex> KinoTrace.Render.banner(:throw, :ball)
      "** (throw) :ball"
  """
  @spec banner(atom(), term(), keyword()) :: String.t()
  def banner(class, reason, io \\ @inspect_opts)

  def banner(:error, reason, io) do
    Exception.format_banner(:error, reason)
  rescue
    _ -> "** (error) " <> inspect(reason, io)
  end

  def banner(class, reason, io), do: "** (#{class}) " <> inspect(reason, io)

  # A term whole, pretty-printed, for an expanded row: at most `max_chars` characters.
  @spec pretty(term(), non_neg_integer()) :: String.t()
  def pretty(term, max_chars) do
    text = inspect(term, pretty: true, width: 80, limit: :infinity, printable_limit: :infinity)
    {text, _} = cap(text, max_chars)
    text
  end
end
