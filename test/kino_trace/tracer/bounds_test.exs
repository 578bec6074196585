defmodule KinoTrace.Tracer.BoundsTest do
  # What a traced call costs the traced process does not grow with its arguments: a huge
  # bitstring, fun capturing a huge term or huge integer costs about what a small argument
  # costs, a list of 50 of them what a list of 50 small ones costs, and the decoded event
  # says what was cut. Closing a session with a full queue frees it natively, in bounded
  # time. Real OTP trace sessions and the real NIF; timing is compared as ratios within
  # one run.
  use ExUnit.Case, async: false

  alias Kino.Trace.Cut
  alias KinoTrace.Tracer

  import KinoTraceTest.Helpers, only: [drain_all: 1, trace_delivered: 1]

  defmodule Target do
    def echo(x), do: x
  end

  @mb10 10 * 1024 * 1024
  # The queue's caps are split between the schedulers' shards and the fallback's: a part
  # of 1 M events each, which one process filling the queue from its scheduler needs.
  defp big_queue,
    do: %{queue: [events: 1_000_000 * (System.schedulers() + 1), bytes: 8 * 1024 * 1024 * 1024]}

  # The arguments, built inside the process that passes them.
  def arg(:small), do: 42
  def arg(:bitstring), do: <<:binary.copy(<<200>>, @mb10)::binary, 5::3>>
  def arg(:fun), do: sizer(:binary.copy(<<200>>, @mb10))
  def arg(:fun_list), do: lengther(:lists.seq(1, 1_300_000))
  # The largest integer ERTS holds (65535 64-bit digits, 512 KiB).
  def arg(:bignum), do: Bitwise.bsl(1, 64 * 65_535 - 1) + 12_345

  def arg(:list_of_50),
    do: Enum.map(1..50, fn i -> arg(Enum.at([:bitstring, :fun, :bignum], rem(i, 3))) end)

  # The same list with terms just under the caps (copied whole): what a list of 50 costs
  # when nothing in it is large.
  def arg(:list_of_50_small),
    do:
      Enum.map(1..50, fn i ->
        arg(Enum.at([:small_bitstring, :small_fun, :small_bignum], rem(i, 3)))
      end)

  def arg(:small_bitstring), do: <<:binary.copy(<<200>>, 500)::binary, 5::3>>
  def arg(:small_fun), do: sizer(:binary.copy(<<200>>, 400))
  def arg(:small_bignum), do: Bitwise.bsl(1, 8 * 500) + 12_345

  # Local funs whose one free variable is the binary or the list.
  defp sizer(bin), do: fn -> byte_size(bin) end
  defp lengther(list), do: fn -> length(list) end

  defp start(limits \\ big_queue()) do
    resource = Tracer.new_session(self(), limits)
    session = :trace.session_create(:tracer_bounds_test, {:kino_trace_tracer, resource}, [])
    :trace.function(session, {Target, :_, :_}, true, [:local])
    on_exit(fn -> :trace.session_destroy(session) end)
    {resource, session}
  end

  # A process that builds its argument, is traced, and runs `n` calls on request,
  # answering with the time they took.
  defp worker(session, kind) do
    parent = self()
    pid = spawn_link(fn -> worker_loop(parent, arg(kind)) end)
    :trace.process(session, pid, true, [:call])
    pid
  end

  defp worker_loop(parent, arg) do
    receive do
      {:run, n} ->
        t0 = System.monotonic_time(:nanosecond)
        calls(n, arg)
        send(parent, {:ran, self(), System.monotonic_time(:nanosecond) - t0})
        worker_loop(parent, arg)
    end
  end

  defp calls(0, _arg), do: :ok

  defp calls(n, arg) do
    Target.echo(arg)
    calls(n - 1, arg)
  end

  defp run(pid, n) do
    send(pid, {:run, n})
    assert_receive {:ran, ^pid, ns}, 30_000
    ns / n
  end

  # Waits until each of `pids` has run on (100 000 reductions more: thousands of calls).
  defp floods_run_on(pids) do
    ran = for pid <- pids, do: {pid, reductions(pid)}

    KinoTraceTest.Helpers.wait_until(fn ->
      Enum.all?(ran, fn {pid, r} -> reductions(pid) > r + 100_000 end)
    end)
  end

  defp reductions(pid), do: elem(Process.info(pid, :reductions), 1)

  defp median(list), do: list |> Enum.sort() |> Enum.at(div(length(list), 2))

  # The decoded argument of one traced call with `kind`.
  defp traced_arg(kind) do
    {resource, session} = start()
    pid = worker(session, kind)
    run(pid, 1)
    trace_delivered(pid)
    assert [{:call, ^pid, _, _, Target, :echo, 1, [arg], _, _}] = drain_all(resource)
    arg
  end

  describe "a huge argument is cut, and the event says so" do
    test "a 10 MB bitstring keeps its first max_binary bytes and its size in bits" do
      assert %Cut{kind: :bitstring, value: prefix, size: size} = traced_arg(:bitstring)
      assert prefix == :binary.copy(<<200>>, 512)
      assert size == @mb10 * 8 + 3
      assert inspect(traced_arg(:bitstring), limit: 3) == "<<200, 200, 200, ...>> <> ..."
    end

    test "a fun capturing 10 MB keeps its identity" do
      assert %Cut{kind: :fun, value: identity, size: 1} = traced_arg(:fun)
      fun = arg(:fun)
      assert identity.module == __MODULE__
      assert identity.arity == 0
      assert {:new_index, identity.index} == Function.info(fun, :new_index)
      assert {:uniq, identity.uniq} == Function.info(fun, :uniq)

      assert inspect(traced_arg(:fun)) ==
               "#Function<#{identity.index}.#{identity.uniq}/0 in #{inspect(__MODULE__)}, ...>"

      assert %Cut{kind: :fun, size: 1} = traced_arg(:fun_list)
    end

    test "a 512 KiB integer keeps its sign, size and leading hex digits" do
      assert %Cut{kind: :integer, value: lead, size: bits} = traced_arg(:bignum)
      assert bits == 64 * 65_535
      assert lead > 0 and Bitwise.bsr(arg(:bignum), bits - bit_length(lead)) == lead
      assert inspect(traced_arg(:bignum)) == "0x800000000000000... (#{bits} bits)"
    end

    @tag :slow
    test "a list of 50 of them stays within the event's byte budget" do
      assert [_ | _] = args = traced_arg(:list_of_50)
      assert Cut.cut?(args)

      kinds =
        args
        |> Enum.filter(&match?(%Cut{}, &1))
        |> Enum.map(& &1.kind)
        |> Enum.uniq()
        |> Enum.sort()

      assert :bitstring in kinds and :fun in kinds and :integer in kinds
    end

    test "small ones are still copied exactly" do
      x = Enum.random(1..10)

      small = [
        <<1, 2, 3::5>>,
        2 ** 100,
        -(2 ** 4000),
        fn y -> y + x end,
        &Enum.map/2,
        <<0::4095>>
      ]

      for term <- small do
        {copy, _bytes} = Tracer.roundtrip(term, %{})
        assert copy === term, "round trip changed #{inspect(term)} into #{inspect(copy)}"
      end
    end
  end

  defp bit_length(lead), do: length(Integer.digits(lead, 2))

  # Per-call cost of each kind of argument, median of interleaved rounds, as ratios to
  # the cost with `base`.
  defp cost_ratios(kinds, base) do
    {resource, session} = start()
    workers = Map.new([base | kinds], &{&1, worker(session, &1)})
    for {_kind, pid} <- workers, do: run(pid, 20)
    drain_all(resource)

    times =
      for _round <- 1..9, kind <- Enum.shuffle([base | kinds]), reduce: %{} do
        acc ->
          t = run(workers[kind], 200)
          drain_all(resource)
          Map.update(acc, kind, [t], &[t | &1])
      end

    base_ns = median(times[base])
    ratios = Map.new(kinds, &{&1, median(times[&1]) / base_ns})
    report = Enum.map_join(kinds, ", ", &"#{&1} #{Float.round(ratios[&1], 2)}x")
    IO.puts("\n  per-call cost / #{base} (#{round(base_ns)} ns): #{report}")

    for kind <- kinds,
        do: assert(ratios[kind] <= 3.0, "#{kind}: #{Float.round(ratios[kind], 2)}x (#{report})")
  end

  # Timing: left out of the sanitized run (scripts/test-nif-sanitized.sh), where the
  # NIF alone is instrumented.
  @tag :timing
  test "a huge argument costs within 3x a small one" do
    cost_ratios([:bitstring, :fun, :fun_list, :bignum], :small)
  end

  @tag :slow
  @tag :timing
  test "50 huge arguments cost within 3x 50 small ones: the caps bound the work, not the terms' size" do
    cost_ratios([:list_of_50], :list_of_50_small)
  end

  describe "closing under a full queue" do
    test "frees 1 M queued events natively, counts them discarded, while producers still call in" do
      {resource, session} = start()
      filler = worker(session, :small)
      run(filler, 1_000_000)
      assert Tracer.counters(resource).queued == 1_000_000

      # Producers keep calling in while the session closes; drain and counters stay bounded.
      floods = for _ <- 1..2, do: worker(session, :small)
      for pid <- floods, do: send(pid, {:run, 200_000_000})
      # the floods are calling in (accepted, or dropped where their scheduler's part is full)
      offered = fn c -> c.accepted + c.dropped_queue_full end
      before = offered.(Tracer.counters(resource))
      KinoTraceTest.Helpers.wait_until(fn -> offered.(Tracer.counters(resource)) > before end)
      {drain_us, {batch, true}} = :timer.tc(fn -> Tracer.drain(resource, 1000) end)
      {counters_us, during} = :timer.tc(fn -> Tracer.counters(resource) end)
      assert length(batch) == 1000
      assert during.accepted == during.delivered + during.queued + during.discarded

      {close_us, :ok} = :timer.tc(fn -> Tracer.close(resource) end)

      IO.puts(
        "\n  under a flood: drain(1000) #{drain_us} us, counters #{counters_us} us; close with " <>
          "#{during.queued} queued: #{div(close_us, 1000)} ms"
      )

      # the floods call on after close (their reductions grow), and nothing is accepted
      floods_run_on(floods)
      c = Tracer.counters(resource)
      floods_run_on(floods)
      assert Tracer.counters(resource).accepted == c.accepted
      for pid <- floods, do: Process.unlink(pid) && Process.exit(pid, :kill)

      assert close_us < 10_000_000
      assert drain_us < 1_000_000 and counters_us < 1_000_000
      assert c.closed and c.queued == 0 and c.bytes_queued == 0
      assert c.delivered == 1000
      assert c.accepted == c.delivered + c.discarded
      assert c.discarded >= 1_000_000 - 1000
      assert Tracer.drain(resource, 1000) == {[], false}
    end
  end
end
