defmodule KinoTrace.Tracer.FallbackMemoryTest do
  # Issue 27 item 2: the pure-Erlang tracer must bound the traced node's memory in bytes.
  # The VM copies a call trace message whole (the arguments as a flat term), before any
  # cap applies; the floods the review found (two processes calling a traced f/1) took a
  # bare peer to 7 GB, or got it OOM-killed. Each flood runs here bounded (a few calls,
  # so the unfixed tracer reaches 1-2 GB at most, then stops), on a real peer with the
  # agent's fallback and on this node with the fallback as its local tracer, sampling
  # the node's memory every millisecond from a process there.
  use ExUnit.Case, async: false

  @moduletag :slow

  import KinoTraceTest.Peers
  import KinoTraceTest.Helpers, only: [wait_until: 1]

  alias Kino.Trace.Cut
  alias KinoTraceTest.FallbackFlood, as: Flood

  @moduletag timeout: 300_000

  # (not under Kino.Trace: kino_trace refuses to trace its own modules)
  {:module, _, beam, _} =
    defmodule :"Elixir.KinoTraceTest.FallbackFlood" do
      @moduledoc false
      # The traced function, the floods' arguments and a memory sampler: plain code, so
      # it runs on a bare peer too.

      def f(_x), do: :ok

      # Returns its argument: with returns traced (`exceptions: true`, the default, traces
      # them too), the VM copies the return value whole into each return trace message;
      # no match spec can look at it.
      def echo(x), do: x

      # Built in the process that passes it (lists:seq, not Enum: the peer's code only).
      # 16 MB as a message.
      def arg(:long_list), do: :lists.seq(1, 1_000_000)
      # A list of 1 000 references to one 10 000-entry map: 0.3 MB on the heap, ~300 MB
      # as a message.
      def arg(:map_refs), do: :lists.duplicate(1000, map(10_000))
      # 22 levels, each a list of two references to the level below: a few hundred bytes
      # on the heap, 128 MB as a message.
      def arg(:shared),
        do: :lists.foldl(fn _, below -> [below, below] end, :leaf, :lists.seq(1, 22))

      # 16 references to a 10 000-entry map: ~5 MB as a message, and nothing in it the
      # fallback's match spec finds huge; only its mailbox guard bounds these.
      def arg(:medium), do: :lists.duplicate(16, map(10_000))

      defp map(n), do: :maps.from_list(for i <- :lists.seq(1, n), do: {i, i})

      # A process that builds `kind`'s argument, tells `parent`, waits for :go, makes
      # `n` calls of f/1 with it and tells `parent` again.
      def flooder(parent, kind, n) do
        spawn(fn ->
          x = arg(kind)
          send(parent, {:built, self()})
          receive(do: (:go -> :ok))
          calls(x, n)
          send(parent, {:flooded, self()})
        end)
      end

      # Each call after some work, as a real process makes them: one that never gives up
      # its scheduler (150 calls are far fewer reductions than a time slice) keeps the
      # tracer from running on a 2-core machine, and no guard there can act.
      defp calls(_x, 0), do: :ok

      defp calls(x, n) do
        :erlang.bump_reductions(2000)
        :ok = f(x)
        calls(x, n - 1)
      end

      # The node's peak `:erlang.memory(:total)`, sampled every millisecond until
      # `{:stop, from}`.
      def sampler, do: spawn(fn -> sample(:erlang.memory(:total)) end)

      defp sample(peak) do
        receive do
          {:stop, from} -> send(from, {:peak, self(), peak})
        after
          1 -> sample(max(peak, :erlang.memory(:total)))
        end
      end

      # Returns once every trace message made on this node so far is delivered.
      def delivered do
        ref = :erlang.trace_delivered(:all)
        receive(do: ({:trace_delivered, :all, ^ref} -> :ok))
      end
    end

  @beam beam
  @pattern "KinoTraceTest.FallbackFlood.f/1"

  # flood => calls per process (2 processes): before the fix each reaches 1-2 GB
  @floods [long_list: 40, map_refs: 3, shared: 6, medium: 150]
  # Growth of the node's memory allowed: the 64 MB mailbox bound, what the two
  # processes hold (16 MB each for the long list), and room for the rest.
  @bound 200 * 1024 * 1024

  setup_all do
    ensure_distribution()
  end

  # Runs `flood` (calls per process) in two processes on `node`, traced by `trace`;
  # returns the growth of the node's memory at its peak.
  defp flood(node, kind, calls) do
    me = self()
    baseline = :erpc.call(node, :erlang, :memory, [:total])
    sampler = :erpc.call(node, Flood, :sampler, [])
    flooders = for _ <- 1..2, do: :erpc.call(node, Flood, :flooder, [me, kind, calls])
    for pid <- flooders, do: assert_receive({:built, ^pid}, 60_000)
    for pid <- flooders, do: send(pid, :go)
    for pid <- flooders, do: assert_receive({:flooded, ^pid}, 120_000)
    :ok = :erpc.call(node, Flood, :delivered, [])
    send(sampler, {:stop, me})
    assert_receive {:peak, ^sampler, peak}, 10_000
    peak - baseline
  end

  # The info `read` gives once the tracer has taken in every call (or its guard switched
  # tracing off: then fewer were traced).
  defp settled(read, calls) do
    wait_until(fn ->
      info = read.()
      info.fallback.received == calls or info.fallback.switched_off > 0
    end)

    read.()
  end

  # Every trace message was accepted or dropped; a call is not traced only while the
  # mailbox guard had tracing off.
  defp assert_accounted(info, calls) do
    dropped = info.dropped |> Map.values() |> Enum.sum()
    %{received: received, switched_off: switched_off} = info.fallback
    assert info.accepted + dropped == received
    assert received <= calls
    if switched_off == 0, do: assert(received == calls)
    assert info.accepted == info.delivered + info.queued + info.discarded
    {received, switched_off, dropped}
  end

  defp report(where, kind, growth, {received, switched_off, dropped}, calls) do
    IO.puts(
      "\n  #{where} fallback, #{kind}: #{calls} calls, #{received} traced, #{dropped} dropped, " <>
        "#{switched_off} switch-offs; node memory +#{div(growth, 1024 * 1024)} MiB at peak"
    )
  end

  # What each flood's events show: the huge arguments cut (the match spec sent none of
  # them), the medium ones copied and cut by the caps.
  defp assert_args(events, kind) do
    calls = for e <- events, e.kind == :call, do: e.args
    assert calls != []

    for args <- calls do
      case kind do
        :medium -> assert [[%{} | _]] = args
        _ -> assert [%Cut{kind: :bytes}] = args
      end
    end
  end

  describe "agent: :fallback on a bare peer" do
    for {kind, calls} <- @floods do
      @tag flood: kind
      test "#{kind}: the node's memory stays bounded and every call is accounted for" do
        {_peer, n, _tmp} = bare_peer(unquote(kind))
        {:module, Flood} = :erpc.call(n, :code, :load_binary, [Flood, ~c"flood.beam", @beam])
        trace = Kino.Trace.calls([@pattern], nodes: [n], agent: :fallback, return: false)
        assert {:fallback, _} = Kino.Trace.info(trace).nodes[n].tracer

        growth = flood(n, unquote(kind), unquote(calls))
        assert growth < @bound, "the node's memory grew by #{div(growth, 1024 * 1024)} MiB"
        # every trace message is in the peer's tracer's mailbox: it counts each as it
        # takes it (its counters are read without asking it)
        info = settled(fn -> Kino.Trace.info(trace).nodes[n] end, 2 * unquote(calls))
        :ok = Kino.Trace.flush(trace)
        events = Kino.Trace.events(trace, 10_000)
        counts = assert_accounted(info, 2 * unquote(calls))
        report("peer's", unquote(kind), growth, counts, 2 * unquote(calls))
        Kino.Trace.stop(trace)
        assert_args(events, unquote(kind))
      end
    end
  end

  describe "this node's fallback tracer" do
    setup do
      KinoTraceTest.Helpers.use_fallback_tracer()
    end

    test "arguments that look huge are not copied; the rest is, with the caller and the returns" do
      trace = Kino.Trace.calls([@pattern], caller: true, pids: [self()])
      # over max(4 * max_items, 200) elements, or nested deeper than max_depth + 2 (12)
      # along first elements
      huge = [
        Enum.to_list(1..201),
        List.to_tuple(Enum.to_list(1..201)),
        Map.new(1..201, &{&1, &1}),
        Enum.reduce(1..13, :leaf, &[&2, &1]),
        Enum.reduce(1..13, :leaf, &{&2, &1})
      ]

      # just under, an improper list, a huge binary (refcounted: the message holds a
      # reference to it)
      small = [
        Enum.to_list(1..200),
        Enum.reduce(1..12, :leaf, &[&2, &1]),
        Enum.reduce(1..12, :leaf, &{&2, &1}),
        [1 | 2],
        :binary.copy("x", 1_000_000)
      ]

      Enum.each(huge ++ small, &Flood.f/1)

      events = KinoTraceTest.Helpers.events_after(trace)
      Kino.Trace.stop(trace)
      calls = for e <- events, e.kind == :call, do: e
      assert length(calls) == length(huge ++ small)
      assert length(for e <- events, e.kind == :return, do: e) == length(calls)
      assert [{Enum, _, _}] = calls |> Enum.map(& &1.caller) |> Enum.uniq()
      {cut, copied} = Enum.split(calls, length(huge))
      assert Enum.all?(cut, &match?([%Cut{kind: :bytes}], &1.args))

      # copied, then cut by the caps as the native tracer cuts them
      for {event, x} <- Enum.zip(copied, small) do
        assert event.args == elem(:kino_trace_fallback.roundtrip([x], %{}), 0)
      end
    end

    # The tracer process suspended while 20 calls put ~3 MB in its mailbox: once it runs
    # again, its guard finds more than mailbox_bytes (1 MB) there after the first message
    # and switches tracing off; the rest is dropped and counted.
    test "more bytes than mailbox_bytes in the mailbox trip the guard, whatever the count" do
      handle = :kino_trace_fallback.new_session(self(), %{mailbox_bytes: 1024 * 1024})
      tracer = :kino_trace_fallback.tracer(handle)
      session = :trace.session_create(:fallback_memory_test, tracer, [])
      on_exit(fn -> :trace.session_destroy(session) end)
      :ok = :kino_trace_fallback.attach(handle, session)
      :trace.function(session, {Flood, :f, 1}, [{:_, [], []}], [:local])
      parent = self()
      list = Enum.to_list(1..10_000)

      pid =
        spawn(fn ->
          receive(do: (:go -> Enum.each(1..20, fn _ -> Flood.f(list) end)))
          send(parent, :called)
        end)

      :trace.process(session, pid, true, :kino_trace_fallback.flags([:call]))

      true = :erlang.suspend_process(tracer)
      send(pid, :go)
      assert_receive :called
      KinoTraceTest.Helpers.trace_delivered(pid)
      true = :erlang.resume_process(tracer)
      # a request is answered after the messages before it
      :ok = :kino_trace_fallback.attach(handle, session)

      c = :kino_trace_fallback.counters(handle)
      info = :kino_trace_fallback.info(handle)
      :kino_trace_fallback.close(handle)
      assert info.received == 20
      assert c.accepted + c.dropped_queue_full == 20
      assert info.guard_trips == 1 and c.dropped_queue_full >= 18
      assert info.mailbox_bytes_peak > 1024 * 1024 and info.mailbox_peak <= 20
    end

    # Issue 36 item 1: the guard's switch-off waits for the running callers, which go on
    # calling meanwhile (a time slice of calls, each copying its return value whole into
    # a message: GBs in under a second). The moment the guard trips, it closes the
    # session's gate, a bit of the node's trace control word that its call match specs
    # read at each call: calls then send their MFA alone, with no return action, and each
    # is counted as dropped. Here the gate is closed by hand while the tracer is
    # suspended: five calls returning a 1 M-element list (16 MB as a message) must put
    # next to nothing in its mailbox.
    test "while the gate is closed, calls copy neither arguments nor return values, and each is counted" do
      handle = :kino_trace_fallback.new_session(self(), %{})
      tracer = :kino_trace_fallback.tracer(handle)
      session = :trace.session_create(:fallback_memory_test, tracer, [])
      on_exit(fn -> :trace.session_destroy(session) end)
      :ok = :kino_trace_fallback.attach(handle, session, :owner)
      spec = [{:_, [], [{:exception_trace}]}]

      [mfa, spec, flags] =
        :kino_trace_fallback.trace_args(handle, :function, [{Flood, :echo, 1}, spec, [:local]])

      :trace.function(session, mfa, spec, flags)
      parent = self()

      caller =
        spawn(fn ->
          list = Flood.arg(:long_list)

          for {round, n} <- [closed: 5, open: 2] do
            receive(do: (^round -> :ok))
            for _ <- 1..n, do: Flood.echo(list)
            send(parent, {:called, round})
          end
        end)

      :trace.process(session, caller, true, :kino_trace_fallback.process_flags([:call]))
      gate = :kino_trace_fallback_gate.bit(:kino_trace_fallback.session_id(handle))

      tcw = fn update ->
        word = :erlang.system_info(:trace_control_word)
        :erlang.system_flag(:trace_control_word, update.(word))
      end

      true = :erlang.suspend_process(tracer)
      tcw.(&Bitwise.bor(&1, gate))
      send(caller, :closed)
      assert_receive {:called, :closed}, 30_000
      KinoTraceTest.Helpers.trace_delivered(caller)
      {:memory, held} = Process.info(tracer, :memory)
      tcw.(&Bitwise.band(&1, Bitwise.bnot(gate)))
      true = :erlang.resume_process(tracer)
      # a request is answered after the messages before it
      :ok = :kino_trace_fallback.attach(handle, session, :owner)
      assert held < 1024 * 1024, "the tracer's mailbox held #{div(held, 1024)} KiB"
      assert %{accepted: 0, dropped_queue_full: 5} = :kino_trace_fallback.counters(handle)
      assert %{received: 5} = :kino_trace_fallback.info(handle)

      # open again: the calls (their huge argument cut) and their returns
      send(caller, :open)
      assert_receive {:called, :open}, 30_000
      KinoTraceTest.Helpers.trace_delivered(caller)
      :ok = :kino_trace_fallback.attach(handle, session, :owner)
      {events, false} = :kino_trace_fallback.drain(handle, 100)
      assert Enum.map(events, &elem(&1, 0)) == [:call, :return_from, :call, :return_from]
      :kino_trace_fallback.close(handle)
      # nothing left behind
      assert Bitwise.band(:erlang.system_info(:trace_control_word), gate) == 0
    end

    test "a bad mailbox_bytes is refused, naming it" do
      assert_raise ArgumentError,
                   "invalid value for :mailbox_bytes: expected a positive integer",
                   fn ->
                     :kino_trace_fallback.new_session(self(), %{mailbox_bytes: 0})
                   end
    end

    for {kind, calls} <- @floods do
      @tag flood: kind
      test "#{kind}: this node's memory stays bounded and every call is accounted for" do
        trace = Kino.Trace.calls([@pattern], return: false)
        assert {:fallback, _} = Kino.Trace.info(trace).tracer

        growth = flood(node(), unquote(kind), unquote(calls))
        assert growth < @bound, "the node's memory grew by #{div(growth, 1024 * 1024)} MiB"
        # info/1 has this node's fallback take in its mailbox first
        info = Kino.Trace.info(trace)
        events = Kino.Trace.events(trace, 10_000)
        counts = assert_accounted(info, 2 * unquote(calls))
        report("this node's", unquote(kind), growth, counts, 2 * unquote(calls))
        Kino.Trace.stop(trace)
        assert_args(events, unquote(kind))
      end
    end
  end
end
