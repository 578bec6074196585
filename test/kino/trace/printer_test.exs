defmodule Kino.Trace.PrinterTest do
  use ExUnit.Case, async: true

  import KinoTraceTest.Helpers, only: [wait_until: 1, wait_until: 3]

  import ExUnit.CaptureIO

  alias Kino.Trace
  alias Kino.Trace.{Cut, Event, Printer}
  alias KinoTraceTest.Sample.{Math, Worker}

  doctest Kino.Trace.Printer

  defp pid, do: :c.pid(0, 42, 0)

  defp line(event, opts \\ []) do
    event
    |> Printer.format(Keyword.merge([colors: false, time: false], opts))
    |> IO.iodata_to_binary()
  end

  defp call(fields),
    do:
      struct!(
        %Event{
          kind: :call,
          module: Enum,
          function: :sum,
          arity: 1,
          args: [[1, 2]],
          pid: pid(),
          time: 0
        },
        fields
      )

  describe "format/2" do
    test "a call as Elixir code" do
      assert line(call([])) == "#PID<0.42.0> Enum.sum([1, 2])"

      assert line(call(module: :ets, function: :insert, arity: 2, args: [:t, {:k, "v"}])) ==
               ~S|#PID<0.42.0> :ets.insert(:t, {:k, "v"})|

      assert line(call(function: :map, arity: 0, args: [])) == "#PID<0.42.0> Enum.map()"
    end

    test "odd function names are quoted like Elixir does" do
      assert line(call(module: Kernel, function: :+, arity: 2, args: [1, 2])) ==
               "#PID<0.42.0> Kernel.+(1, 2)"

      assert line(call(function: :"-sum/1-fun-0-", args: [])) ==
               ~S|#PID<0.42.0> Enum."-sum/1-fun-0-"()|
    end

    test "a registered name follows the pid" do
      assert line(call(name: :my_server)) == "#PID<0.42.0> (:my_server) Enum.sum([1, 2])"
    end

    test "the caller when there is one" do
      assert line(call(caller: {MyApp, :run, 2})) ==
               "#PID<0.42.0> Enum.sum([1, 2])  (from MyApp.run/2)"
    end

    test "a return with its duration and function" do
      event = %Event{
        kind: :return,
        module: Enum,
        function: :sum,
        arity: 1,
        return: 3,
        duration: 38_400,
        pid: pid()
      }

      assert line(event) == "#PID<0.42.0> -> 3 (38 µs)  Enum.sum/1"
      assert line(%{event | duration: nil}) == "#PID<0.42.0> -> 3  Enum.sum/1"
    end

    test "exceptions: Elixir exceptions by their message, other classes by their reason" do
      base = %Event{
        kind: :exception,
        module: M,
        function: :f,
        arity: 1,
        pid: pid(),
        duration: 1_250_000
      }

      assert line(%{base | exception: {:error, %ArgumentError{message: "bad id"}}}) ==
               "#PID<0.42.0> !! ** (ArgumentError) bad id (1.3 ms)  M.f/1"

      assert line(%{base | exception: {:throw, :ball}}) ==
               "#PID<0.42.0> !! ** (throw) :ball (1.3 ms)  M.f/1"

      assert line(%{base | exception: {:exit, :shutdown}}) ==
               "#PID<0.42.0> !! ** (exit) :shutdown (1.3 ms)  M.f/1"

      assert line(%{base | exception: {:error, :badarg}}) ==
               "#PID<0.42.0> !! ** (ArgumentError) argument error (1.3 ms)  M.f/1"
    end

    test "indented by call depth" do
      assert line(call(depth: 0)) == "#PID<0.42.0> Enum.sum([1, 2])"
      assert line(call(depth: 1)) == "#PID<0.42.0>   Enum.sum([1, 2])"
      assert line(call(depth: 3)) == "#PID<0.42.0>       Enum.sum([1, 2])"

      ret = %Event{
        kind: :return,
        module: Enum,
        function: :sum,
        arity: 1,
        return: 3,
        pid: pid(),
        depth: 2
      }

      assert line(ret) == "#PID<0.42.0>     -> 3  Enum.sum/1"
    end

    test "cut terms show as ..." do
      args = [
        [1, 2, 3, %Cut{kind: :items}],
        %Cut{kind: :binary, value: "abc", size: 100},
        %Cut{kind: :tuple, value: [:ok], size: 9}
      ]

      assert line(call(args: args, arity: 3)) ==
               ~S|#PID<0.42.0> Enum.sum([1, 2, 3, ...], "abc" <> ..., {:ok, ...})|

      assert line(call(args: [%{a: %Cut{kind: :depth}}])) == "#PID<0.42.0> Enum.sum(%{a: ...})"
    end

    test "long terms are shortened by inspect limits, which can be changed" do
      args = [Enum.to_list(1..100)]
      assert line(call(args: args)) =~ ~r/^#PID<0.42.0> Enum.sum\(\[1, 2, .*, \.\.\.\]\)$/

      assert line(call(args: [[1, 2, 3]]), inspect: [limit: 2]) ==
               "#PID<0.42.0> Enum.sum([1, 2, ...])"
    end

    test "the time as HH:MM:SS.microseconds in local time" do
      us = System.os_time(:microsecond)
      text = line(call(time: us), time: true)
      {{_, _, _}, {h, m, s}} = :calendar.system_time_to_local_time(div(us, 1_000_000), :second)

      expected =
        :io_lib.format(~c"~2..0B:~2..0B:~2..0B.~6..0B", [h, m, s, rem(us, 1_000_000)])
        |> IO.iodata_to_binary()

      assert text == expected <> " #PID<0.42.0> Enum.sum([1, 2])"
      assert text =~ ~r/^\d\d:\d\d:\d\d\.\d{6} /
    end

    test "colors only when asked" do
      refute line(call([])) =~ "\e["
      colored = IO.iodata_to_binary(Printer.format(call([]), colors: true, time: false))
      assert colored =~ IO.ANSI.cyan()
      assert colored =~ IO.ANSI.reset()
      assert colored |> String.replace(~r/\e\[[0-9;]*m/, "") == "#PID<0.42.0> Enum.sum([1, 2])"
    end

    test "message and process events" do
      peer = :c.pid(0, 43, 0)
      base = %Event{pid: pid()}

      assert line(%{base | kind: :send, data: {:hi, 1}, peer: peer}) ==
               "#PID<0.42.0> send {:hi, 1} to #PID<0.43.0>"

      assert line(%{base | kind: :receive, data: :msg}) == "#PID<0.42.0> receive :msg"

      assert line(%{base | kind: :spawn, peer: peer, data: {M, :f, [1]}}) ==
               "#PID<0.42.0> spawn #PID<0.43.0> as M.f(1)"

      assert line(%{base | kind: :exit, data: :normal}) == "#PID<0.42.0> exit :normal"
      assert line(%{base | kind: :link, peer: peer}) == "#PID<0.42.0> link #PID<0.43.0>"
    end

    test "format_duration/1" do
      assert Printer.format_duration(999) == "999 ns"
      assert Printer.format_duration(1_500) == "1.5 µs"
      assert Printer.format_duration(38_400) == "38 µs"
      assert Printer.format_duration(999_400) == "999 µs"
      assert Printer.format_duration(1_250_000) == "1.3 ms"
      assert Printer.format_duration(2_500_000_000) == "2.5 s"
    end
  end

  describe "printing a live trace" do
    # stop/1 right after the calls: the native tracer has queued them in the traced
    # process by then (the fallback's may still be in its mailbox, and stop/1 discards)
    @tag :native_timing
    test "print: [device: ..., colors: false] prints calls, returns and the end, indented" do
      {:ok, io} = StringIO.open("")
      worker = Worker.start()

      trace =
        Trace.calls(["KinoTraceTest.Sample.Math.fact/1"],
          pids: worker,
          print: [device: io, colors: false, time: false]
        )

      Worker.run(worker, fn -> Math.fact(2) end)
      :ok = Trace.stop(trace)
      output = await_output(io, "-- trace stopped --")
      w = inspect(worker)

      lines = String.split(output, "\n", trim: true)
      assert length(lines) == 7

      assert Enum.take(lines, 3) == [
               "#{w} KinoTraceTest.Sample.Math.fact(2)",
               "#{w}   KinoTraceTest.Sample.Math.fact(1)",
               "#{w}     KinoTraceTest.Sample.Math.fact(0)"
             ]

      for {line, prefix} <-
            Enum.zip(Enum.slice(lines, 3, 3), ["#{w}     -> 1 (", "#{w}   -> 1 (", "#{w} -> 2 ("]) do
        assert String.starts_with?(line, prefix),
               "#{inspect(line)} should start with #{inspect(prefix)}"

        assert String.replace_prefix(line, prefix, "") =~
                 ~r/^[\d.]+ (ns|µs|ms|s)\)  KinoTraceTest.Sample.Math.fact\/1$/
      end

      assert List.last(lines) == "-- trace stopped --"
    end

    test "print: true prints to the caller's group leader, with timestamps" do
      output =
        capture_io(fn ->
          worker = Worker.start()
          trace = Trace.calls([&Math.echo/1], pids: worker, print: true, limit: 2)
          Worker.run(worker, fn -> Math.echo(:printed) end)
          await_output(Process.group_leader(), "-- trace limit_reached --")
          Trace.stop(trace)
        end)

      # colours depend on the terminal running the tests
      output = String.replace(output, ~r/\e\[[0-9;]*m/, "")
      assert [call, ret, ending] = String.split(output, "\n", trim: true)

      assert call =~
               ~r/^\d\d:\d\d:\d\d\.\d{6} #PID<[\d.]+> KinoTraceTest.Sample.Math.echo\(:printed\)$/

      assert ret =~
               ~r/^\d\d:\d\d:\d\d\.\d{6} #PID<[\d.]+> -> :printed \(.+\)  KinoTraceTest.Sample.Math.echo\/1$/

      assert ending == "-- trace limit_reached --"
    end

    test "Kino.Trace.print/2 attaches a printer to a running trace; cut terms print as ..." do
      {:ok, io} = StringIO.open("")
      worker = Worker.start()
      trace = Trace.calls([&Math.echo/1], pids: worker, return: false, max_items: 2)
      assert Trace.print(trace, device: io, colors: false, time: false) == trace
      wait_until(fn -> Trace.info(trace).subscribers == 1 end)
      Worker.run(worker, fn -> Math.echo(Enum.to_list(1..10)) end)
      # printed before the trace stops (stop/1 discards what is still queued)
      await_output(io, "echo(")
      :ok = Trace.stop(trace)
      output = await_output(io, "-- trace stopped --")

      assert output ==
               "#{inspect(worker)} KinoTraceTest.Sample.Math.echo([1, 2, ...])\n-- trace stopped --\n"
    end
  end

  describe "replies to a process alias" do
    test "a GenServer reply prints as sent to the caller, not to a #Reference (issue 23 item 4)" do
      {:ok, io} = StringIO.open("")
      {:ok, agent} = Agent.start_link(fn -> 7 end)
      trace = Trace.messages([agent], print: [device: io, colors: false, time: false])
      assert Agent.get(agent, & &1) == 7
      assert Agent.get(agent, &(&1 + 1)) == 8
      ref = :erlang.trace_delivered(agent)
      assert_receive {:trace_delivered, ^agent, ^ref}
      Trace.flush(trace)
      output = await_sends(io, 2)
      :ok = Trace.stop(trace)

      sends = for line <- String.split(output, "\n"), line =~ " send ", do: line
      assert length(sends) == 2, output
      for line <- sends, do: assert(String.ends_with?(line, " to " <> inspect(self())), output)
      refute output =~ " to #Reference"
    end
  end

  defp await_sends(io, n) do
    wait_until(
      fn ->
        output = contents(io)
        length(for line <- String.split(output, "\n"), line =~ " send ", do: line) >= n && output
      end,
      500,
      fn -> "the printer printed fewer than #{n} sends:\n#{contents(io)}" end
    )
  end

  defp await_output(io, text) do
    wait_until(
      fn -> (output = contents(io)) =~ text && output end,
      500,
      fn -> "the printer did not print #{inspect(text)}; it printed:\n#{contents(io)}" end
    )
  end

  defp contents(io), do: io |> StringIO.contents() |> elem(1)
end
