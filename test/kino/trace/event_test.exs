defmodule Kino.Trace.EventTest do
  use ExUnit.Case, async: true

  alias Kino.Trace.{Cut, Event, Printer}

  doctest Kino.Trace.Event

  defp pid, do: :c.pid(0, 42, 0)

  defp call(fields \\ []) do
    struct!(
      %Event{
        id: 1,
        kind: :call,
        module: Enum,
        function: :sum,
        arity: 1,
        args: [[1, 2]],
        pid: pid(),
        time: 1
      },
      fields
    )
  end

  describe "inspect/2" do
    test "reads like the printer's line, with no time and no indentation" do
      event = call(depth: 3, time: System.os_time(:microsecond))
      assert inspect(event) == "#Kino.Trace.Event<call Enum.sum([1, 2]) #PID<0.42.0>>"

      line = event |> Printer.format(time: false) |> IO.iodata_to_binary()
      assert line == "#PID<0.42.0>       Enum.sum([1, 2])"
    end

    test "the caller, the node of a remote event and cut terms as the printer shows them" do
      event = call(caller: {MyApp, :run, 0}, node: :other@host, args: [[1, %Cut{kind: :items}]])

      assert inspect(event) ==
               "#Kino.Trace.Event<call Enum.sum([1, ...])  (from MyApp.run/0) other@host #PID<0.42.0>>"
    end

    test "every kind the tracer makes inspects without falling back to the fields" do
      peer = :c.pid(0, 43, 0)

      links =
        for kind <- [:link, :unlink, :getting_linked, :getting_unlinked],
            do: %Event{kind: kind, peer: peer}

      names = for kind <- [:register, :unregister], do: %Event{kind: kind, data: :name}

      events =
        [
          call(),
          %Event{kind: :return, module: Enum, function: :sum, arity: 1, return: 3},
          %Event{kind: :exception, module: M, function: :f, arity: 0, exception: {:throw, :ball}},
          %Event{kind: :return_to, module: M, function: :f, arity: 0},
          %Event{kind: :send, data: :hi, peer: peer},
          %Event{kind: :send_to_non_existing, data: :hi, peer: peer},
          %Event{kind: :receive, data: :hi},
          %Event{kind: :timeout},
          %Event{kind: :spawn, peer: peer, data: {M, :f, []}},
          %Event{kind: :spawned, peer: peer, data: {M, :f, []}},
          %Event{kind: :exit, data: :normal}
          | links ++ names
        ]
        |> Enum.map(&%{&1 | pid: pid()})

      for event <- events do
        text = inspect(event)
        assert text =~ ~r/^#Kino\.Trace\.Event<.+ #PID<0\.42\.0>>$/, text
        refute text =~ "kind:", text
      end

      assert Enum.sort(Enum.map(events, & &1.kind)) == Enum.sort(Event.kinds())

      # kinds/0 is t:kind/0
      {:ok, types} = Code.Typespec.fetch_types(Event)

      [{:type, {:kind, {:type, _, :union, members}, []}}] =
        Enum.filter(types, &match?({:type, {:kind, _, _}}, &1))

      assert Enum.sort(Event.kinds()) == Enum.sort(for {:atom, _, kind} <- members, do: kind)
    end

    test "what no tracer makes (no kind, arguments that are not a list) shows its fields" do
      for event <- [%Event{}, call(args: :oops)] do
        text = inspect(event)
        assert text =~ "%Kino.Trace.Event{", text
        assert text =~ "kind: ", text
      end
    end

    test "structs: false shows every field" do
      text = inspect(call(), structs: false)
      assert text =~ "__struct__: Kino.Trace.Event"
      assert text =~ "time: 1"
    end
  end

  describe "ExUnit's diff of two events" do
    # What `assert left == right` shows under "left:" and "right:", with [-deleted-] and
    # {+inserted+} parts marked instead of coloured.
    defp diff(left, right) do
      error =
        try do
          assert left == right
        rescue
          e in ExUnit.AssertionError -> e
        else
          _ -> flunk("the events are equal")
        end

      formatter = fn
        :diff_enabled?, _ ->
          true

        kind, doc when kind in [:diff_delete, :diff_delete_whitespace] ->
          Inspect.Algebra.concat(["[-", doc, "-]"])

        kind, doc when kind in [:diff_insert, :diff_insert_whitespace] ->
          Inspect.Algebra.concat(["{+", doc, "+}"])

        _, text ->
          text
      end

      error
      |> ExUnit.Formatter.format_assertion_diff(0, :infinity, formatter)
      |> Map.new(fn {k, v} -> {k, IO.iodata_to_binary(v)} end)
    end

    test "events that inspect differently: their lines are diffed" do
      diff = diff(call(args: [[1, 2]]), call(args: [[1, 3]]))
      assert diff.left == "#Kino.Trace.Event<call Enum.sum([1, [-2-]]) #PID<0.42.0>>"
      assert diff.right == "#Kino.Trace.Event<call Enum.sum([1, {+3+}]) #PID<0.42.0>>"
    end

    test "events that inspect alike but differ in a field not shown: the fields are diffed" do
      diff = diff(call(time: 1), call(time: 2))
      assert diff.left =~ "time: [-1-]"
      assert diff.right =~ "time: {+2+}"
    end
  end
end
