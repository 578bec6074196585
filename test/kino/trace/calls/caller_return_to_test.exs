defmodule Kino.Trace.Calls.CallerReturnToTest do
  # Real traces of a worker process: `caller: :line` (where each call was made) and
  # `return_to: true` (where traced calls return into).
  use ExUnit.Case, async: false

  alias Kino.Trace
  alias Kino.Trace.{Event, Printer}
  alias KinoTrace.Widget.Payload
  alias KinoTraceTest.Sample.{Math, Worker}

  @file_name Path.relative_to_cwd(__ENV__.file)

  defp kinds(events), do: Enum.map(events, &{&1.kind, Event.mfa(&1)})

  # A fresh worker, and a trace of `patterns` in it with `opts`.
  defp traced_worker(patterns, opts \\ []) do
    worker = Worker.start()
    {worker, Trace.calls(patterns, [pids: worker] ++ opts)}
  end

  defp line(event), do: event |> Printer.format(time: false) |> IO.iodata_to_binary()

  describe "return_to: true" do
    test "records where a traced call returns into, after an exception caught there too" do
      {worker, trace} = traced_worker(["KinoTraceTest.Sample.Math"], return_to: true)
      Worker.run(worker, fn -> Math.safe_boom("no") end)

      assert [
               {:call, {Math, :safe_boom, 1}},
               {:call, {Math, :boom, 1}},
               {:exception, {Math, :boom, 1}},
               {:return_to, {Math, :safe_boom, 1}},
               {:return, {Math, :safe_boom, 1}},
               {:return_to, {m, _, _}}
             ] = kinds(Trace.events(trace))

      # the worker's loop, which ran the function
      assert m == Worker
    end

    test "without return tracing, once per chain of tail calls, inside the function returned into" do
      {worker, trace} =
        traced_worker(["KinoTraceTest.Sample.Math"],
          return_to: true,
          return: false,
          exceptions: false
        )

      # double/1 calls add/2 as a tail call: one return, into the fun below
      Worker.run(worker, fn ->
        Math.double(2)
        :ok
      end)

      # the fun calls secret/1 as a tail call: secret/1 returns into the worker's loop
      Worker.run(worker, fn -> Math.secret(1) end)

      assert [
               {:call, {Math, :double, 1}},
               {:call, {Math, :add, 2}},
               {:return_to, {__MODULE__, fun, 0}},
               {:call, {Math, :secret, 1}},
               {:call, {Math, :hidden, 1}},
               {:return_to, {Math, :secret, 1}},
               {:return_to, {Worker, :loop, 0}}
             ] = kinds(Trace.events(trace))

      assert "#{fun}" =~ "-fun-"
    end

    test "the console and the widget show the function returned into" do
      {worker, trace} = traced_worker(["KinoTraceTest.Sample.Math.boom/1"], return_to: true)
      Worker.run(worker, fn -> Math.safe_boom("no") end)

      assert [_call, _exception, %Event{kind: :return_to, depth: 0} = back] = Trace.events(trace)

      assert line(back) =~
               ~r/^#PID<[\d.]+> <- returned to KinoTraceTest.Sample.Math.safe_boom\/1$/

      row = Payload.event(back)

      assert {row.kind, row.mfa, row.call} ==
               {"return_to", "KinoTraceTest.Sample.Math.safe_boom/1", nil}
    end

    test "a process's first call returns to no function" do
      pid =
        spawn(fn ->
          receive do
            :go -> Math.echo(1)
          end
        end)

      ref = Process.monitor(pid)
      trace = Trace.calls(["KinoTraceTest.Sample.Math.echo/1"], pids: pid, return_to: true)
      send(pid, :go)
      assert_receive {:DOWN, ^ref, :process, _, :normal}

      assert [_call, _return, %Event{kind: :return_to, module: nil} = back] = Trace.events(trace)
      assert line(back) =~ ~r/ <- returned to \(no function\)$/
      assert Payload.event(back).mfa == nil
    end

    test "no return_to events unless asked" do
      {worker, trace} = traced_worker(["KinoTraceTest.Sample.Math"])
      Worker.run(worker, fn -> Math.safe_boom("no") end)
      refute Enum.any?(Trace.events(trace), &(&1.kind == :return_to))
    end
  end

  describe "caller: :line" do
    test "gives the file and line each call was made from" do
      {worker, trace} =
        traced_worker(["KinoTraceTest.Sample.Math.echo/1"], caller: :line, return: false)

      first = __ENV__.line + 4
      second = first + 1

      Worker.run(worker, fn ->
        x = Math.echo(1)
        Math.echo(x)
        :ok
      end)

      # (the VM's `caller_line` would give `second` for the first call: the line of the
      # code the call returns to)
      assert [
               %Event{caller: {__MODULE__, fun, 0, {@file_name, ^first}}},
               %Event{caller: {__MODULE__, fun, 0, {@file_name, ^second}}}
             ] = Trace.events(trace)

      assert "#{fun}" =~ "-fun-"
    end

    test "a call from another module's function, and the caller of a BIF" do
      {worker, trace} =
        traced_worker(["KinoTraceTest.Sample.Math.boom/1", ":erlang.phash2/1"], caller: :line)

      Worker.run(worker, fn -> Math.safe_boom("no") end)
      Worker.run(worker, fn -> {:erlang.phash2(:x)} end)
      line = __ENV__.line - 1

      source = File.read!("test/support/trace_sample.ex") |> String.split("\n")
      boom_line = Enum.find_index(source, &(&1 =~ "    boom(message)")) + 1

      assert [
               %Event{
                 function: :boom,
                 caller: {Math, :safe_boom, 1, {"test/support/trace_sample.ex", ^boom_line}}
               },
               %Event{kind: :exception},
               %Event{function: :phash2, caller: {__MODULE__, _, 0, {@file_name, ^line}}},
               %Event{kind: :return}
             ] = Trace.events(trace)
    end

    test "the console and the widget show where the call was made" do
      {worker, trace} =
        traced_worker(["KinoTraceTest.Sample.Math.echo/1"], caller: :line, return: false)

      Worker.run(worker, fn -> {Math.echo(:hi)} end)
      line = __ENV__.line - 1
      [event] = Trace.events(trace)

      where = " at #{@file_name}:#{line}"

      assert line(event) =~
               ~r/ KinoTraceTest.Sample.Math.echo\(:hi\)  \(from Kino.Trace.Calls.CallerReturnToTest.".+"\/0#{where}\)$/

      assert Payload.event(event).caller =~
               ~r/^Kino.Trace.Calls.CallerReturnToTest.".+"\/0#{where}$/
    end

    test "a file name longer than :max_items keeps its first characters" do
      {worker, trace} =
        traced_worker(["KinoTraceTest.Sample.Math.echo/1"],
          caller: :line,
          return: false,
          max_items: 4
        )

      Worker.run(worker, fn -> {Math.echo(1)} end)
      line = __ENV__.line - 1

      assert [%Event{caller: {__MODULE__, _, 0, {"test...", ^line}}}] = Trace.events(trace)
    end

    test "caller: true stays the function alone" do
      {worker, trace} =
        traced_worker(["KinoTraceTest.Sample.Math.echo/1"], caller: true, return: false)

      Worker.run(worker, fn -> {Math.echo(1)} end)
      assert [%Event{caller: {__MODULE__, fun, 0}}] = Trace.events(trace)
      assert "#{fun}" =~ "-fun-"
    end
  end
end
