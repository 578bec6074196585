defmodule KinoTrace.Plan.OptionsTest do
  # async: false: these tests check that a bad call leaves the VM's trace sessions and
  # kino_trace's session supervisor exactly as they were, which other concurrent traces
  # would disturb.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO
  import KinoTraceTest.Helpers, only: [kino_sessions: 0, wait_until: 1]

  alias Kino.Trace
  alias KinoTrace.Plan.Options
  alias KinoTraceTest.Sample.Math

  @math "KinoTraceTest.Sample.Math"

  doctest KinoTrace.Plan.Options

  # Sessions of earlier test modules end when their owners exit, a moment later: start
  # from a quiet VM so the before/after comparisons below see only this test.
  setup do
    wait_until(fn ->
      kino_sessions() == [] and
        DynamicSupervisor.count_children(KinoTrace.SessionSupervisor).active == 0
    end)

    :ok
  end

  # Asserts that `fun` raises an ArgumentError with exactly `message` (a string) or a
  # message matching it (a regex), and that nothing was traced or started meanwhile.
  defp assert_rejected(message, fun) do
    sessions = :trace.session_info(:all)
    children = DynamicSupervisor.count_children(KinoTrace.SessionSupervisor)

    error = assert_raise ArgumentError, fun

    case message do
      %Regex{} -> assert error.message =~ message
      text -> assert error.message == text
    end

    KinoTrace.Backend.Reaper.sync()
    assert :trace.session_info(:all) == sessions
    assert DynamicSupervisor.count_children(KinoTrace.SessionSupervisor) == children
    error.message
  end

  defp calls(opts), do: Trace.calls([&Math.echo/1], opts)

  describe "unknown options" do
    test "suggest the closest known option" do
      message =
        assert_rejected(
          ~r/^unknown option :limt \(did you mean :limit\?\)\. Known options: :pids, :children/,
          fn ->
            calls(limt: 5)
          end
        )

      assert message =~ ":history"

      assert_rejected(~r/^unknown option :childern \(did you mean :children\?\)/, fn ->
        calls(childern: true)
      end)

      assert_rejected(~r/^unknown option :max_item \(did you mean :max_items\?\)/, fn ->
        calls(max_item: 3)
      end)
    end

    test "without a close name, list the known ones only" do
      message =
        assert_rejected(~r/^unknown option :zzz\. Known options: /, fn -> calls(zzz: 1) end)

      refute message =~ "did you mean"
    end

    test "options must be a keyword list" do
      assert_rejected("expected options to be a keyword list, got: [1, 2]", fn ->
        calls([1, 2])
      end)

      assert_rejected("expected options to be a keyword list, got: %{limit: 1}", fn ->
        calls(%{limit: 1})
      end)
    end
  end

  describe "wrong types" do
    test "boolean options" do
      for key <- [:children, :return, :exceptions, :return_to, :local, :force] do
        assert_rejected("invalid value for #{inspect(key)}: expected a boolean, got: 1", fn ->
          calls([{key, 1}])
        end)

        assert_rejected("invalid value for #{inspect(key)}: expected a boolean, got: nil", fn ->
          calls([{key, nil}])
        end)
      end
    end

    test ":caller takes true, false or :line" do
      for bad <- [1, nil, :lines, "line"] do
        assert_rejected(
          "invalid value for :caller: expected true, false or :line, got: #{inspect(bad)}",
          fn ->
            calls(caller: bad)
          end
        )
      end

      assert Options.validate!(caller: :line)[:caller] == :line
    end

    test ":return_to needs local calls traced" do
      assert_rejected(
        "invalid value for :return_to: returns are traced only with local: true " <>
          "(the VM reports them only for functions traced on local calls)",
        fn -> calls(return_to: true, local: false) end
      )

      assert Options.validate!(return_to: true)[:return_to] == true
    end

    test ":limit and :timeout take positive integers" do
      for key <- [:limit, :timeout], bad <- [0, -1, 1.5, "5", :infinity] do
        assert_rejected(
          "invalid value for #{inspect(key)}: expected a positive integer, got: #{inspect(bad)}",
          fn ->
            calls([{key, bad}])
          end
        )
      end
    end

    test "term caps and :history take positive integers" do
      for key <- [:max_depth, :max_items, :max_binary, :max_bytes, :history],
          bad <- [0, -3, 2.0, nil] do
        assert_rejected(
          "invalid value for #{inspect(key)}: expected a positive integer, got: #{inspect(bad)}",
          fn ->
            calls([{key, bad}])
          end
        )
      end
    end

    test "term caps and :history fit 32 bits, and say so" do
      for key <- [:max_items, :history], bad <- [0x1_0000_0000, 2 ** 64] do
        assert_rejected(
          "invalid value for #{inspect(key)}: expected at most 4294967295, got: #{inspect(bad)}",
          fn ->
            calls([{key, bad}])
          end
        )
      end

      assert Options.validate!(max_items: 0xFFFF_FFFF, history: 0xFFFF_FFFF)[:max_items] ==
               0xFFFF_FFFF
    end

    test ":max_binary and :max_bytes are at most 1 GiB (an event's payload stays below 4 GiB), and say so" do
      for key <- [:max_binary, :max_bytes], bad <- [2 ** 30 + 1, 0x1_0000_0000, 2 ** 64] do
        assert_rejected(
          "invalid value for #{inspect(key)}: expected at most 1073741824, got: #{inspect(bad)}",
          fn ->
            calls([{key, bad}])
          end
        )
      end

      assert Options.validate!(max_binary: 2 ** 30, max_bytes: 2 ** 30)[:max_bytes] == 2 ** 30
    end

    test "too large a :limit names :limit and its range, not the tracer's own name" do
      for bad <- [2 ** 64, 2 ** 100] do
        assert_rejected(
          "invalid value for :limit: expected at most 18446744073709551615, got: #{inspect(bad)}",
          fn ->
            calls(limit: bad)
          end
        )
      end

      assert Options.validate!(limit: 2 ** 64 - 1)[:limit] == 2 ** 64 - 1
    end

    test "too large a :queue cap names :queue and the cap" do
      assert_rejected(
        "invalid value for :queue: expected :events of at most 18446744073709551615, got: [events: 18446744073709551616]",
        fn ->
          calls(queue: [events: 2 ** 64])
        end
      )

      assert_rejected(
        "invalid value for :queue: expected :bytes of at most 18446744073709551615, got: [events: 5, bytes: 18446744073709551616]",
        fn ->
          calls(queue: [events: 5, bytes: 2 ** 64])
        end
      )
    end

    test "too large a :timeout says its range" do
      assert_rejected(
        "invalid value for :timeout: expected at most 4294967295 (ms), got: 4294967296",
        fn ->
          calls(timeout: 0x1_0000_0000)
        end
      )
    end

    test ":max_depth is at most 100 (the tracer's term walk recurses once per level)" do
      for bad <- [101, 0x1_0000_0000] do
        assert_rejected(
          "invalid value for :max_depth: expected at most 100, got: #{inspect(bad)}",
          fn ->
            calls(max_depth: bad)
          end
        )
      end
    end

    test ":rate is bounded" do
      assert_rejected(
        "invalid value for :rate: expected a count of at most 1000000000, got: {1000000001, 1}",
        fn ->
          calls(rate: {1_000_000_001, 1})
        end
      )

      assert_rejected(
        "invalid value for :rate: expected a period of at most 86400000 ms, got: {1, 86400001}",
        fn ->
          calls(rate: {1, 86_400_001})
        end
      )

      assert_rejected(
        "invalid value for :rate: expected a count of at most 1000000000, got: {18446744073709551616, 1}",
        fn ->
          calls(rate: {2 ** 64, 1})
        end
      )
    end

    test ":rate takes {count, milliseconds}" do
      for bad <- [{0, 100}, {5, 0}, {5, 1.0}, 5, {1, 2, 3}, [5, 100]] do
        assert_rejected(
          "invalid value for :rate: expected {count, milliseconds} with positive integers, got: #{inspect(bad)}",
          fn -> calls(rate: bad) end
        )
      end
    end

    test ":queue takes events and bytes caps" do
      for bad <- [[events: 0], [size: 10], :big, [bytes: -1], [events: 1.5]] do
        assert_rejected(
          "invalid value for :queue: expected a keyword list with :events and/or :bytes as positive integers, got: #{inspect(bad)}",
          fn -> calls(queue: bad) end
        )
      end
    end

    test ":print takes a boolean or printer options" do
      assert_rejected(
        "invalid value for :print: expected a boolean or printer options (colors: boolean, time: boolean), got: \"yes\"",
        fn -> calls(print: "yes") end
      )
    end

    # Issue 36 (minor): printer options were taken unchecked; an unknown one is named.
    test ":print's printer options are checked as options are, under :print" do
      assert_rejected(
        "invalid value for :print: unknown option :events. Known options: :colors, :time, :device, :inspect",
        fn -> calls(print: [events: -1]) end
      )

      assert_rejected(
        "invalid value for :print: invalid value for :colors: expected a boolean, got: 1",
        fn -> calls(print: [colors: 1]) end
      )

      {:ok, io} = StringIO.open("")
      trace = calls(print: [colors: false, time: false, device: io, inspect: [limit: 5]])

      assert_raise ArgumentError, ~r/^unknown option :events\. Known options: :colors/, fn ->
        Trace.print(trace, events: 1)
      end

      Trace.stop(trace)
    end

    # Issue 36 (minor): a message pattern on a trace of calls was taken and did nothing.
    test ":pattern and timeouts: true need a trace of messages" do
      assert_rejected(
        "invalid value for :pattern: a message pattern filters traced messages, and this trace traces none " <>
          "(trace them with Kino.Trace.messages/2, Kino.Trace.trace/2's :messages, or messages: true in a capture)",
        fn -> calls(pattern: "{:ok, _}") end
      )

      assert_rejected(~r/^invalid value for :timeouts: /, fn -> calls(timeouts: true) end)

      assert_rejected(~r/^invalid value for :pattern: /, fn ->
        Trace.capture([@math <> ".add/2"], fn -> :ok end, pattern: "_")
      end)

      trace =
        Trace.trace([calls: [@math <> ".add/2"], messages: self()],
          pattern: "{:ok, _}",
          timeouts: true
        )

      Trace.stop(trace)
    end

    test ":pids takes :all, :new, :existing, a pid, a name or a list" do
      expected =
        ":all, :new, :existing, a pid, a name (registered, {:global, name} or {:via, module, name}), " <>
          "or a list of pids and names"

      assert_rejected("invalid value for :pids: expected #{expected}, got: \"self\"", fn ->
        calls(pids: "self")
      end)

      assert_rejected("invalid value for :pids: expected #{expected}, got: []", fn ->
        calls(pids: [])
      end)

      assert_rejected("invalid value for :pids: expected #{expected}, got: {1, 2}", fn ->
        calls(pids: [self(), {1, 2}])
      end)

      assert_rejected(
        "invalid value for :pids: no process is registered as :kino_trace_no_such_name",
        fn ->
          calls(pids: :kino_trace_no_such_name)
        end
      )

      assert_rejected(
        "invalid value for :pids: no process is registered as :kino_trace_no_such_name",
        fn ->
          calls(pids: [self(), :kino_trace_no_such_name])
        end
      )

      assert_rejected("invalid value for :pids: :all cannot be part of a list", fn ->
        calls(pids: [self(), :all])
      end)
    end

    test ":pids names a {:global, name} or {:via, module, name} that names no process" do
      registry = :"#{__MODULE__}.Registry"
      start_supervised!({Registry, keys: :unique, name: registry})
      nobody = {:via, Registry, {registry, :nobody}}

      for {pids, name} <- [
            {{:global, :kino_trace_nobody}, {:global, :kino_trace_nobody}},
            {[self(), {:global, :kino_trace_nobody}], {:global, :kino_trace_nobody}},
            {nobody, nobody}
          ] do
        message = "invalid value for :pids: no process is registered as #{inspect(name)}"
        assert_rejected(message, fn -> calls(pids: pids) end)

        assert_rejected(message, fn ->
          Trace.capture([&Math.echo/1], fn -> :ok end, pids: pids)
        end)

        assert_rejected(message, fn -> Trace.stats([&Math.echo/1], pids: pids) end)
      end

      assert_rejected(
        "invalid messages target: no process is registered as #{inspect(nobody)}",
        fn ->
          Trace.messages(nobody)
        end
      )

      assert_rejected(
        "invalid processes target: no process is registered as {:global, :kino_trace_nobody}",
        fn ->
          Trace.processes([{:global, :kino_trace_nobody}])
        end
      )

      assert_rejected(
        "invalid value for :pids: cannot look up {:via, KinoTraceNoSuchRegistry, :x}: " <>
          "KinoTraceNoSuchRegistry.whereis_name/1 is not defined",
        fn -> calls(pids: {:via, KinoTraceNoSuchRegistry, :x}) end
      )
    end

    test "capture/3 validates its options the same way" do
      assert_rejected(~r/^unknown option :limt \(did you mean :limit\?\)/, fn ->
        Trace.capture([&Math.echo/1], fn -> Math.echo(1) end, limt: 1)
      end)

      assert_rejected("invalid value for :children: expected a boolean, got: :yes", fn ->
        Trace.capture([&Math.echo/1], fn -> Math.echo(1) end, children: :yes)
      end)
    end
  end

  describe "bad patterns" do
    test "a misspelled function suggests the close name" do
      assert_rejected(
        ~s(invalid trace pattern "Enum.mpa/2": Enum.mpa/2 is not a function; did you mean Enum.map/2?),
        fn ->
          Trace.calls(["Enum.mpa/2"], pids: self())
        end
      )
    end

    test "an unknown module suggests the close name" do
      assert_rejected(
        ~s(invalid trace pattern "Enumm": unknown module Enumm; did you mean Enum?),
        fn ->
          Trace.calls(["Enumm"], pids: self())
        end
      )
    end

    test "a wrong arity lists the arities there are" do
      assert_rejected(
        ~s(invalid trace pattern "#{@math}.add/3": #{@math}.add/3 does not exist; #{@math}.add has arities 2),
        fn -> Trace.calls(["#{@math}.add/3"], pids: self()) end
      )

      assert_rejected(~r/^invalid trace pattern \{KinoTraceTest.Sample.Math, :add, 5\}: /, fn ->
        Trace.calls([{Math, :add, 5}], pids: self())
      end)
    end

    test "a syntax error in an argument pattern" do
      message =
        assert_rejected(~r/^invalid trace pattern "#{@math}.add\(x, \)": syntax error/, fn ->
          Trace.calls(["#{@math}.add(x, )"], pids: self())
        end)

      assert message =~ "syntax error"
    end

    test "unsupported argument patterns say why" do
      assert_rejected(
        "invalid trace pattern \"#{@math}.echo(^x)\": the pin operator is not supported in trace patterns: ^x (write the value itself)",
        fn -> Trace.calls(["#{@math}.echo(^x)"], pids: self()) end
      )
    end

    test "everything and kino_trace itself are refused unless forced" do
      assert_rejected(
        ~r/^invalid trace pattern :_: refusing to trace every function in the system/,
        fn ->
          Trace.calls([:_], pids: self())
        end
      )

      assert_rejected(
        ~r/^invalid trace pattern "\*": refusing to trace every function in the system/,
        fn ->
          Trace.calls(["*"], pids: self())
        end
      )

      assert_rejected(
        ~r/^invalid trace pattern KinoTrace.Session: refusing to trace KinoTrace.Session: tracing kino_trace's own modules/,
        fn ->
          Trace.calls([KinoTrace.Session], pids: self())
        end
      )
    end

    test "something that is not a pattern" do
      assert_rejected(
        ~r/^invalid trace pattern 42: expected a string such as "Enum.map\/2", a module/,
        fn ->
          Trace.calls([42], pids: self())
        end
      )

      assert_rejected(~r/anonymous functions cannot be traced/, fn ->
        Trace.calls([fn -> :ok end], pids: self())
      end)

      assert_rejected("no trace patterns given", fn -> Trace.calls([], pids: self()) end)
    end

    test "an improper list of patterns" do
      assert_rejected(
        ~S(expected a list of trace patterns, got an improper list: ["Enum" | :x]),
        fn ->
          Trace.calls(["Enum" | :x], pids: self())
        end
      )

      assert_rejected(
        ~S(expected a list of trace patterns, got an improper list: ["Enum" | :x]),
        fn ->
          Kino.Trace.stats(["Enum" | :x], pids: self())
        end
      )
    end

    test "set_patterns reports an improper list, and the trace keeps running" do
      trace = Trace.calls([&Math.echo/1], pids: self())

      assert [{["Enum" | :x], {:error, message}}] = Trace.set_patterns(trace, ["Enum" | :x])

      assert message ==
               ~S(expected a proper list of patterns, got an improper list: ["Enum" | :x])

      assert Trace.info(trace).status == :running
      assert Trace.stop(trace) == :ok
    end

    test "every bad entry is named, good ones are not" do
      message =
        assert_rejected(~r/invalid trace pattern "Enum.mpa\/2"/, fn ->
          Trace.calls(["Enum.mpa/2", "#{@math}.add/2", "Nope.Missing", &Math.echo/1],
            pids: self()
          )
        end)

      assert message =~ ~s(invalid trace pattern "Nope.Missing": unknown module Nope.Missing)
      refute message =~ "#{@math}.add/2"
      assert length(String.split(message, "\n")) == 2
    end

    test "options are checked before patterns, patterns before anything is started" do
      assert_rejected(~r/^unknown option :limt/, fn -> Trace.calls(["Enumm"], limt: 1) end)
    end

    test "an inlined function gives a warning naming what to trace instead, then traces" do
      stderr =
        capture_io(:stderr, fn ->
          trace = Trace.calls(["Kernel.+/2"], pids: self())
          assert Trace.info(trace).status == :running
          Trace.stop(trace)
        end)

      assert stderr =~
               "Kernel.+/2 is inlined by the compiler (calls never reach it); trace :erlang.+/2 instead"
    end
  end

  describe "Options.validate!/1" do
    test "fills in the defaults" do
      opts = Options.validate!([])
      assert opts[:pids] == :all
      assert opts[:children] == false
      assert opts[:return] == true
      assert opts[:exceptions] == true
      assert opts[:caller] == false
      assert opts[:return_to] == false
      assert opts[:local] == true
      assert opts[:history] == 10_000
      assert opts[:queue] == [events: 100_000, bytes: 64 * 1024 * 1024]
    end

    test "a partial :queue keeps the other default cap" do
      assert Options.validate!(queue: [events: 5])[:queue] == [bytes: 64 * 1024 * 1024, events: 5]
    end

    test "native limits" do
      limits =
        Options.native_limits(
          Options.validate!(limit: 7, rate: {3, 250}, max_items: 9, queue: [bytes: 1000])
        )

      assert limits.limit == 7
      assert limits.rate == {3, 250}
      assert limits.max_items == 9
      assert limits.queue[:bytes] == 1000
      assert Options.native_limits(Options.validate!([])).limit == nil
    end

    test "resolve_pids/1" do
      assert Options.resolve_pids(:new) == [:new]
      assert Options.resolve_pids(self()) == [self()]

      assert Options.resolve_pids([self(), KinoTrace.SessionSupervisor]) == [
               self(),
               Process.whereis(KinoTrace.SessionSupervisor)
             ]
    end

    # The smart cell resolves what a user typed: what is no target nor name is an
    # ArgumentError (was a KeyError once names were looked up all at once).
    test "resolve_pids/1 of what is neither a target nor a name" do
      for value <- [123, [self(), "worker"], {:via, "Registry", :x}] do
        assert_raise ArgumentError,
                     ~r/invalid value for :pids: expected :all, :new, :existing, a pid, a name/,
                     fn ->
                       Options.resolve_pids(value)
                     end
      end
    end
  end

  test "nothing is left behind by the rejected calls above" do
    assert kino_sessions() == []
  end
end
