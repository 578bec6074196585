defmodule Kino.Trace.CutStructTest do
  # Issue 23 item 5: a struct cut by the tracer (more fields than :max_items) is a map
  # that still has its :__struct__ key. Every view shows it as the struct with a cut
  # mark, whether or not its module exists here: the printer, the widget's rows and
  # details, Mermaid and the assertions' failure messages, all from real traces.
  use ExUnit.Case, async: true
  use Kino.Trace.Assertions

  alias Kino.Trace.{Cut, Printer}
  alias KinoTrace.Widget.Payload
  alias KinoTraceTest.CutStruct

  for {which, make, module} <- [
        {"a known module", :new, KinoTraceTest.CutStruct},
        {"a module this node does not have", :unknown, KinoTraceTest.NoSuchStruct}
      ] do
    describe "a cut struct of #{which}" do
      setup do
        struct = apply(CutStruct, unquote(make), [])
        refute Code.ensure_loaded?(KinoTraceTest.NoSuchStruct)

        capture =
          Kino.Trace.capture(["KinoTraceTest.CutStruct.take/1"], fn -> CutStruct.take(struct) end,
            max_items: 5
          )

        [call] = Enum.filter(capture.events, &(&1.kind == :call))
        # the tracer cut it: a map of 5 of its 13 keys, :__struct__ always among them
        assert [%Cut{kind: :map, size: 13, value: %{__struct__: unquote(module)} = kept}] =
                 call.args

        assert map_size(kept) == 5
        %{capture: capture, call: call, shown: CutStruct.shown(kept)}
      end

      test "the printer", %{call: call, shown: shown} do
        line = call |> Printer.format() |> IO.iodata_to_binary()
        assert line =~ "KinoTraceTest.CutStruct.take(#{shown})"
        refute line =~ "Inspect.Error"
        assert inspect(call) =~ shown
      end

      test "the widget's row and details", %{call: call, shown: shown} do
        row = Payload.event(call)
        assert row.call == "KinoTraceTest.CutStruct.take(#{shown})"
        assert row.truncated
        full = Payload.full(call)
        assert full.cut
        assert [arg] = full.args
        assert String.replace(arg, ~r/\s+/, " ") == shown
      end

      test "Mermaid", %{capture: capture, shown: shown} do
        source = Kino.Trace.to_mermaid(capture, args: true, max_label: 200)

        assert source =~
                 "P1->>P1: KinoTraceTest.CutStruct.take(#{Kino.Trace.Mermaid.escape(shown)})"

        refute source =~ "Inspect.Error"
      end

      test "the assertions' failure message", %{capture: capture, shown: shown} do
        error =
          assert_raise ExUnit.AssertionError, fn ->
            assert_called(capture, CutStruct.take(:other))
          end

        message = Exception.message(error)
        assert message =~ "KinoTraceTest.CutStruct.take(#{shown})"
        refute message =~ "Inspect.Error"
      end
    end
  end
end
