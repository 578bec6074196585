defmodule KinoTrace.Widget.SlowCallsLinkTest do
  # The trace widget's Stats tab links to the slow calls (issue 38.2), on the Elixir
  # side: real traces through the real controller, every payload checked against the
  # wire's schema. A row's link counts the slow calls the trace keeps (`slowest:`,
  # `slower_than:`); a "get_slow_calls" request answers with them whole (arguments,
  # result or exception, duration, process, call tree), or, for a trace that keeps none,
  # with the slowest of the events the widget keeps.
  use ExUnit.Case, async: false

  alias KinoTrace.Widget.{Controller, SlowPayload}
  alias KinoTraceTest.Sample.Timing
  alias KinoTraceTest.{WidgetDriver, WireSchema}

  @moduletag timeout: 60_000

  @wait "KinoTraceTest.Sample.Timing.wait/1"
  @b "KinoTraceTest.Sample.Timing.b/1"
  @fail "KinoTraceTest.Sample.Timing.fail/1"

  # Handles the widget's messages until `n` returns or exceptions were pushed
  # (WidgetDriver.drive/2: ticks are left to the test).
  defp drive(controller, n) do
    {controller, _sent} =
      WidgetDriver.drive(controller, fn sent ->
        Enum.count(WidgetDriver.rows(sent), &(&1.kind in ["return", "exception"])) >= n
      end)

    controller
  end

  defp latency_rows(controller) do
    {effects, controller} = WidgetDriver.info(Controller, controller, :tick)
    [%{rows: rows}] = for {:broadcast, "latency", p} <- effects, do: p
    {Map.new(rows, &{&1.mfa, &1}), controller}
  end

  defp ask(controller, request) do
    {[{:reply, "slow_calls", reply}], _} =
      Controller.handle_event(controller, "get_slow_calls", request)

    WireSchema.check_event!("slow_calls", reply)
    reply
  end

  test "a trace with slowest: k: each row links to its k slowest, kept whole since the start" do
    trace =
      Kino.Trace.calls(
        [
          "KinoTraceTest.Sample.Timing.wait/1",
          "KinoTraceTest.Sample.Timing.b/1",
          "KinoTraceTest.Sample.Timing.leaf/0",
          "KinoTraceTest.Sample.Timing.fail/1"
        ],
        slowest: 2
      )

    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)

    worker =
      Task.async(fn ->
        # the two slowest by far (a loaded machine delays the others by some milliseconds)
        for ms <- [1, 90, 2, 50], do: Timing.wait(ms)
        Timing.b(3)
        catch_error(Timing.fail(1))
        self()
      end)
      |> Task.await()

    # 4 waits, b and its 2 leaves, fail
    controller = drive(controller, 8)
    {rows, controller} = latency_rows(controller)
    assert rows[@wait].slow == 2
    assert rows[@b].slow == 1
    assert rows[@fail].slow == 1

    reply = ask(controller, %{"mfa" => @wait})

    assert {reply.key, reply.from, reply.slowest_omitted, reply.slower_than} ==
             {@wait, "trace", 0, []}

    # slowest first, with their arguments, results, durations and process
    assert [ninety, fifty] = reply.slowest

    assert {ninety.call.call, ninety.end.result, fifty.call.call} ==
             {"KinoTraceTest.Sample.Timing.wait(90)", ":ok",
              "KinoTraceTest.Sample.Timing.wait(50)"}

    assert ninety.duration >= 90_000_000 and fifty.duration >= 50_000_000 and
             ninety.duration > fifty.duration

    assert ninety.pid == inspect(worker)

    # the call tree beneath a slow call: b, its two leaves, their returns, b's return
    %{slowest: [b]} = ask(controller, %{"mfa" => @b})

    assert Enum.map(b.events, &{&1.kind, &1.mfa}) == [
             {"call", @b},
             {"call", "KinoTraceTest.Sample.Timing.leaf/0"},
             {"return", "KinoTraceTest.Sample.Timing.leaf/0"},
             {"call", "KinoTraceTest.Sample.Timing.leaf/0"},
             {"return", "KinoTraceTest.Sample.Timing.leaf/0"},
             {"return", @b}
           ]

    # an exception: its end is the exception
    %{slowest: [failed]} = ask(controller, %{"mfa" => @fail})
    assert failed.end.kind == "exception" and failed.end.exception =~ "failed on purpose"

    # a key that names no function, or a request that is no text: nothing (no atom made)
    assert %{slowest: [], slower_than: [], key: "Nope.nope/0"} =
             ask(controller, %{"mfa" => "Nope.nope/0"})

    assert %{slowest: [], key: ""} = ask(controller, %{"mfa" => 12})
  end

  test "a trace that keeps none: no count, the link finds the slowest in the widget's events" do
    trace = Kino.Trace.calls(["KinoTraceTest.Sample.Timing.wait/1"])
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)
    # the slowest by far: a loaded machine delays the others by some milliseconds
    # (wait(2) once took longer than wait(4))
    Task.async(fn -> for ms <- [1, 200, 2, 1, 1, 1, 3], do: Timing.wait(ms) end) |> Task.await()
    controller = drive(controller, 7)
    {rows, controller} = latency_rows(controller)
    assert rows[@wait].slow == nil

    reply = ask(controller, %{"mfa" => @wait})
    assert reply.from == "events"
    # the widget's events: its slowest 5, slowest first
    assert length(reply.slowest) == 5
    assert hd(reply.slowest).call.call == "KinoTraceTest.Sample.Timing.wait(200)"
    durations = Enum.map(reply.slowest, & &1.duration)
    assert durations == Enum.sort(durations, :desc)
  end

  test "slower_than: the newest calls over the threshold, at most 20 in a reply, the others counted" do
    trace = Kino.Trace.calls(["KinoTraceTest.Sample.Timing.leaf/0"], slower_than: 0, slowest: nil)
    on_exit(fn -> Kino.Trace.stop(trace) end)
    {controller, _} = Controller.init(trace, lifeline: false)
    Task.async(fn -> for _ <- 1..25, do: Timing.leaf() end) |> Task.await()
    controller = drive(controller, 25)
    {rows, controller} = latency_rows(controller)
    assert rows["KinoTraceTest.Sample.Timing.leaf/0"].slow == 25

    reply = ask(controller, %{"mfa" => "KinoTraceTest.Sample.Timing.leaf/0"})
    assert {length(reply.slower_than), reply.slower_than_omitted, reply.over} == {20, 5, 25}
    # the newest, oldest first
    ids = Enum.map(reply.slower_than, & &1.call_id)
    assert ids == Enum.sort(ids)
    all = Kino.Trace.slow_calls(trace).slower_than
    assert ids == all |> Enum.take(-20) |> Enum.map(& &1.call_id)
  end

  test "counts/1 and keyed/1 agree with the report" do
    capture =
      Kino.Trace.capture(["KinoTraceTest.Sample.Timing.leaf/0"], fn ->
        for _ <- 1..3, do: Timing.leaf()
      end)

    report = Kino.Trace.slow_calls(capture, slowest: 2, slower_than: 0)
    # each call once: the 2 slowest are among the 3 over the threshold
    assert SlowPayload.counts(report) == %{"KinoTraceTest.Sample.Timing.leaf/0" => 3}
    assert KinoTrace.Latency.SlowCalls.counts(report) == %{{Timing, :leaf, 0} => 3}
  end
end
