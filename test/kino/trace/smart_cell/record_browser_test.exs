defmodule Kino.Trace.SmartCell.RecordBrowserTest do
  # The smart cell's Record mode (issue 37 item 5) in headless Chromium
  # (test/browser/smart_cell_record.test.mjs), on payloads of the real controller; then
  # what the browser pushed is replayed through the controller and its code is run: it
  # starts recording, an exception triggers it, the frozen snapshot is there, saved to a
  # trace file and opened again.
  #
  # Needs Node.js, assets/node_modules and /usr/bin/chromium: tagged :browser.
  use ExUnit.Case, async: false

  alias KinoTrace.SmartCell.{Controller, Form}
  alias KinoTraceTest.{Browser, Helpers}
  alias KinoTraceTest.Sample.{Math, Worker}

  @moduletag :browser
  @moduletag timeout: 300_000

  test "Record mode in Chromium makes a recorder: started, triggered, its snapshot saved" do
    saved = %{"mode" => "calls", "patterns" => "KinoTraceTest.Sample.Math"}
    bad = "KinoTraceTest.Sample.Math.dobule(n)"
    good = "KinoTraceTest.Sample.Math.double(n) when n > 1000"

    checks =
      for text <- [bad, good], into: %{} do
        form = Map.merge(saved, %{"mode" => "record", "on_match" => text})
        {text, Controller.check(Form.new(form))}
      end

    assert checks[bad].on_match =~ "did you mean"
    assert checks[good].on_match == nil

    dir = Browser.tmp_dir()
    pushed_out = Path.join(dir, "pushed.json")

    fixture = %{
      connect: Controller.connect(Controller.init(saved)),
      on_match_checks: checks,
      bad_match: bad,
      good_match: good,
      pushed_out: pushed_out
    }

    Browser.run("smart_cell_record.test.mjs", fixture)

    # Replay the browser's updates through the real controller, as Kino would.
    controller = Browser.replay_cell(saved, pushed_out)

    source = Controller.to_source(Controller.to_attrs(controller))

    assert source == """
           Kino.Trace.record(["KinoTraceTest.Sample.Math"],
             events: 100,
             on: [exception: true, match: "KinoTraceTest.Sample.Math.double(n) when n > 1000"],
             after: 2
           )\
           """

    # start recording
    {rec, _binding} = Code.eval_string(source)
    worker = Worker.start()

    try do
      # trigger: an exception raised in a traced call
      Worker.run(worker, fn ->
        Math.double(1)

        try do
          Math.boom("out of stock")
        rescue
          e -> e
        end

        Math.double(2)
        Math.double(3)
      end)

      Helpers.trace_delivered(worker)
      :ok = Kino.Trace.flush(rec)

      # the frozen snapshot: up to the exception, then the after-window's 2 events
      [snap] = Kino.Trace.snapshots(rec)
      assert %{trigger: :exception, pid: ^worker} = Kino.Trace.info(snap).snapshot
      events = for e <- Kino.Trace.events(snap), e.pid == worker, do: {e.kind, e.function}

      assert Enum.take(events, -4) == [
               {:call, :boom},
               {:exception, :boom},
               {:call, :double},
               {:call, :add}
             ]

      # saved, and opened again
      file = Path.join(dir, "snapshot.ktrace")
      :ok = Kino.Trace.save(snap, file)
      opened = Kino.Trace.open(file)

      assert Kino.Trace.events(opened) |> Enum.map(&{&1.kind, &1.function}) ==
               Kino.Trace.events(snap) |> Enum.map(&{&1.kind, &1.function})

      Kino.Trace.stop(opened)
    after
      Kino.Trace.stop(rec)
      Worker.stop(worker)
    end
  end
end
