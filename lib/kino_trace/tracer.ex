defmodule KinoTrace.Tracer do
  @moduledoc false
  # kino_trace's native tracer: the Elixir API of `:kino_trace_tracer`, an `erl_tracer`
  # module whose callbacks are NIFs.
  #
  # `:kino_trace_tracer` (`src/kino_trace_tracer.erl`) is written in Erlang so that a node
  # without Elixir can load it; this module delegates to it. The VM calls its `enabled*/3`
  # and `trace*/5` callbacks inside the traced process, so it is `:kino_trace_tracer` that
  # is given to `:trace.session_create/3`. The tracer state is a *session resource* made
  # by `new_session/2`, which holds the session's limits and its lock-free event queue:
  #
  #     resource = KinoTrace.Tracer.new_session(self(), %{limit: 100})
  #     session = :trace.session_create(:my_trace, {:kino_trace_tracer, resource}, [])
  #     :trace.process(session, pid, true, [:call])
  #     :trace.function(session, {MyMod, :_, :_}, true, [:local])
  #     # the owner gets {:kino_trace, id, :ready} when the queue goes from empty to non-empty
  #     {events, more} = KinoTrace.Tracer.drain(resource, 500)
  #     # more: true (drain again), false, or :recheck (drain once more a moment later: see `t:more/0`)
  #
  # Limits (all optional, in the map given to `new_session/2`) are named and shaped as the
  # options of `Kino.Trace.calls/2` (see `KinoTrace.Plan.Options.native_limits/1`):
  # `:limit` (`nil` or a count; then the session closes and the owner gets
  # `{:kino_trace, id, :limit_reached}`), `:rate` (`nil` or `{count, period_ms}`: a token
  # bucket, over-rate events are dropped and counted), `:queue` (`[events: n, bytes: n]`,
  # either optional: queue caps), the term caps `:max_depth`, `:max_items`, `:max_binary`,
  # `:max_bytes`, and `:skip_returns` (a boolean: `return_from` events are not wanted).
  # A struct with these keys will do; other keys are ignored. The bounds are the tracer's
  # own: a value out of range raises an `ArgumentError` naming the option, in its terms.
  # `counters/1` tells what happened to every event.

  @typedoc "A native session: the tracer state given to `:trace.session_create/3`."
  @opaque resource :: reference()

  @typedoc """
  A raw event as `drain/2` returns it: the record of src/kino_trace_raw_event.hrl, its
  tag in the name slot (`KinoTrace.Tracer.RawEvent` reads it).
  """
  @type raw_event ::
          {tag :: atom(), pid() | port() | :undefined, monotonic_ns :: integer(),
           scheduler :: non_neg_integer(), module() | :undefined, atom() | :undefined,
           arity :: non_neg_integer(), term(), term(), drop_mark :: non_neg_integer()}

  @typedoc """
  What a drain says is left: `true` (drain again), `false` (nothing: the next event
  wakes the owner), or `:recheck` (nothing, and the queue just went to sleep: an event
  whose wake-up was missed may still come in, so drain once more a moment later; a
  recheck that finds the queue asleep already says `false`). The producer's path has no
  fence, see `c_src/core/session_core.hpp`, "Wake-up".
  """
  @type more :: boolean() | :recheck

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

  @doc """
  Creates a native session owned (and drained) by `owner`, with the given limits.

  ## Examples

      iex> KinoTrace.Tracer.new_session(self(), %{rate: {1, 86_400_001}})
      ** (ArgumentError) invalid value for :rate: expected a period of at most 86400000 ms

  The caps bound the work done in the traced process whatever the terms: a list costs
  what its first `:max_items` elements cost, a binary or bitstring its first
  `:max_binary` bytes; an integer or the values a fun captured are copied whole only up
  to `:max_binary` bytes, else described (sign and size; module, index and arity). The
  parts left out become `Kino.Trace.Cut` structs:

      iex> {copy, _bytes} = KinoTrace.Tracer.roundtrip(<<1, 2, 3, 4, 5::3>>, %{max_binary: 2})
      iex> copy
      %Kino.Trace.Cut{kind: :bitstring, value: <<1, 2>>, size: 35}
      iex> {copy, _bytes} = KinoTrace.Tracer.roundtrip(2 ** 5000, %{})
      iex> inspect(copy)
      "0x100000000000000... (5001 bits)"

  This is the low-level layer: use `Kino.Trace` instead. Where the native tracer is not
  loaded (`loaded?/0` is false: it was not built, or refused to load, `load_error/0`
  says why), its functions raise a `RuntimeError` saying so (`roundtrip/2` excepted),
  and `Kino.Trace` runs on the pure-Erlang tracer.
  """
  @spec new_session(pid(), limits()) :: resource()
  defdelegate new_session(owner, limits), to: :kino_trace_tracer

  @doc "The session's id, as found in its `{:kino_trace, id, _}` messages."
  @spec session_id(resource()) :: pos_integer()
  defdelegate session_id(resource), to: :kino_trace_tracer

  @doc "Takes up to `max` (1..10000) events. Returns them and whether more may be waiting (`t:more/0`)."
  @spec drain(resource(), pos_integer()) :: {[raw_event()], more()}
  defdelegate drain(resource, max), to: :kino_trace_tracer

  @doc "The session's counters: accepted, delivered, queued, dropped by reason, ..."
  @spec counters(resource()) :: map()
  defdelegate counters(resource), to: :kino_trace_tracer

  @doc """
  Closes the session: nothing more is accepted, and every queued event is freed (counted
  as `discarded`). The freeing runs natively in slices that yield to the scheduler, so a
  queue of a million events takes tens of milliseconds and holds no scheduler meanwhile.
  """
  @spec close(resource()) :: :ok
  defdelegate close(resource), to: :kino_trace_tracer

  @doc """
  The loop guard (`c_src/core/loop_guard.hpp`): counts per process its open calls of
  `modules` (`[]`: off). A process with too many has its calls discarded (the VM pushes
  no return-trace frame for them) and the owner gets `{:kino_trace, id, {:loop, pid, mfa}}`.
  """
  @spec set_loop_modules(resource(), [module()]) :: :ok
  defdelegate set_loop_modules(resource, modules), to: :kino_trace_tracer

  @doc "The loop guard counts `pid` from 0 again (`exempt` false), or never again (true)."
  @spec loop_release(resource(), pid(), boolean()) :: :ok
  defdelegate loop_release(resource, pid, exempt), to: :kino_trace_tracer

  @doc """
  Copies `term` as the tracer would, with the caps of the given limits (as
  `new_session/2` takes them), and returns the copy and its encoded size in bytes.
  Where the native tracer is not loaded, the pure-Erlang tracer copies it, with the
  same cuts.

      iex> {copy, _bytes} = KinoTrace.Tracer.roundtrip(Enum.to_list(1..100), %{max_items: 3})
      iex> inspect(copy)
      "[1, 2, 3, ...]"
  """
  @spec roundtrip(term(), limits()) :: {term(), non_neg_integer()}
  def roundtrip(term, caps) do
    if loaded?(),
      do: :kino_trace_tracer.roundtrip(term, caps),
      else: :kino_trace_fallback.roundtrip(term, caps)
  end

  @doc """
  The Elixir structs the native tracer builds, as `[{module, keys}]` (`:__struct__` left
  out): one table in the NIF (`c_src/nif/structs.hpp`), checked against each `defstruct`
  by the tests.
  """
  @spec struct_keys() :: [{module(), [atom()]}]
  defdelegate struct_keys, to: :kino_trace_tracer

  # --- the native decoder (see KinoTrace.Tracer.NativeDecoder) ----------------------------------

  @typedoc "A native decoder: the call pairing of one trace (see `KinoTrace.Tracer.NativeDecoder`)."
  @opaque decoder :: reference()

  @doc false
  @spec new_decoder(boolean(), node()) :: decoder()
  defdelegate new_decoder(pairing, node), to: :kino_trace_tracer

  @doc false
  @spec decoder_no_returns(decoder(), [mfa()]) :: :ok
  defdelegate decoder_no_returns(decoder, mfas), to: :kino_trace_tracer

  @doc false
  @spec decoder_unpair(decoder(), pid()) :: :ok
  defdelegate decoder_unpair(decoder, pid), to: :kino_trace_tracer

  @doc false
  @spec decoder_take_callers(decoder()) :: [pid()]
  defdelegate decoder_take_callers(decoder), to: :kino_trace_tracer

  @doc false
  @spec decoder_put_names(decoder(), [{pid(), atom()}]) :: :ok
  defdelegate decoder_put_names(decoder, names), to: :kino_trace_tracer

  @doc false
  @spec drain_events(resource(), decoder(), pos_integer()) ::
          {[tuple()], more()} | {:names, [pid()]}
  defdelegate drain_events(resource, decoder, max), to: :kino_trace_tracer

  @doc false
  @spec decode_events(decoder(), [raw_event()]) :: [tuple()] | {:names, [pid()]}
  defdelegate decode_events(decoder, raw), to: :kino_trace_tracer

  @doc """
  The ERTS term layout the native tracer reads, chosen when it loaded: the one named for
  the running OTP release (`chosen_by: :release`), or, for a release with no layout of
  its own (OTP 28), the named one whose readers read the load-time probe terms right
  (`chosen_by: :check`). `nil` when the tracer is not loaded.

      iex> %{name: "OTP " <> _, chosen_by: by} = KinoTrace.Tracer.term_layout()
      iex> by in [:release, :check]
      true
  """
  @spec term_layout() ::
          %{name: String.t(), otp_release: pos_integer(), chosen_by: :release | :check} | nil
  def term_layout do
    if loaded?(), do: :kino_trace_tracer.term_layout()
  end

  @doc "True when the native tracer is loaded."
  @spec loaded?() :: boolean()
  defdelegate loaded?, to: :kino_trace_tracer, as: :loaded

  @doc """
  Why the native tracer did not load (a message naming the library's path), or `nil`
  when it is loaded. The message also names an ERTS release whose term layout the
  tracer does not know (`"unsupported term layout: ..."`, see `term_layout/0`): it then
  does not load, rather than cut funs, bitstrings and big integers whole.
  """
  @spec load_error() :: String.t() | nil
  def load_error do
    case :kino_trace_tracer.load_error() do
      :undefined -> nil
      message -> message
    end
  end
end
