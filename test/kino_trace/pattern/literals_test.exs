defmodule PatternLiteralsTarget do
  @moduledoc false
  # What the test traces (kino_trace refuses to trace its own modules).
  def f(binary), do: byte_size(binary)
end

defmodule KinoTrace.Pattern.LiteralsTest do
  # Literal binaries in pattern text are built from their segments, never evaluated, and
  # what the literals of a pattern build is bounded by the trace's :max_bytes before
  # anything is built. Before, `Enum.map(<<0::size(1_000_000_000_000)>>, _)` (43
  # characters; "45" in issue 27) aborted the VM (binary_alloc: Cannot allocate 125000000000 bytes) from
  # every place pattern text comes in: Kino.Trace.calls/2, the widget's set_patterns
  # event and the smart cell's check on each keystroke; 8e9 bits kept 1 GB alive in the
  # pattern.
  use ExUnit.Case, async: false

  alias KinoTrace.Pattern
  alias KinoTrace.Plan.MessagePattern
  alias KinoTrace.SmartCell.{Controller, Form}
  alias KinoTrace.Widget.Controller, as: WidgetController

  @moduletag timeout: 60_000

  @huge "Enum.map(<<0::size(1_000_000_000_000)>>, _)"
  @gigabyte "Enum.map(<<0::size(8_000_000_000)>>, _)"
  @bound ":max_bytes (16384 bytes)"

  # Other tests may run beside this one: the bound is far below the 1 GB of 8e9 bits.
  @slack 200_000_000

  # `fun`'s result, and how much the VM's binary memory grew while it ran, its result
  # still alive.
  defp binary_growth(fun) do
    :erlang.garbage_collect()
    before = :erlang.memory(:binary)
    result = fun.()
    grown = :erlang.memory(:binary) - before
    {result, grown}
  end

  describe "Kino.Trace.calls/2" do
    test "a binary literal over max_bytes is an ArgumentError naming it; nothing is built" do
      for text <- [@huge, @gigabyte] do
        {error, grown} =
          binary_growth(fn -> assert_raise(ArgumentError, fn -> Kino.Trace.calls([text]) end) end)

        literal = text |> String.trim_leading("Enum.map(") |> String.trim_trailing(", _)")

        assert error.message =~
                 "invalid trace pattern #{inspect(text)}: the binary #{literal} is "

        assert error.message =~ @bound
        assert grown < @slack, "#{text}: #{grown} bytes"
      end
    end

    test "the option raises the bound, and the pattern then matches the built binary" do
      text = "PatternLiteralsTarget.f(<<7::size(200_000)-little>>)"

      assert_raise ArgumentError, ~r/is 25000 bytes: more than the trace's :max_bytes/, fn ->
        Kino.Trace.calls([text])
      end

      trace = Kino.Trace.calls([text], max_bytes: 25_000)

      try do
        binary = <<7::size(200_000)-little>>

        Task.async(fn -> PatternLiteralsTarget.f(binary) && PatternLiteralsTarget.f(<<0>>) end)
        |> Task.await()

        Kino.Trace.flush(trace, 5_000)
        assert [%{args: [_]}] = Kino.Trace.events(trace) |> Enum.filter(&(&1.kind == :call))
      after
        Kino.Trace.stop(trace)
      end
    end

    test "the bound is on all the pattern's literals, shifts of literal amounts included" do
      two = "Enum.map({<<0::size(100_000)>>, <<0::size(100_000)>>}, _)"
      assert Kino.Trace.calls([two], max_bytes: 25_000) |> Kino.Trace.stop() == :ok

      assert_raise ArgumentError,
                   ~r/is 12500 bytes, 25000 bytes with the pattern's other literals: more than the trace's :max_bytes \(20000 bytes\)/,
                   fn ->
                     Kino.Trace.calls([two], max_bytes: 20_000)
                   end

      for guard <- [
            "x == 1 <<< 1_000_000_000",
            "x > Bitwise.bsl(1, 10_000_000)",
            "x > :erlang.bsr(x, -200_000)"
          ] do
        error =
          assert_raise ArgumentError, fn -> Kino.Trace.calls(["Enum.map(x, _) when #{guard}"]) end

        assert error.message =~ "the shift "
        assert error.message =~ @bound
      end

      # a shift by a small amount, or to the right, is no literal that grows
      trace = Kino.Trace.calls(["Enum.map(x, _) when x == 1 <<< 62 or x > x >>> 1_000_000"])
      Kino.Trace.stop(trace)
    end

    test "message patterns are bounded alike" do
      error =
        assert_raise ArgumentError, fn ->
          Kino.Trace.messages(:all, pattern: "{:data, <<0::size(1_000_000_000_000)>>}")
        end

      assert error.message =~ "invalid message pattern"
      assert error.message =~ @bound

      {result, grown} =
        binary_growth(fn -> MessagePattern.compile("<<0::size(8_000_000_000)>>", false) end)

      assert {:error, message} = result
      assert message =~ @bound
      assert grown < @slack
    end
  end

  test "the widget's set_patterns event reports the pattern; the trace keeps its patterns" do
    trace = Kino.Trace.calls(["Enum.map/2"])

    try do
      {controller, _} = WidgetController.init(trace)

      for text <- [@huge, @gigabyte] do
        {{[{:broadcast, "patterns", payload}], _}, grown} =
          binary_growth(fn ->
            WidgetController.handle_event(controller, "set_patterns", %{"patterns" => [text]})
          end)

        assert [%{input: ^text, ok: false, error: error}] = payload.results
        assert error =~ @bound
        assert grown < @slack
      end
    after
      Kino.Trace.stop(trace)
    end
  end

  test "the smart cell's check, on each keystroke in the patterns and match fields" do
    controller = Controller.init(nil)

    for text <- [@huge, @gigabyte] do
      {{[_update, {:broadcast, "check", check}], _}, grown} =
        binary_growth(fn ->
          Controller.handle_event(controller, "update", %{"field" => "patterns", "value" => text})
        end)

      assert [%{ok: false, error: error}] = check.patterns.results
      assert error =~ @bound
      assert grown < @slack

      match = String.trim_leading(text, "Enum.map(") |> String.trim_trailing(", _)")

      {check, grown} =
        binary_growth(fn ->
          Controller.check(Form.new(%{"mode" => "messages", "match" => match}))
        end)

      assert check.match =~ @bound
      assert grown < @slack
    end
  end

  describe "binaries are built from their segments" do
    test "as Elixir builds them" do
      for literal <- [
            ~S|<<1, 2>>|,
            ~S|<<"abc", 0>>|,
            ~S|<<1::16>>|,
            ~S|<<-1::size(12), 5::4>>|,
            ~S|<<"é"::utf8, "é"::utf16, 233::utf32-little>>|,
            ~S|<<1.5::float-32, 2::float-little>>|,
            ~S|<<"abcd"::binary, "xy"::bits-little>>|,
            ~S|<<1::size(3)-unit(8)-native>>|,
            ~S|<<258::8*2>>|
          ] do
        {expected, _} = Code.eval_string(literal)

        assert {:ok, %Pattern{head: [^expected]}} = Pattern.parse("Enum.count(#{literal})"),
               literal
      end
    end

    test "what Elixir refuses, or a segment that is not literal, is an error naming it" do
      for {literal, reason} <- [
            {~S|<<"abc"::binary-size(2)>>|, "a literal string takes no size, unit or sign"},
            {~S|<<"abc"::integer>>|, "is not a valid integer segment value"},
            {~S|<<1::size(-1)>>|, "a binary with variables is not supported"},
            {~S|<<1.5::float-size(8)>>|, "a float is 16, 32 or 64 bits"},
            {~S|<<1::utf8-size(8)>>|, "take no size, unit or sign"},
            {~S|<<0xD800::utf8>>|, "is not a Unicode code point"},
            {~S|<<1::unit(300)>>|, "must be from 1 to 256"},
            {~S|<<1::binary>>|, "is not a valid binary segment value"},
            {~S|<<1::size(n)>>|, "a binary with variables is not supported"},
            {~S|<<x>>|, "a binary with variables is not supported"},
            {~S|<<1::wat>>|, "unknown modifier wat"}
          ] do
        assert {:error, message} = Pattern.parse("Enum.count(#{literal})")
        assert message =~ reason, "#{literal}: #{message}"
      end
    end
  end
end
