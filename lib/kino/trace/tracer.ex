defmodule Kino.Trace.Tracer do
  @moduledoc """
  kino_trace's native tracer: an `erl_tracer` module whose callbacks are NIFs.

  The VM calls `enabled/3` (and its `enabled_*` variants) and `trace/5` (and its
  `trace_*` variants) inside the traced process. The tracer state is a *session
  resource* made by `new_session/2`, which holds the session's limits and its lock-free
  event queue:

      resource = Kino.Trace.Tracer.new_session(self(), %{limit: 100})
      session = :trace.session_create(:my_trace, {Kino.Trace.Tracer, resource}, [])
      :trace.process(session, pid, true, [:call])
      :trace.function(session, {MyMod, :_, :_}, true, [:local])
      # the owner gets {:kino_trace, id, :ready} when the queue goes from empty to non-empty
      {events, more?} = Kino.Trace.Tracer.drain(resource, 500)

  Limits (all optional, in the map given to `new_session/2`) are named and shaped as the
  options of `Kino.Trace.calls/2` (see `Kino.Trace.Options.native_limits/1`):
  `:limit` (`nil` or a count; then the session closes and the owner gets
  `{:kino_trace, id, :limit_reached}`), `:rate` (`nil` or `{count, period_ms}`: a token
  bucket, over-rate events are dropped and counted), `:queue` (`[events: n, bytes: n]`,
  either optional: queue caps), the term caps `:max_depth`, `:max_items`, `:max_binary`,
  `:max_bytes`, and `:skip_returns` (a boolean: `return_from` events are not wanted).
  A struct with these keys will do; other keys are ignored. The bounds are the tracer's
  own: a value out of range raises an `ArgumentError` naming the option, in its terms.
  `counters/1` tells what happened to every event.

      iex> Kino.Trace.Tracer.new_session(self(), %{rate: {1, 86_400_001}})
      ** (ArgumentError) invalid value for :rate: expected a period of at most 86400000 ms

  The caps bound the work done in the traced process whatever the terms: a list costs
  what its first `:max_items` elements cost, a binary or bitstring its first
  `:max_binary` bytes; an integer or the values a fun captured are copied whole only up
  to `:max_binary` bytes, else described (sign and size; module, index and arity). The
  parts left out become `Kino.Trace.Cut` structs:

      iex> {copy, _bytes} = Kino.Trace.Tracer.roundtrip(<<1, 2, 3, 4, 5::3>>, %{max_binary: 2})
      iex> copy
      %Kino.Trace.Cut{kind: :bitstring, value: <<1, 2>>, size: 35}
      iex> {copy, _bytes} = Kino.Trace.Tracer.roundtrip(2 ** 5000, %{})
      iex> inspect(copy)
      "0x100000000000000... (5001 bits)"

  This is the low-level layer: use `Kino.Trace` instead.
  """

  @on_load :load_nif
  @nif_path ~c"kino_trace_nif"

  @doc false
  def load_nif do
    path = :filename.join(:code.priv_dir(:kino_trace), @nif_path)

    case :erlang.load_nif(path, 0) do
      :ok ->
        :ok

      {:error, {:reload, _}} ->
        :ok

      {:error, reason} ->
        IO.warn(
          "kino_trace: could not load its native tracer from #{path}: #{load_error(reason)}"
        )

        :ok
    end
  end

  # Why the NIF refused to load: erl_nif lets its load callback return only a number, so
  # the NIF sends its reason (such as "unsupported term layout: ...") to the
  # loading process. Other failures (no library, wrong architecture...) are as the VM tells.
  defp load_error(reason) do
    receive do
      {:kino_trace_load_error, message} -> "#{message} (#{inspect(reason)})"
    after
      0 -> inspect(reason)
    end
  end

  @typedoc "A native session: the tracer state given to `:trace.session_create/3`."
  @opaque resource :: reference()

  @typedoc "A raw event as `drain/2` returns it."
  @type raw_event ::
          {tag :: atom(), pid() | port() | :undefined, monotonic_ns :: integer(),
           scheduler :: non_neg_integer(), module() | :undefined, atom() | :undefined,
           arity :: non_neg_integer(), term(), term(), drop_mark :: non_neg_integer()}

  # --- erl_tracer callbacks (NIFs) -------------------------------------------------------

  @doc false
  def enabled(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  @doc false
  def enabled_call(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  @doc false
  def enabled_send(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  @doc false
  def enabled_receive(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  @doc false
  def enabled_procs(_tag, _state, _tracee), do: :erlang.nif_error(:not_loaded)
  @doc false
  def trace(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)
  @doc false
  def trace_call(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)
  @doc false
  def trace_send(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)
  @doc false
  def trace_receive(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)
  @doc false
  def trace_procs(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:not_loaded)

  # --- session management -------------------------------------------------------------

  @typedoc "A session's limits, as the options name and shape them (see the module doc)."
  @type limits :: %{
          optional(:limit) => non_neg_integer() | nil,
          optional(:rate) => {non_neg_integer(), non_neg_integer()} | nil,
          optional(:queue) => [events: non_neg_integer(), bytes: non_neg_integer()],
          optional(:max_depth) => non_neg_integer(),
          optional(:max_items) => non_neg_integer(),
          optional(:max_binary) => non_neg_integer(),
          optional(:max_bytes) => non_neg_integer(),
          optional(:skip_returns) => boolean(),
          optional(atom()) => term()
        }

  @doc "Creates a native session owned (and drained) by `owner`, with the given limits."
  @spec new_session(pid(), limits()) :: resource()
  def new_session(_owner, _limits), do: :erlang.nif_error(:not_loaded)

  @doc "The session's id, as found in its `{:kino_trace, id, _}` messages."
  @spec session_id(resource()) :: pos_integer()
  def session_id(_resource), do: :erlang.nif_error(:not_loaded)

  @doc "Takes up to `max` (1..10000) events. Returns them and whether more may be waiting."
  @spec drain(resource(), pos_integer()) :: {[raw_event()], boolean()}
  def drain(_resource, _max), do: :erlang.nif_error(:not_loaded)

  @doc "The session's counters: accepted, delivered, queued, dropped by reason, ..."
  @spec counters(resource()) :: map()
  def counters(_resource), do: :erlang.nif_error(:not_loaded)

  @doc """
  Closes the session: nothing more is accepted, and every queued event is freed (counted
  as `discarded`). The freeing runs natively in slices that yield to the scheduler, so a
  queue of a million events takes tens of milliseconds and holds no scheduler meanwhile.
  """
  @spec close(resource()) :: :ok
  def close(_resource), do: :erlang.nif_error(:not_loaded)

  @doc """
  Copies `term` as the tracer would, with the caps of the given limits (as
  `new_session/2` takes them), and returns the copy and its encoded size in bytes.

      iex> {copy, _bytes} = Kino.Trace.Tracer.roundtrip(Enum.to_list(1..100), %{max_items: 3})
      iex> inspect(copy)
      "[1, 2, 3, ...]"
  """
  @spec roundtrip(term(), limits()) :: {term(), non_neg_integer()}
  def roundtrip(_term, _caps), do: :erlang.nif_error(:not_loaded)

  @doc """
  The Elixir structs the native tracer builds, as `[{module, keys}]` (`:__struct__` left
  out): one table in the NIF (`c_src/nif/structs.hpp`), checked against each `defstruct`
  by the tests.
  """
  @spec struct_keys() :: [{module(), [atom()]}]
  def struct_keys, do: :erlang.nif_error(:not_loaded)

  # --- the native decoder (see Kino.Trace.NativeDecoder) ----------------------------------

  @typedoc "A native decoder: the call pairing of one trace (see `Kino.Trace.NativeDecoder`)."
  @opaque decoder :: reference()

  @doc false
  @spec new_decoder(boolean(), node()) :: decoder()
  def new_decoder(_pairing, _node), do: :erlang.nif_error(:not_loaded)

  @doc false
  @spec decoder_no_returns(decoder(), [mfa()]) :: :ok
  def decoder_no_returns(_decoder, _mfas), do: :erlang.nif_error(:not_loaded)

  @doc false
  @spec decoder_unpair(decoder(), pid()) :: :ok
  def decoder_unpair(_decoder, _pid), do: :erlang.nif_error(:not_loaded)

  @doc false
  @spec decoder_take_callers(decoder()) :: [pid()]
  def decoder_take_callers(_decoder), do: :erlang.nif_error(:not_loaded)

  @doc false
  @spec decoder_put_names(decoder(), [{pid(), atom()}]) :: :ok
  def decoder_put_names(_decoder, _names), do: :erlang.nif_error(:not_loaded)

  @doc false
  @spec drain_events(resource(), decoder(), pos_integer()) :: {[tuple()], boolean()} | {:names, [pid()]}
  def drain_events(_resource, _decoder, _max), do: :erlang.nif_error(:not_loaded)

  @doc false
  @spec decode_events(decoder(), [raw_event()]) :: [tuple()] | {:names, [pid()]}
  def decode_events(_decoder, _raw), do: :erlang.nif_error(:not_loaded)

  @doc "True when the native tracer is loaded."
  @spec loaded?() :: boolean()
  def loaded? do
    nif_loaded()
  rescue
    _ -> false
  end

  defp nif_loaded, do: :erlang.nif_error(:not_loaded)
end
