defmodule KinoTrace.Tracer.NativeDecoder do
  @moduledoc false
  # `KinoTrace.Tracer.Decoder` in the native tracer: a local session drains its events already
  # decoded (numbered, timed, calls paired with their returns), in one NIF call per batch.
  #
  # It gives the events `KinoTrace.Tracer.Decoder` gives for the same raw events: both implement
  # the call pairing rule written out in `KinoTrace.Tracer.Decoder`'s moduledoc, and
  # `test/kino_trace/tracer/native_decoder_test.exs` checks they agree. Same API besides
  # draining: `no_returns/2`,
  # `unpair/2` and `take_callers/1` for the stack guard. Its state lives in a NIF
  # resource, so the functions that change it return the same decoder.

  alias Kino.Trace.Event
  alias KinoTrace.Tracer
  alias KinoTrace.Tracer.Decoder

  defstruct [:ref]

  @type t :: %__MODULE__{ref: Tracer.decoder()}

  @doc """
  A new decoder; options as `KinoTrace.Tracer.Decoder.new/1`.

  ## Examples

      iex> decoder = KinoTrace.Tracer.NativeDecoder.new()
      iex> pid = self()
      iex> raw = [
      ...>   {:call, pid, 1_000, 1, Enum, :sum, 1, [[1, 2]], :undefined},
      ...>   {:return_from, pid, 4_000, 1, Enum, :sum, 1, :undefined, 3}
      ...> ]
      iex> {[call, return], _decoder} = KinoTrace.Tracer.NativeDecoder.decode(decoder, raw)
      iex> {call.kind, call.args, return.kind, return.return, return.duration, return.call_id == call.id}
      {:call, [[1, 2]], :return, 3, 3_000, true}

  The raw events of `decode/2` are those of `KinoTrace.Tracer.drain/2` on this node
  (local pids and ports, atoms for modules and functions).
  """
  @spec new(keyword()) :: t()
  def new(opts \\ []) do
    %__MODULE__{
      ref: Tracer.new_decoder(Keyword.get(opts, :pairing, true) not in [nil, false], node())
    }
  end

  @doc "As `KinoTrace.Tracer.Decoder.no_returns/2`."
  @spec no_returns(t(), MapSet.t(mfa())) :: t()
  def no_returns(%__MODULE__{ref: ref} = decoder, mfas) do
    :ok = Tracer.decoder_no_returns(ref, Enum.to_list(mfas))
    decoder
  end

  @doc "As `KinoTrace.Tracer.Decoder.unpair/2`."
  @spec unpair(t(), pid()) :: t()
  def unpair(%__MODULE__{ref: ref} = decoder, pid) do
    :ok = Tracer.decoder_unpair(ref, pid)
    decoder
  end

  @doc """
  As `KinoTrace.Tracer.Decoder.take_callers/1`.

      iex> pid = self()
      iex> decoder = KinoTrace.Tracer.NativeDecoder.new()
      iex> {_events, decoder} = KinoTrace.Tracer.NativeDecoder.decode(decoder, [{:call, pid, 1, 1, M, :f, 0, [], :undefined}])
      iex> {callers, decoder} = KinoTrace.Tracer.NativeDecoder.take_callers(decoder)
      iex> {callers, elem(KinoTrace.Tracer.NativeDecoder.take_callers(decoder), 0)}
      {[pid], []}
  """
  @spec take_callers(t()) :: {[pid()], t()}
  def take_callers(%__MODULE__{ref: ref} = decoder),
    do: {Tracer.decoder_take_callers(ref), decoder}

  @doc """
  Drains up to `max` (1..10000) events of the native session `resource`, decoded.
  Returns them and whether more may be waiting, as `KinoTrace.Tracer.drain/2`.
  """
  @spec drain(t(), Tracer.resource(), pos_integer()) :: {[Kino.Trace.Event.t()], Tracer.more()}
  def drain(%__MODULE__{ref: ref} = decoder, resource, max) do
    case Tracer.drain_events(resource, ref, max) do
      {:names, pids} ->
        put_names(ref, pids)
        drain(decoder, resource, max)

      {tuples, more} ->
        {events(tuples), more}
    end
  end

  @doc "Decodes a batch of raw events, as `KinoTrace.Tracer.Decoder.decode/2`."
  @spec decode(t(), [Tracer.raw_event()]) :: {[Kino.Trace.Event.t()], t()}
  def decode(%__MODULE__{ref: ref} = decoder, raw) do
    case Tracer.decode_events(ref, raw) do
      {:names, pids} ->
        put_names(ref, pids)
        decode(decoder, raw)

      tuples ->
        {events(tuples), decoder}
    end
  end

  # The NIF hands each event over as a tuple of its fields in defstruct order (see
  # c_src/nif/structs.hpp, checked against the defstruct): made a struct here, each event
  # shares the struct's key tuple (a literal), which sending and garbage collection do
  # not copy, and the VM need not check the keys of a map made natively.
  @fields for %{field: field} <- Event.__info__(:struct), do: field
  @vars Enum.map(@fields, &Macro.var(&1, nil))

  @doc false
  @spec fields() :: [atom()]
  def fields, do: @fields

  defp events(tuples) do
    for unquote({:{}, [], @vars}) <- tuples,
        do: unquote({:%, [], [Event, {:%{}, [], Enum.zip(@fields, @vars)}]})
  end

  defp put_names(ref, pids),
    do: Tracer.decoder_put_names(ref, Enum.map(pids, &{&1, Decoder.registered_name(&1)}))
end
