defmodule KinoTrace.Tracer.RawEvent do
  @moduledoc false
  # The raw event's shape (`KinoTrace.Tracer.raw_event/0`), read from its one definition,
  # the record of src/kino_trace_raw_event.hrl (`Record.extract/2`): a tuple whose first
  # element is the event's tag (the record's name slot) and whose other elements are the
  # record's fields, in its order. `raw_event/2` builds or matches one by field names, as
  # a record's macro does, with the tag given apart (it varies from event to event).

  require Record

  @hrl Path.expand("../../../src/kino_trace_raw_event.hrl", __DIR__)
  @external_resource @hrl
  @fields Record.extract(:kino_trace_raw_event, from: @hrl)
  @names Keyword.keys(@fields)
  @size length(@fields) + 1

  # A raw event without its last field (as the docs' examples write them) has that
  # field's default.
  {last, last_default} = List.last(@fields)
  @last last
  @last_default last_default

  @doc "The record's fields with their defaults, in the raw event's order (after the tag)."
  @spec fields() :: keyword()
  def fields, do: @fields

  @doc "The number of elements of a raw event, its tag included."
  @spec size() :: pos_integer()
  def size, do: @size

  @doc """
  The position of a field in a raw event (1-based, as `:erlang.element/2` counts: the
  tag is 1).

      iex> KinoTrace.Tracer.RawEvent.position(:time)
      3
  """
  @spec position(atom()) :: pos_integer()
  def position(field) do
    case Enum.find_index(@names, &(&1 == field)) do
      nil -> raise ArgumentError, "the raw event has no field #{inspect(field)}"
      i -> i + 2
    end
  end

  @doc """
  A raw event from its tag and fields (the others have their defaults), or, in a
  pattern, one matching them (the others match anything).

      iex> import KinoTrace.Tracer.RawEvent, only: [raw_event: 2]
      iex> raw_event(:call, pid: :undefined, time: 5, module: M, function: :f)
      {:call, :undefined, 5, 0, M, :f, 0, :undefined, :undefined, 0}
      iex> raw_event(tag, time: t) = {:exit, self(), 7, 1, :undefined, :undefined, 0, :normal, :undefined, 0}
      iex> {tag, t}
      {:exit, 7}
  """
  defmacro raw_event(tag, fields) do
    case Keyword.keys(fields) -- @names do
      [] -> :ok
      unknown -> raise ArgumentError, "the raw event has no field(s) #{inspect(unknown)}"
    end

    missing =
      if Macro.Env.in_match?(__CALLER__),
        do: fn _default -> Macro.var(:_, nil) end,
        else: &Macro.escape/1

    values = for {name, default} <- @fields, do: Keyword.get(fields, name, missing.(default))
    {:{}, [], [tag | values]}
  end

  @doc """
  A raw event with all its fields: one without its last field (`#{@last}`) gets that
  field's default.

      iex> KinoTrace.Tracer.RawEvent.complete({:call, :undefined, 5, 0, M, :f, 0, [], :undefined})
      {:call, :undefined, 5, 0, M, :f, 0, [], :undefined, 0}
  """
  @spec complete(tuple()) :: tuple()
  def complete(raw) when tuple_size(raw) == @size - 1,
    do: :erlang.append_element(raw, @last_default)

  def complete(raw) when tuple_size(raw) == @size, do: raw
end
