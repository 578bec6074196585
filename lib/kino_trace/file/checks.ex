defmodule KinoTrace.File.Checks do
  @moduledoc false
  # What the terms of a trace file must be (`KinoTrace.File.Format` reads them): the
  # fields of an event, and the info of its header. A hostile file cannot hand the front
  # ends an event whose kind, MFA, times or process are of another type, nor an info
  # whose counters are not counters. The terms an event carries (its arguments, return
  # value, message...) may be anything.

  alias Kino.Trace.Event

  @fields Event.__struct__() |> Map.from_struct() |> Map.keys() |> Enum.sort()
  @kinds Event.kinds()

  @doc """
  The fields of an event, in the order a file's event tuple holds them.

      iex> KinoTrace.File.Checks.fields() |> Enum.take(3)
      [:args, :arity, :call_id]
  """
  @spec fields() :: [atom()]
  def fields, do: @fields

  @doc """
  The event of a file's event tuple (`fields/0` in order), or throws `{:bad, reason,
  offset}` when a field is not what the front ends rely on.
  """
  @spec event!(term(), non_neg_integer()) :: Event.t()
  def event!(tuple, offset) when is_tuple(tuple) and tuple_size(tuple) == length(@fields) do
    event = struct(Event, Enum.zip(@fields, Tuple.to_list(tuple)))

    case Enum.find(@fields, &(not valid?(&1, Map.fetch!(event, &1)))) do
      nil ->
        event

      field ->
        throw(
          {:bad, "an event whose #{field} is #{inspect(Map.fetch!(event, field), limit: 5)}",
           offset}
        )
    end
  end

  def event!(_other, offset),
    do: throw({:bad, "an event frame that holds something other than events", offset})

  # What each field of an event may be (what the front ends rely on); the terms
  # (args, return, data, the peer: a pid, or the name a message was sent to...) may be anything.
  defp valid?(:kind, kind), do: kind in @kinds
  defp valid?(:id, id), do: is_nil(id) or pos_int?(id)

  defp valid?(field, name) when field in [:module, :function, :name, :node],
    do: is_nil(name) or name?(name)

  defp valid?(:arity, arity), do: is_nil(arity) or (is_integer(arity) and arity in 0..255)
  defp valid?(:args, args), do: is_nil(args) or is_list(args)
  defp valid?(field, time) when field in [:time, :monotonic], do: is_nil(time) or is_integer(time)

  defp valid?(field, n) when field in [:call_id, :duration],
    do: is_nil(n) or (is_integer(n) and n >= 0)

  defp valid?(field, n) when field in [:scheduler, :depth], do: is_integer(n) and n >= 0
  defp valid?(:lost, lost), do: is_boolean(lost)
  defp valid?(:pid, p), do: process?(p)
  defp valid?(:caller, caller), do: caller?(caller)
  defp valid?(:exception, exception), do: exception?(exception)
  defp valid?(_field, _term), do: true

  defp pos_int?(i), do: is_integer(i) and i > 0

  # an atom, or one this node does not know
  defp name?(%KinoTrace.Base.Name{text: text}), do: is_binary(text)
  defp name?(a), do: is_atom(a)

  defp process?(p),
    do:
      is_nil(p) or is_pid(p) or is_port(p) or
        match?(%Kino.Trace.Foreign{type: t} when t in [:pid, :port], p)

  defp caller?(nil), do: true
  defp caller?({m, f, a}), do: name?(m) and name?(f) and is_integer(a)

  defp caller?({m, f, a, {file, line}}),
    do: name?(m) and name?(f) and is_integer(a) and is_binary(file) and is_integer(line)

  defp caller?(_), do: false

  defp exception?(nil), do: true
  defp exception?({class, _reason}), do: name?(class)
  defp exception?(_), do: false

  # The info a file keeps, as `Kino.Trace.info/1` gives it: only its known keys, each of
  # the right type (a hostile file cannot hand the front ends something else).
  @counters [
    :accepted,
    :delivered,
    :queued,
    :discarded,
    :bytes_queued,
    :stack_guarded,
    :reapplied
  ]
  @drops [:rate, :queue_full, :max_events, :closed, :no_memory]
  @statuses [:running, :paused, :stopped, :limit_reached, :timeout]

  @doc "The info a file's header holds, as `Kino.Trace.info/1` gives it (its known keys, each of the right type)."
  @spec info(term()) :: map()
  def info(info) when is_map(info) do
    counters = Map.new(@counters, &{&1, non_neg(info[&1])})
    dropped = if is_map(info[:dropped]), do: info[:dropped], else: %{}

    Map.merge(counters, %{
      id: if(pos_int?(info[:id]), do: info[:id], else: nil),
      status: if(info[:status] in @statuses, do: info[:status], else: :stopped),
      patterns: for(p <- List.wrap(info[:patterns]), is_binary(p), do: p),
      what: what(info[:what]),
      dropped: Map.new(@drops, &{&1, non_neg(dropped[&1])}),
      started_at: int_or_nil(info[:started_at]),
      limit: if(pos_int?(info[:limit]), do: info[:limit]),
      tracer: tracer(info[:tracer])
    })
  end

  defp what(%{calls: calls} = what) when is_boolean(calls) do
    text = fn key -> if is_binary(what[key]), do: what[key] end

    %{
      calls: calls,
      messages: text.(:messages),
      message_pattern: text.(:message_pattern),
      processes: text.(:processes)
    }
  end

  defp what(_), do: nil

  defp tracer({:fallback, why}) when is_binary(why), do: {:fallback, why}
  defp tracer(_), do: :native

  defp non_neg(n) when is_integer(n) and n >= 0, do: n
  defp non_neg(_), do: 0

  defp int_or_nil(n) when is_integer(n), do: n
  defp int_or_nil(_), do: nil
end
