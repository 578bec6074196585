defmodule Kino.Trace.NativeDecoderTest do
  # The native decoder gives exactly the events Kino.Trace.Decoder gives, for the same raw
  # events in the same batches: generated workloads (drop marks, exits, stacks deeper than
  # the bound, calls without returns, unpaired processes, caller shapes, ties in time...),
  # and a real session.
  use ExUnit.Case, async: true

  alias Kino.Trace.{Cut, Decoder, NativeDecoder}

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

  # Raw events as Kino.Trace.Tracer.drain/2 gives them; a mark of 0 sometimes left out.
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
  # take_callers must match.
  defp compare(steps, opts) do
    no_returns = MapSet.new([{N, :loop, 1}])
    elixir = Decoder.new(opts) |> Decoder.no_returns(no_returns)
    native = NativeDecoder.new(opts) |> NativeDecoder.no_returns(no_returns)

    Enum.reduce(steps, {elixir, native, 0}, fn
      {:batch, raw}, {elixir, native, n} ->
        {expected, elixir} = Decoder.decode(elixir, raw)
        {got, native} = NativeDecoder.decode(native, raw)
        assert_same(expected, got)
        {elixir, native, n + length(got)}

      {:unpair, pid}, {elixir, native, n} ->
        {Decoder.unpair(elixir, pid), NativeDecoder.unpair(native, pid), n}

      :take_callers, {elixir, native, n} ->
        {expected, elixir} = Decoder.take_callers(elixir)
        {got, native} = NativeDecoder.take_callers(native)
        assert Enum.sort(got) == Enum.sort(expected)
        {elixir, native, n}
    end)
    |> elem(2)
  end

  defp assert_same(expected, got) do
    assert length(got) == length(expected)

    for {e, g} <- Enum.zip(expected, got), e != g do
      flunk("""
      the native decoder differs from Kino.Trace.Decoder:
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

  test "gives the events of Kino.Trace.Decoder on generated workloads", %{pids: pids} do
    total = for seed <- 1..60, reduce: 0, do: (n -> n + compare(workload(seed, pids), []))
    # the workloads are not trivial
    assert total > 60 * 600
  end

  test "gives the events of Kino.Trace.Decoder without pairing (return: false)", %{pids: pids} do
    for seed <- 61..80, do: compare(workload(seed, pids), pairing: false)
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
        resource = Kino.Trace.Tracer.new_session(self(), %{})

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
    {raw, false} = Kino.Trace.Tracer.drain(raw_res, 10_000)
    {expected, _} = Decoder.decode(Decoder.new(), raw)
    for s <- [native_session, raw_session], do: :trace.session_destroy(s)
    for {r, _} <- sessions, do: Kino.Trace.Tracer.close(r)

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
