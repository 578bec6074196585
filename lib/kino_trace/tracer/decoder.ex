defmodule KinoTrace.Tracer.Decoder do
  @moduledoc false
  # Turns raw trace events into `Kino.Trace.Event` structs: the Elixir implementation of
  # the call pairing rule below.
  #
  # It numbers events, converts monotonic timestamps to system time, and pairs calls with
  # their returns and exceptions per process, which gives each event its call depth and
  # each return its duration. The state is a plain struct, so the pairing is a pure
  # function of the raw events.
  #
  # It decodes the raw events of this node's fallback tracer (`KinoTrace.Backend.Fallback`,
  # where the NIF could not be loaded) and those of every other node (`decode/3`, with that
  # node's names and time offset). This node's native tracer decodes its own events in the
  # NIF (`KinoTrace.Tracer.NativeDecoder`), with the other implementation of the same rule,
  # `c_src/core/call_pairing.hpp`, which keys processes by their term word: another node's
  # pids are not immediate terms, so they come here. The two are kept one rule by
  # `test/kino_trace/tracer/native_decoder_test.exs`, which feeds both the same raw streams
  # (generated ones, named nasty ones, and both again with another node's pids) and
  # requires the same events. A change to the rule is made in both, and that test says
  # whether they still agree.
  #
  # Why two rather than the NIF pairing every tracer's events (issue 35, "One pairing
  # rule"): the fallback tracer is what runs where the NIF is not loaded (not built, or
  # refused to load: `KinoTrace.Tracer.load_error/0`), and there no NIF can pair anything,
  # so this implementation must exist and be right anyway. Having the NIF pair the
  # fallback's and other nodes' events too would also mean mapping every remote pid to an
  # integer here before each batch, and back after (one more pass over every batch, not
  # measured). So the rule is kept one by the differential test, which fails on the first
  # event where the two differ, not by one implementation.
  #
  # ## The call pairing rule
  #
  #   1. **Order.** A batch is sorted by monotonic time, stably: the tracers hand events out
  #      in each process's own order, so a return always comes after its call. Events are
  #      numbered from 1 in that order, across batches.
  #   2. **Frames.** Per process, a call opens a frame (its id, time and `{m, f, a}`) unless
  #      its function is traced without returns (`no_returns/2`) or the process was
  #      unpaired (`unpair/2`); a call's depth is the process's depth before it. At most
  #      512 frames are kept: past that the oldest are forgotten, down to 384; the depth
  #      counts forgotten frames too, up to 512.
  #   3. **Returns.** A return or exception closes the newest open frame of the same
  #      `{m, f, a}` and every frame above it (tail calls out of traced code, returns
  #      lost to a limit), and gets that call's id, the time since it and the depth left.
  #      With no such frame it stays unpaired: no call id, no duration, depth 0.
  #   4. **return_to** has the process's depth and changes nothing.
  #   5. **Drops.** Each raw event carries its process's drop mark, noted when the process
  #      opens a frame with none kept. An event whose mark differs from the noted one while
  #      frames are open forgets them (a later return is left unpaired, with no duration,
  #      rather than paired with the wrong call) and is marked `lost: true`.
  #   6. **Exit** forgets the process's frames, mark and unpairing.
  #   7. **Bounds.** 20 000 processes with open frames (past that, all are forgotten), as
  #      many drop marks and unpaired processes; 256 callers between two `take_callers/1`.
  #   8. **`pairing: false`** (a trace without return values): no frames, every event at
  #      depth 0; callers are still noted.

  import KinoTrace.Tracer.RawEvent, only: [raw_event: 2]

  alias Kino.Trace.Event
  alias KinoTrace.Tracer.RawEvent

  # Open calls kept per process (deeper ones are forgotten), and processes tracked.
  @max_stack 512
  # Past @max_stack open calls the oldest are forgotten in bulk, down to this many, so a
  # process deeper than that costs O(1) per call (amortized).
  @keep_frames 384
  @max_pids 20_000
  @max_names 10_000

  # Processes that made calls with return tracing, kept between two take_callers/1.
  @max_callers 256

  defstruct next_id: 1,
            stacks: %{},
            names: %{},
            node: nil,
            time_offset: 0,
            pairing: true,
            no_returns: MapSet.new(),
            unpaired: %{},
            marks: %{},
            callers: %{},
            batch_names: %{}

  @type t :: %__MODULE__{}

  @typedoc "What decoding another node's batch needs: that node's names and time offset (`nil`: this node's)."
  @type context :: nil | %{names: %{pid() => atom() | nil}, time_offset: integer()}

  @doc """
  A new decoder. With `pairing: false` (a trace without return values, where calls
  cannot be paired), every event has depth 0 and returns no duration. `node:` is the
  node the events happen on (this one by default).

  ## Examples

      iex> decoder = KinoTrace.Tracer.Decoder.new()
      iex> pid = self()
      iex> raw = [
      ...>   {:call, pid, 1_000, 1, Enum, :sum, 1, [[1, 2]], :undefined},
      ...>   {:return_from, pid, 4_000, 1, Enum, :sum, 1, :undefined, 3}
      ...> ]
      iex> {[call, return], _decoder} = KinoTrace.Tracer.Decoder.decode(decoder, raw)
      iex> {call.kind, call.args, return.kind, return.return, return.duration, return.call_id == call.id}
      {:call, [[1, 2]], :return, 3, 3_000, true}
  """
  @spec new(keyword()) :: t()
  def new(opts \\ []) do
    %__MODULE__{
      node: Keyword.get(opts, :node, node()),
      time_offset: :erlang.time_offset(:nanosecond),
      pairing: Keyword.get(opts, :pairing, true)
    }
  end

  @doc """
  Says which functions are traced without their returns (`KinoTrace.Plan.Functions`'s
  `:no_returns`): their calls open no frame, so they neither wait for a return that
  never comes nor deepen the calls after them.

      iex> pid = self()
      iex> decoder = KinoTrace.Tracer.Decoder.new() |> KinoTrace.Tracer.Decoder.no_returns(MapSet.new([{M, :loop, 1}]))
      iex> raw = for t <- 1..3, do: {:call, pid, t, 1, M, :loop, 1, [t], :undefined}
      iex> {events, _decoder} = KinoTrace.Tracer.Decoder.decode(decoder, raw)
      iex> Enum.map(events, & &1.depth)
      [0, 0, 0]
  """
  @spec no_returns(t(), MapSet.t(mfa())) :: t()
  def no_returns(decoder, mfas), do: %{decoder | no_returns: mfas}

  @doc """
  Stops pairing the calls of `pid`, whose returns are no longer traced
  (`KinoTrace.Session.StackGuard`): its open calls are forgotten and its later calls open none.
  """
  @spec unpair(t(), pid()) :: t()
  def unpair(%{unpaired: unpaired} = decoder, pid) do
    unpaired = if map_size(unpaired) >= @max_pids, do: %{}, else: unpaired

    %{
      decoder
      | unpaired: Map.put(unpaired, pid, true),
        stacks: Map.delete(decoder.stacks, pid),
        callers: Map.delete(decoder.callers, pid)
    }
  end

  @doc """
  The processes (at most #{@max_callers}) that made calls with return tracing since the
  last take, and the decoder without them.

      iex> pid = self()
      iex> {[], decoder} = KinoTrace.Tracer.Decoder.take_callers(KinoTrace.Tracer.Decoder.new())
      iex> {_events, decoder} = KinoTrace.Tracer.Decoder.decode(decoder, [{:call, pid, 1, 1, M, :f, 0, [], :undefined}])
      iex> {callers, decoder} = KinoTrace.Tracer.Decoder.take_callers(decoder)
      iex> {callers, elem(KinoTrace.Tracer.Decoder.take_callers(decoder), 0)}
      {[pid], []}
  """
  @spec take_callers(t()) :: {[pid()], t()}
  def take_callers(decoder), do: {Map.keys(decoder.callers), %{decoder | callers: %{}}}

  @doc """
  Decodes a batch of raw events (`KinoTrace.Tracer.RawEvent`). They come in admission
  order (each process's events in its own order) and are ordered by timestamp within the
  batch. A raw event without a drop mark (9 elements) has mark 0.

  A process whose drop mark changed may have lost events: its open calls are forgotten.

      iex> pid = self()
      iex> raw = [
      ...>   {:call, pid, 1_000, 1, M, :f, 1, [1], :undefined, 0},
      ...>   # the return of f(1) and the call f(2) were dropped: the mark changed
      ...>   {:return_from, pid, 4_000, 1, M, :f, 1, :undefined, 3, 1},
      ...>   {:call, pid, 5_000, 1, M, :f, 1, [3], :undefined, 1}
      ...> ]
      iex> {events, _decoder} = KinoTrace.Tracer.Decoder.decode(KinoTrace.Tracer.Decoder.new(), raw)
      iex> Enum.map(events, &{&1.kind, &1.depth, &1.call_id, &1.duration, &1.lost})
      [{:call, 0, nil, nil, false}, {:return, 0, nil, nil, true}, {:call, 0, nil, nil, false}]
  """
  @spec decode(t(), [KinoTrace.Tracer.raw_event()]) :: {[Event.t()], t()}
  def decode(decoder, raw), do: decode(decoder, raw, nil)

  @doc """
  Decodes a batch of raw events traced on another node, with that node's `context`
  (`KinoTrace.Backend.drain/2`): the registered names of the batch's processes and
  the node's time offset, so times are that node's system time.

      iex> pid = :c.pid(0, 250, 0)
      iex> raw = [{:call, pid, 1_000, 1, M, :f, 0, [], :undefined, 0}]
      iex> context = %{names: %{pid => :server}, time_offset: 5_000_000}
      iex> {[event], _} = KinoTrace.Tracer.Decoder.decode(KinoTrace.Tracer.Decoder.new(node: :a@host), raw, context)
      iex> {event.node, event.name, event.time}
      {:a@host, :server, 5_001}
  """
  @spec decode(t(), [KinoTrace.Tracer.raw_event()], context()) ::
          {[Event.t()], t()}
  def decode(decoder, raw, nil),
    do: decode_batch(%{decoder | time_offset: :erlang.time_offset(:nanosecond)}, raw)

  def decode(decoder, raw, %{names: names, time_offset: offset}),
    do: decode_batch(%{decoder | time_offset: offset, batch_names: names}, raw)

  @time RawEvent.position(:time)
  @size RawEvent.size()

  defp decode_batch(decoder, raw) do
    # Events already come in each process's order; the stable sort by timestamp (which
    # keeps that order) only interleaves the processes of a batch by time.
    Enum.map_reduce(:lists.keysort(@time, raw), decoder, &decode_one/2)
  end

  defp decode_one(
         raw_event(tag,
           pid: pid,
           time: mono,
           scheduler: sched,
           module: m,
           function: f,
           arity: a,
           first: first,
           second: second,
           mark: mark
         ),
         decoder
       ) do
    {name, decoder} = name_of(decoder, pid)

    event = %Event{
      id: decoder.next_id,
      node: decoder.node,
      pid: undefined_to_nil(pid),
      name: name,
      time: div(mono + decoder.time_offset, 1000),
      monotonic: mono,
      scheduler: sched
    }

    decoder = %{decoder | next_id: decoder.next_id + 1}
    {event, decoder} = check_mark(decoder, event, mark)
    fill(tag, event, {undefined_to_nil(m), undefined_to_nil(f), a}, first, second, mark, decoder)
  end

  defp decode_one(raw, decoder) when tuple_size(raw) == @size - 1,
    do: decode_one(RawEvent.complete(raw), decoder)

  # The process's drop mark changed since its open calls were made (`marks`, kept for
  # processes with open calls, 0 when absent): it may have lost events (a return among
  # them), so they are forgotten.
  defp check_mark(%{marks: marks} = decoder, event, 0) when map_size(marks) == 0,
    do: {event, decoder}

  defp check_mark(%{stacks: stacks, marks: marks} = decoder, %{pid: pid} = event, mark) do
    if is_map_key(stacks, pid) and Map.get(marks, pid, 0) != mark,
      do: {%{event | lost: true}, %{decoder | stacks: Map.delete(stacks, pid)}},
      else: {event, decoder}
  end

  # A process opens its first call: its drop mark now.
  defp put_mark(%{marks: marks} = decoder, pid, mark) do
    case marks do
      %{^pid => ^mark} -> decoder
      %{^pid => _} when mark == 0 -> %{decoder | marks: Map.delete(marks, pid)}
      _ when mark == 0 -> decoder
      _ when map_size(marks) >= @max_pids -> %{decoder | marks: %{pid => mark}}
      _ -> %{decoder | marks: Map.put(marks, pid, mark)}
    end
  end

  # Each clause updates the event once: it is a 20-field struct, copied on every update.
  defp fill(:call, event, {m, f, a} = mfa, args, caller, mark, decoder) do
    pid = event.pid
    # A call opens a frame when its return is traced (the VM pushes one too).
    framed? =
      not is_map_key(decoder.unpaired, pid) and not MapSet.member?(decoder.no_returns, mfa)

    decoder = if framed?, do: note_caller(decoder, pid), else: decoder

    # Per process: {depth, n, frames}, frames newest first, n of them (at most
    # @max_stack); depth counts forgotten frames too, up to @max_stack. Without pairing
    # every call is at depth 0.
    {depth, n, frames} =
      if decoder.pairing, do: Map.get(decoder.stacks, pid, {0, 0, []}), else: {0, 0, []}

    event = %{
      event
      | kind: :call,
        module: m,
        function: f,
        arity: a,
        args: args,
        caller: caller(caller),
        depth: depth
    }

    if decoder.pairing and framed? do
      frames = [{event.id, event.monotonic, mfa} | frames]
      depth = min(depth + 1, @max_stack)

      stack =
        if n + 1 > @max_stack,
          do: {depth, @keep_frames, Enum.take(frames, @keep_frames)},
          else: {depth, n + 1, frames}

      decoder = if n == 0, do: put_mark(decoder, pid, mark), else: decoder
      {event, put_stack(decoder, pid, stack)}
    else
      {event, decoder}
    end
  end

  defp fill(tag, event, {m, f, a} = mfa, _first, value, _mark, decoder)
       when tag in [:return_from, :exception_from] do
    {depth, n, frames} =
      if decoder.pairing, do: Map.get(decoder.stacks, event.pid, {0, 0, []}), else: {0, 0, []}

    {call_id, duration, depth, decoder} =
      case pop_frame(frames, mfa, 0) do
        {call_id, t0, popped, rest} ->
          depth = depth - popped

          {call_id, event.monotonic - t0, depth,
           put_stack(decoder, event.pid, {depth, n - popped, rest})}

        nil ->
          {nil, nil, 0, decoder}
      end

    event =
      case tag do
        :return_from ->
          %{
            event
            | kind: :return,
              return: value,
              module: m,
              function: f,
              arity: a,
              call_id: call_id,
              duration: duration,
              depth: depth
          }

        :exception_from ->
          %{
            event
            | kind: :exception,
              exception: value,
              module: m,
              function: f,
              arity: a,
              call_id: call_id,
              duration: duration,
              depth: depth
          }
      end

    {event, decoder}
  end

  defp fill(:return_to, event, {m, f, a}, _first, _second, _mark, decoder) do
    {depth, _n, _frames} = Map.get(decoder.stacks, event.pid, {0, 0, []})
    {%{event | kind: :return_to, module: m, function: f, arity: a, depth: depth}, decoder}
  end

  defp fill(tag, event, _mfa, first, second, _mark, decoder) do
    event =
      case tag do
        :send ->
          %{event | kind: :send, data: first, peer: second}

        :send_to_non_existing_process ->
          %{event | kind: :send_to_non_existing, data: first, peer: second}

        :receive ->
          receive_event(event, first, second)

        :spawn ->
          %{event | kind: :spawn, peer: first, data: second}

        :spawned ->
          %{event | kind: :spawned, peer: first, data: second}

        :exit ->
          %{event | kind: :exit, data: first}

        kind when kind in [:link, :unlink, :getting_linked, :getting_unlinked] ->
          %{event | kind: kind, peer: first}

        kind when kind in [:register, :unregister] ->
          %{event | kind: kind, data: first}

        other ->
          %{event | kind: other, data: first, peer: undefined_to_nil(second)}
      end

    decoder =
      if tag == :exit,
        do: %{
          decoder
          | stacks: Map.delete(decoder.stacks, event.pid),
            unpaired: Map.delete(decoder.unpaired, event.pid),
            marks: Map.delete(decoder.marks, event.pid)
        },
        else: decoder

    {event, decoder}
  end

  # A `receive ... after` that timed out, traced when asked for (`timeouts: true`): its
  # trace message carries the receive match spec's marker (KinoTrace.Plan.MessagePattern).
  @timeout_marker KinoTrace.Plan.MessagePattern.timeout_marker()
  defp receive_event(event, _message, @timeout_marker), do: %{event | kind: :timeout}
  defp receive_event(event, message, _extra), do: %{event | kind: :receive, data: message}

  defp note_caller(%{callers: callers} = decoder, pid) do
    if is_map_key(callers, pid) or map_size(callers) >= @max_callers or not is_pid(pid),
      do: decoder,
      else: %{decoder | callers: Map.put(callers, pid, true)}
  end

  # The newest open call of `mfa`, and how many frames come off with it (frames above it
  # never returned: tail calls out of traced code, or returns lost to a limit).
  defp pop_frame([{call_id, t0, mfa} | rest], mfa, n), do: {call_id, t0, n + 1, rest}
  defp pop_frame([_ | rest], mfa, n), do: pop_frame(rest, mfa, n + 1)
  defp pop_frame([], _mfa, _n), do: nil

  # `{:caller}` gives {m, f, a}; `caller: :line` a one-frame stack trace (see Session).
  defp caller({m, f, a}) when is_atom(m) and is_atom(f) and is_integer(a), do: {m, f, a}

  defp caller([{m, f, a, location} | _]) when is_atom(m) and is_atom(f) and is_integer(a) do
    with {:ok, file} <- location_value(location, :file),
         {:ok, line} when is_integer(line) <- location_value(location, :line),
         file when is_binary(file) <- file_name(file) do
      {m, f, a, {file, line}}
    else
      _ -> {m, f, a}
    end
  end

  defp caller(_), do: nil

  # A location is [file: charlist, line: integer]; the tracer may have cut any part.
  defp location_value([{key, value} | _], key), do: {:ok, value}
  defp location_value([_ | rest], key), do: location_value(rest, key)
  defp location_value(_, _key), do: :error

  # A file name the tracer cut (longer than :max_items) keeps its first characters.
  defp file_name(chars), do: file_name(chars, [])

  defp file_name([c | rest], acc) when is_integer(c) and c >= 0, do: file_name(rest, [c | acc])
  defp file_name([], acc), do: acc |> Enum.reverse() |> chars_to_string("")
  defp file_name([%Kino.Trace.Cut{}], acc), do: acc |> Enum.reverse() |> chars_to_string("...")
  defp file_name(_, _acc), do: nil

  defp chars_to_string(chars, suffix) do
    case :unicode.characters_to_binary(chars) do
      bin when is_binary(bin) -> bin <> suffix
      _ -> nil
    end
  end

  defp put_stack(decoder, pid, {0, _, _}),
    do: %{decoder | stacks: Map.delete(decoder.stacks, pid)}

  defp put_stack(%{stacks: stacks} = decoder, pid, stack) when map_size(stacks) >= @max_pids do
    if Map.has_key?(stacks, pid),
      do: %{decoder | stacks: Map.put(stacks, pid, stack)},
      else: %{decoder | stacks: %{pid => stack}}
  end

  defp put_stack(decoder, pid, stack),
    do: %{decoder | stacks: Map.put(decoder.stacks, pid, stack)}

  # Names of this node's processes are looked up here; another node's come with the batch.
  defp name_of(decoder, pid)
       when is_pid(pid) and node(pid) == node() and :erlang.map_get(:node, decoder) == node() do
    case decoder.names do
      %{^pid => name} ->
        {name, decoder}

      names ->
        name = registered_name(pid)
        names = if map_size(names) >= @max_names, do: %{}, else: names
        {name, %{decoder | names: Map.put(names, pid, name)}}
    end
  end

  defp name_of(%{batch_names: names} = decoder, pid), do: {Map.get(names, pid), decoder}

  @doc false
  # The name an event of the local process `pid` carries (also KinoTrace.Tracer.NativeDecoder's).
  @spec registered_name(pid()) :: atom() | nil
  def registered_name(pid) do
    case Process.info(pid, :registered_name) do
      {:registered_name, name} when is_atom(name) and name != [] -> name
      _ -> nil
    end
  end

  defp undefined_to_nil(:undefined), do: nil
  defp undefined_to_nil(other), do: other
end
