defmodule Kino.Trace.Capture do
  @moduledoc """
  The calls captured by `Kino.Trace.capture/3`: every event of the block, in order, and
  the block's result.

      capture = Kino.Trace.capture(["Enum.sum/1"], fn -> Enum.sum([1, 2]) end)
      [%Kino.Trace.Event{kind: :call, args: [[1, 2]]}, %Kino.Trace.Event{kind: :return, return: 3}] =
        capture.events

  Use it with `Kino.Trace.Assertions`. With `messages: true` and `processes: true`,
  the capture also records what the traced processes send and receive (`:pattern`
  filters messages) and their lifecycle (spawn, exit, link, register...).
  """

  alias Kino.Trace.{Options, Pattern, Session}

  defstruct events: [], result: nil, patterns: [], info: %{}

  @type t :: %__MODULE__{
          events: [Kino.Trace.Event.t()],
          result: term(),
          patterns: [String.t()],
          info: map()
        }

  @defaults Keyword.merge(Options.defaults(),
              pids: [],
              children: true,
              history: 1,
              limit: 1_000_000,
              max_items: 100,
              max_binary: 4096,
              max_bytes: 65_536
            )

  @doc false
  def run(patterns, fun, opts) do
    {extra_pids, opts} = Keyword.pop(opts, :pids, [])
    {messages?, opts} = Keyword.pop(opts, :messages, false)
    {processes?, opts} = Keyword.pop(opts, :processes, false)

    unless is_boolean(messages?) and is_boolean(processes?) do
      raise ArgumentError, "invalid value for :messages or :processes: expected a boolean"
    end

    opts = Options.validate!(opts, Keyword.delete(@defaults, :pids))

    extra_pids = if extra_pids == [], do: [], else: Options.validate!([pids: extra_pids])[:pids] |> Options.resolve_pids()

    {patterns, warnings} = Pattern.parse_all!(patterns, Session.pattern_opts(opts))
    Enum.each(warnings, &IO.warn(&1, []))

    targets = [self() | extra_pids]

    opts =
      Keyword.merge(opts,
        pids: targets,
        collect: true,
        messages: if(messages?, do: Kino.Trace.message_plan(targets, opts)),
        processes: if(processes?, do: Kino.Trace.process_plan(targets))
      )

    trace = Kino.Trace.start!(self(), patterns, opts)

    try do
      result = fun.()
      events = collect(trace, [self() | extra_pids])
      %__MODULE__{events: events, result: result, patterns: Enum.map(patterns, &Pattern.to_string/1), info: Kino.Trace.info(trace)}
    after
      Kino.Trace.stop(trace)
    end
  end

  # The NIF tracer runs inside the traced process, so once trace_delivered answers, every
  # event of the block is in the native queue; the session then drains it all.
  defp collect(trace, _pids) do
    ref = :erlang.trace_delivered(:all)

    receive do
      {:trace_delivered, :all, ^ref} -> :ok
    end

    GenServer.call(trace.session, :collect, :infinity)
  end
end
