defmodule KinoTrace.Tracer.NativeDecoderTest do
  # The differential test of the call pairing rule, which has two implementations:
  # c_src/core/call_pairing.hpp with c_src/nif/decoder_nifs.cpp (this node's native
  # events) and KinoTrace.Tracer.Decoder (this node's fallback tracer's events, and every other
  # node's). Both get the same raw events in the same batches and must give exactly the
  # same events: generated workloads (drop marks, exits, stacks deeper than the bound,
  # calls without returns, unpaired processes, caller shapes, ties in time...), named
  # nasty streams (exceptions, tail calls, return_to, missing returns, drops, interleaved
  # processes, deep recursion), both again with the pids of another node (decoded by
  # KinoTrace.Tracer.Decoder.decode/3, as a remote trace's are), and a real session.
  use ExUnit.Case, async: true

  alias Kino.Trace.Cut
  alias KinoTrace.Tracer.{Decoder, NativeDecoder}
  import Bitwise, only: [<<<: 2]

  import KinoTraceTest.Helpers, only: [drain_all: 1, trace_delivered: 1]

  doctest NativeDecoder

  @mfas [{M, :f, 1}, {M, :g, 2}, {N, :h, 0}, {N, :loop, 1}]

  # --- generated workloads -------------------------------------------------------------

  # A raw workload: batches of raw events, with unpair/take_callers steps between them.
  defp workload(seed, pids, opts \\ []) do
    :rand.seed(:exsss, {seed, seed * 7 + 1, seed * 13 + 2})
    size = Keyword.get(opts, :size, 600)
    state = %{t: 1_000, stacks: Map.new(pids, &{&1, []}), marks: Map.new(pids, &{&1, 0})}
    {events, _} = Enum.map_reduce(1..size, state, fn _, st -> step(st, pids) end)
    events = List.flatten(events)

    # Steps: batches of random sizes, an unpair or a take_callers now and then.
    split(events, [])
  end

  defp split([], acc), do: Enum.reverse(acc)

  defp split(events, acc) do
    {batch, rest} = Enum.split(events, :rand.uniform(120))

    extra =
      case :rand.uniform(10) do
        1 ->
          [
            {:unpair,
             Enum.random(Enum.filter(Enum.map(batch, &elem(&1, 1)), &is_pid/1) ++ [self()])}
          ]

        2 ->
          [:take_callers]

        _ ->
          []
      end

    split(rest, extra ++ [{:batch, batch} | acc])
  end

  defp step(st, pids) do
    pid = Enum.random(pids)
    # Time moves on by 0..3 ns: ties between processes keep their order (stable sort).
    st = %{st | t: st.t + :rand.uniform(4) - 1}
    # Now and then events of this process were dropped: its mark changes.
    st = if :rand.uniform(25) == 1, do: put_in(st.marks[pid], st.marks[pid] + 1), else: st
    mark = st.marks[pid]
    stack = st.stacks[pid]

    case :rand.uniform(100) do
      n when n <= 40 ->
        {_m, _f, a} = mfa = Enum.random(@mfas)
        ev = raw(:call, pid, st.t, mfa, Enum.to_list(1..a//1), caller(), mark)
        {ev, put_in(st.stacks[pid], [mfa | stack])}

      n when n <= 70 and stack != [] ->
        # The newest call returns, or (a tail call, a lost return) an older one.
        {mfa, rest} =
          if :rand.uniform(6) == 1,
            do: {Enum.at(stack, min(2, length(stack) - 1)), tl(stack)},
            else: {hd(stack), tl(stack)}

        tag = if :rand.uniform(5) == 1, do: :exception_from, else: :return_from
        value = if tag == :return_from, do: {:ok, st.t}, else: {:error, :badarg}
        {raw(tag, pid, st.t, mfa, :undefined, value, mark), put_in(st.stacks[pid], rest)}

      n when n <= 72 ->
        # A return of a call never seen.
        {raw(:return_from, pid, st.t, Enum.random(@mfas), :undefined, :x, mark), st}

      n when n <= 76 ->
        {raw(
           :return_to,
           pid,
           st.t,
           Enum.random(@mfas ++ [{:undefined, :undefined, 0}]),
           :undefined,
           :undefined,
           mark
         ), st}

      n when n <= 78 ->
        # A deep recursion: beyond the 512 frames kept.
        depth = 500 + :rand.uniform(300)
        mfa = {M, :deep, 1}
        calls = for i <- 1..depth, do: raw(:call, pid, st.t + i, mfa, [i], :undefined, mark)

        returns =
          for i <- 1..(depth - :rand.uniform(depth))//1,
              do: raw(:return_from, pid, st.t + depth + i, mfa, :undefined, i, mark)

        {calls ++ returns, %{st | t: st.t + 2 * depth + 1}}

      n when n <= 80 ->
        {raw(:exit, pid, st.t, nil, :normal, :undefined, mark), put_in(st.stacks[pid], [])}

      n when n <= 95 ->
        {tag, first, second} =
          Enum.random([
            {:send, :msg, self()},
            {:send_to_non_existing_process, :msg, :c.pid(0, 9999, 0)},
            {:receive, {:hello, 1}, :undefined},
            {:spawn, self(), {M, :f, [1]}},
            {:spawned, self(), {M, :f, [1]}},
            {:link, self(), :undefined},
            {:unlink, self(), :undefined},
            {:getting_linked, self(), :undefined},
            {:getting_unlinked, self(), :undefined},
            {:register, :a_name, :undefined},
            {:unregister, :a_name, :undefined},
            {:gc_minor_start, [heap_size: 1], :undefined},
            {:other_tag, :x, self()}
          ])

        {raw(tag, pid, st.t, nil, first, second, mark), st}

      _ ->
        # A call of a function traced without returns (see no_returns).
        ev = raw(:call, pid, st.t, {N, :loop, 1}, [0], :undefined, mark)
        {ev, st}
    end
  end

  # Raw events as KinoTrace.Tracer.drain/2 gives them; a mark of 0 sometimes left out.
  defp raw(tag, pid, t, nil, first, second, mark),
    do: raw(tag, pid, t, {:undefined, :undefined, 0}, first, second, mark)

  defp raw(tag, pid, t, {m, f, a}, first, second, mark) do
    sched = :rand.uniform(4)
    # Times a little out of admission order (another scheduler's clock, a process moved):
    # the batch is sorted by time, stably.
    t = if :rand.uniform(3) == 1, do: t + :rand.uniform(7) - 4, else: t

    if mark == 0 and :rand.uniform(2) == 1,
      do: {tag, pid, t, sched, m, f, a, first, second},
      else: {tag, pid, t, sched, m, f, a, first, second, mark}
  end

  # The caller shapes of `caller: true` and `caller: :line`, and shapes the decoder must
  # refuse (nil) or fall back from ({m, f, a}).
  defp caller do
    Enum.random([
      :undefined,
      :undefined,
      {A, :b, 2},
      {A, :b, :not_an_arity},
      {"A", :b, 2},
      [{A, :b, 2, [file: ~c"lib/a.ex", line: 12]}],
      [{A, :b, 2, [line: 12, file: ~c"lib/é.ex"]}, {C, :d, 0, []}],
      [{A, :b, 2, [file: ~c"lib/a" ++ [%Cut{kind: :items, size: 40}], line: 3]}],
      [{A, :b, 2, [file: [?a, %Cut{kind: :items, size: 40}, ?b], line: 3]}],
      [{A, :b, 2, [file: ~c"lib/a.ex"]}],
      [{A, :b, 2, [file: ~c"lib/a.ex", line: :no]}],
      [{A, :b, 2, [file: [0xD800], line: 1]}],
      [{A, :b, 2, [file: [0x110000], line: 1]}],
      [{A, :b, 2, [file: [-1], line: 1]}],
      [{A, :b, 2, [file: [97 | 98], line: 1]}],
      [{A, :b, 2, [file: ~c"x", line: 2 ** 70]}],
      [{A, :b, 2, [{:file, ~c"x"} | :improper]}],
      [{A, :b, 2, %Cut{kind: :depth, size: 1}}],
      [{A, :b, 2}],
      [],
      %{not: :a_caller}
    ])
  end

  # Runs a workload through both decoders, step by step; every batch's events and every
  # take_callers must match. With `remote` (see remote/1), KinoTrace.Tracer.Decoder gets the
  # workload with the pids of another node, decoded with that node's context.
  defp compare(steps, opts, remote \\ nil) do
    no_returns = MapSet.new([{N, :loop, 1}])
    node = if remote, do: remote.node, else: node()
    elixir = Decoder.new([node: node] ++ opts) |> Decoder.no_returns(no_returns)
    native = NativeDecoder.new(opts) |> NativeDecoder.no_returns(no_returns)

    Enum.reduce(steps, {elixir, native, 0}, fn
      {:batch, raw}, {elixir, native, n} ->
        {expected, elixir} = elixir_decode(elixir, raw, remote)
        {got, native} = NativeDecoder.decode(native, raw)
        assert_same(expected, got)
        {elixir, native, n + length(got)}

      {:unpair, pid}, {elixir, native, n} ->
        {Decoder.unpair(elixir, to_remote(remote, pid)), NativeDecoder.unpair(native, pid), n}

      :take_callers, {elixir, native, n} ->
        {expected, elixir} = Decoder.take_callers(elixir)
        {got, native} = NativeDecoder.take_callers(native)
        assert Enum.sort(got) == Enum.sort(Enum.map(expected, &from_remote(remote, &1)))
        {elixir, native, n}
    end)
    |> elem(2)
  end

  defp elixir_decode(decoder, raw, nil), do: Decoder.decode(decoder, raw)

  # Another node's batch, as KinoTrace.Backend.drain/2 gives it: raw events of that
  # node's pids, with their registered names and that node's time offset (here `delta`
  # ahead of this one's). Its events are made this node's again to be compared.
  defp elixir_decode(decoder, raw, remote) do
    raw = Enum.map(raw, &put_elem(&1, 1, to_remote(remote, elem(&1, 1))))
    context = %{names: remote.names, time_offset: :erlang.time_offset(:nanosecond) + remote.delta}
    {events, decoder} = Decoder.decode(decoder, raw, context)

    events =
      for event <- events do
        assert event.node == remote.node
        assert event.time == div(event.monotonic + context.time_offset, 1000)

        %{
          event
          | pid: from_remote(remote, event.pid),
            node: node(),
            time: event.time - div(remote.delta, 1000)
        }
      end

    {events, decoder}
  end

  # Each local process of `pids` gets a pid of another node; the registered ones keep
  # their name (given with the batch, as that node's agent gives them).
  defp remote(pids) do
    node = :"other_node@kino_trace.test"

    to =
      for {pid, i} <- Enum.with_index(pids), is_pid(pid), into: %{} do
        name = to_string(node)

        {pid,
         :erlang.binary_to_term(
           <<131, 88, 118, byte_size(name)::16, name::binary, 100 + i::32, 0::32, 1::32>>
         )}
      end

    names =
      for {pid, remote} <- to, reduce: %{} do
        names ->
          if name = Decoder.registered_name(pid), do: Map.put(names, remote, name), else: names
      end

    %{
      node: node,
      to: to,
      from: Map.new(to, fn {k, v} -> {v, k} end),
      names: names,
      delta: 3_600_000_000_000
    }
  end

  defp to_remote(nil, pid), do: pid
  defp to_remote(remote, pid), do: Map.get(remote.to, pid, pid)

  defp from_remote(nil, pid), do: pid
  defp from_remote(remote, pid), do: Map.get(remote.from, pid, pid)

  defp assert_same(expected, got) do
    assert length(got) == length(expected)

    for {e, g} <- Enum.zip(expected, got), e != g do
      flunk("""
      the native decoder differs from KinoTrace.Tracer.Decoder:
      expected: #{inspect(Map.from_struct(e), limit: :infinity)}
      got:      #{inspect(Map.from_struct(g), limit: :infinity)}
      """)
    end
  end

  setup do
    dead = for _ <- 1..2, do: spawn(fn -> :ok end)
    port = Port.open({:spawn, "cat"}, [])
    on_exit(fn -> if Port.info(port), do: Port.close(port) end)
    name = :"native_decoder_test_#{System.unique_integer([:positive])}"
    Process.register(self(), name)
    # self() (registered), two dead processes, a port, and :undefined
    %{pids: [self(), self() | dead] ++ [port, :undefined], name: name}
  end

  @tag :slow
  test "gives the events of KinoTrace.Tracer.Decoder on generated workloads", %{pids: pids} do
    total = for seed <- 1..60, reduce: 0, do: (n -> n + compare(workload(seed, pids), []))
    # the workloads are not trivial
    assert total > 60 * 600
  end

  test "gives the events of KinoTrace.Tracer.Decoder without pairing (return: false)", %{
    pids: pids
  } do
    for seed <- 61..80, do: compare(workload(seed, pids), pairing: false)
  end

  # :kino_trace_open_calls (a recorder's open calls, also on another node's agent, where
  # no decoder may run) states the pairing rule again on what a ring needs: the calls it
  # holds open after each batch are the decoder's open frames, outermost first, for every
  # process whose stack stayed within its depth (32) since it was last empty.
  test "a recorder's open calls are the decoder's open frames on generated workloads", %{
    pids: pids
  } do
    checked =
      for seed <- 106..125, reduce: 0 do
        checked ->
          batches = for {:batch, raw} <- workload(seed, pids), do: raw
          start = {Decoder.new([]), :kino_trace_open_calls.new(1 <<< 40), MapSet.new(), checked}
          {_, _, _, checked} = Enum.reduce(batches, start, &check_open_calls(&1, &2, seed))
          checked
      end

    assert checked > 500
  end

  defp check_open_calls(raw, {decoder, open, deep, checked}, seed) do
    {events, decoder} = Decoder.decode(decoder, raw)
    open = Enum.reduce(events, open, &:kino_trace_open_calls.track(&2, &1, &1.id, &1))
    # (a process whose stack went past 32: its outermost calls are no longer open calls)
    deeper = for %{kind: :call, depth: depth, pid: pid} <- events, depth >= 31, do: pid
    emptied = for pid <- deep, not is_map_key(decoder.stacks, pid), do: pid
    deep = deep |> MapSet.union(MapSet.new(deeper)) |> MapSet.difference(MapSet.new(emptied))

    checked =
      for {pid, {_depth, _n, frames}} <- decoder.stacks, pid not in deep, reduce: checked do
        checked ->
          expected = frames |> Enum.map(&elem(&1, 0)) |> Enum.reverse()
          got = for e <- :kino_trace_open_calls.overwritten(open, pid, :none), do: e.id
          assert got == expected, "seed #{seed}, #{inspect(pid)}"
          checked + 1
      end

    {decoder, open, deep, checked}
  end

  test "another node's raw events pair as this node's: Decoder.decode/3 against the native decoder",
       %{pids: pids} do
    remote = remote(pids)

    total =
      for seed <- 81..100, reduce: 0, do: (n -> n + compare(workload(seed, pids), [], remote))

    assert total > 20 * 600
    for seed <- 101..105, do: compare(workload(seed, pids), [pairing: false], remote)
  end

  # --- named nasty streams ----------------------------------------------------------------

  # Raw events for the streams below: `pid`'s call of `mfa`, its return or exception...
  defp c(pid, t, {m, f, a}, mark \\ 0),
    do: {:call, pid, t, 1, m, f, a, Enum.to_list(1..a//1), :undefined, mark}

  defp r(pid, t, {m, f, a}, mark \\ 0),
    do: {:return_from, pid, t, 1, m, f, a, :undefined, {:ok, t}, mark}

  defp x(pid, t, {m, f, a}, mark \\ 0),
    do: {:exception_from, pid, t, 1, m, f, a, :undefined, {:error, :badarg}, mark}

  defp rt(pid, t, {m, f, a}), do: {:return_to, pid, t, 1, m, f, a, :undefined, :undefined}
  defp ex(pid, t), do: {:exit, pid, t, 1, :undefined, :undefined, 0, :normal, :undefined}

  # name => steps; every batch split where it says (pairing carries over batches).
  defp nasty([a, b, p3]) do
    f = {M, :f, 1}
    g = {M, :g, 2}
    h = {N, :h, 0}
    loop = {N, :loop, 1}
    deep = for i <- 1..1_000, do: c(a, i, f)
    unwind = for i <- 1..1_000, do: r(a, 1_000 + i, f)

    %{
      "exceptions: one each frame, one through a frame whose exception is not traced" => [
        {:batch, [c(a, 1, f), c(a, 2, g), x(a, 3, g), x(a, 4, f)]},
        {:batch, [c(a, 5, f), c(a, 6, g), c(a, 7, h), x(a, 8, g), r(a, 9, f)]}
      ],
      "tail calls: a frame that never returns, popped by its caller's return" => [
        {:batch, [c(a, 1, f), c(a, 2, g), c(a, 3, h), r(a, 4, h), r(a, 5, f), c(a, 6, g)]},
        # a tail call to a function traced without returns, then the caller returns
        {:batch, [c(a, 7, f), c(a, 8, loop), c(a, 9, loop), r(a, 10, f)]}
      ],
      "return_to: at the current depth, with and without a function" => [
        {:batch,
         [
           c(a, 1, f),
           c(a, 2, g),
           rt(a, 3, f),
           r(a, 4, g),
           rt(a, 5, {:undefined, :undefined, 0}),
           r(a, 6, f),
           rt(a, 7, g)
         ]}
      ],
      "missing returns: unwound by an outer return, returns of calls never seen" => [
        {:batch, [r(a, 1, f), c(a, 2, f), c(a, 3, g), c(a, 4, g)]},
        {:batch, [r(a, 5, f), r(a, 6, g), x(a, 7, h), c(a, 8, h)]},
        {:batch, [r(a, 9, g), r(a, 10, h)]}
      ],
      "drops: a changed mark forgets open calls, once, also back to 0" => [
        {:batch,
         [c(a, 1, f), c(a, 2, g), r(a, 3, g, 1), r(a, 4, f, 1), c(a, 5, f, 1), c(a, 6, g, 1)]},
        {:batch,
         [
           r(a, 7, g, 2),
           c(b, 8, f, 5),
           r(a, 9, f, 2),
           c(a, 10, f, 0),
           r(b, 11, f, 5),
           r(a, 12, f, 0)
         ]},
        {:batch, [c(a, 13, f, 3), c(a, 14, g, 3), r(a, 15, g, 3), r(a, 16, f, 0)]}
      ],
      "interleaved processes: same functions, ties in time, times out of order in a batch" => [
        {:batch,
         [c(a, 1, f), c(b, 1, f), c(p3, 1, f), c(b, 2, g), r(a, 2, f), c(a, 2, f), r(p3, 1, f)]},
        {:batch, [r(b, 5, g), r(a, 4, f), x(b, 3, f), c(p3, 3, h), r(p3, 6, h), ex(b, 7)]},
        :take_callers,
        {:unpair, a},
        {:batch, [c(a, 8, f), c(b, 8, f), r(a, 9, f), r(b, 9, f)]},
        :take_callers
      ],
      "deep recursion: past the 512 frames kept and the 384 left after a cut" => [
        {:batch, Enum.take(deep, 300)},
        {:batch, Enum.slice(deep, 300, 400)},
        {:batch, Enum.drop(deep, 700) ++ Enum.take(unwind, 100)},
        {:batch, Enum.drop(unwind, 100)},
        {:batch, [c(a, 3_000, f), r(a, 3_001, f)]}
      ],
      "exits: mid-stack, the process's later calls start again" => [
        {:batch, [c(a, 1, f), c(a, 2, g), ex(a, 3), r(a, 4, g), c(a, 5, f)]},
        {:unpair, b},
        {:batch, [c(b, 6, f), ex(b, 7), c(b, 8, f), r(b, 9, f), r(a, 10, f)]}
      ]
    }
  end

  test "named nasty streams: both decoders give the same events, here and from another node", %{
    pids: pids
  } do
    [a, _, b, p3 | _] = pids
    remote = remote(pids)

    for {name, steps} <- nasty([a, b, p3]),
        opts <- [[], [pairing: false]],
        remote <- [nil, remote] do
      try do
        assert compare(steps, opts, remote) > 0
      rescue
        e in ExUnit.AssertionError ->
          reraise %{
                    e
                    | message:
                        "#{name} (#{inspect(opts)}, #{if remote, do: "remote", else: "local"}): #{e.message}"
                  },
                  __STACKTRACE__
      end
    end
  end

  test "names come from the registry, once per process", %{pids: [me | _], name: name} do
    [event] =
      NativeDecoder.new()
      |> NativeDecoder.decode([raw(:exit, me, 1, nil, :normal, :undefined, 0)])
      |> elem(0)

    assert event.name == name
    assert event.pid == me
    assert event.node == node()
  end

  test "past 20 000 processes with open calls, the oldest are forgotten as in Elixir" do
    pids = for i <- 1..20_100, do: :c.pid(0, 100_000 + i, 0)

    calls =
      for {pid, i} <- Enum.with_index(pids),
          do: raw(:call, pid, i, {M, :f, 1}, [i], :undefined, rem(i, 3))

    returns =
      for {pid, i} <- Enum.with_index(pids),
          do: raw(:return_from, pid, 30_000 + i, {M, :f, 1}, :undefined, i, rem(i, 3))

    steps = [{:batch, calls}, :take_callers, {:batch, returns}]
    assert compare(steps, []) == 2 * 20_100
  end

  test "bad raw events are refused, not crashed on" do
    decoder = NativeDecoder.new()
    assert_raise ArgumentError, fn -> NativeDecoder.decode(decoder, [{:call, self()}]) end
    assert_raise ArgumentError, fn -> NativeDecoder.decode(decoder, [:nope]) end

    assert_raise ArgumentError, fn ->
      NativeDecoder.decode(decoder, [{:call, self(), :t, 1, M, :f, 0, [], :undefined}])
    end
  end

  # --- a real session --------------------------------------------------------------------

  defmodule Target do
    def f(0), do: 0
    def f(n), do: 1 + g(n - 1)
    def g(n), do: f(n)
  end

  test "a real trace: the native drain gives what the Elixir decoder gives for the raw drain" do
    # Two native sessions trace the same calls: one drained natively, one drained raw.
    sessions =
      for i <- 1..2 do
        resource = KinoTrace.Tracer.new_session(self(), %{})

        session =
          :trace.session_create(:"native_decoder_test_#{i}", {:kino_trace_tracer, resource}, [])

        :trace.function(
          session,
          {Target, :_, :_},
          [{:_, [], [{:return_trace}, {:message, {:caller}}]}],
          [:local]
        )

        {resource, session}
      end

    worker =
      spawn(fn ->
        receive do: (:go -> Target.f(40))
        receive do: (:stop -> :ok)
      end)

    for {_, session} <- sessions, do: :trace.process(session, worker, true, [:call, :procs])
    send(worker, :go)
    send(worker, :stop)
    ref = Process.monitor(worker)
    assert_receive {:DOWN, ^ref, _, _, _}
    trace_delivered(worker)
    [{native_res, native_session}, {raw_res, raw_session}] = sessions

    decoder = NativeDecoder.new()
    native = drain_all(&NativeDecoder.drain(decoder, native_res, &1))
    {raw, :recheck} = KinoTrace.Tracer.drain(raw_res, 10_000)
    {expected, _} = Decoder.decode(Decoder.new(), raw)
    for s <- [native_session, raw_session], do: :trace.session_destroy(s)
    for {r, _} <- sessions, do: KinoTrace.Tracer.close(r)

    # 81 calls (f and g in turn) and returns, the exit; times differ (two sessions'
    # clocks), the rest not
    assert length(native) == 163

    strip = fn events ->
      Enum.map(
        events,
        &%{&1 | time: nil, monotonic: nil, duration: &1.duration && :set, scheduler: nil}
      )
    end

    assert strip.(native) == strip.(expected)
    assert Enum.map(native, & &1.depth) |> Enum.max() == 80
    assert List.last(native).kind == :exit
  end
end
