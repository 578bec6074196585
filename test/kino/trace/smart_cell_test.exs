defmodule Kino.Trace.SmartCellTest do
  # The "Trace" smart cell without Kino: its form, the code it writes (compiled and run:
  # real traces, compared with the plan the form describes) and its controller.
  use ExUnit.Case, async: false

  alias Kino.Trace.{Plan, SmartCell}
  alias KinoTrace.SmartCell.{Controller, Form, Source}

  doctest KinoTrace.SmartCell.Form
  doctest KinoTrace.SmartCell.Names
  doctest KinoTrace.SmartCell.Source
  doctest KinoTrace.SmartCell.Controller
  doctest KinoTrace.Widget.Controller, only: [check_pattern_edit: 1]

  @moduletag timeout: 60_000

  setup do
    # A registered process, a globally registered one, and a plain pid, to name.
    named = start_supervised!({Agent, fn -> :ok end}, id: :named)
    Process.register(named, :kino_trace_sc_named)
    global = start_supervised!({Agent, fn -> :ok end}, id: :global)
    :yes = :global.register_name(:kino_trace_sc_global, global)
    plain = start_supervised!({Agent, fn -> :ok end}, id: :plain)
    on_exit(fn -> :global.unregister_name(:kino_trace_sc_global) end)
    %{named: named, global: global, plain: plain}
  end

  # Evaluates the cell's code as Livebook would (a fresh binding), in a process that
  # stays alive while the trace is looked at, and returns its result.
  defp evaluate(source) do
    assert {:ok, _quoted} = Code.string_to_quoted(source)
    {result, _binding} = Code.eval_string(source)
    result
  end

  defp plan(%Kino.Trace{} = trace), do: KinoTrace.Client.internals(trace).plan

  defp pid_text(pid), do: inspect(pid)

  defp source(attrs), do: Source.to_source(attrs)

  describe "code for every mode and every option" do
    test "calls: each option, alone, is the only one written, and the trace runs as the form says",
         %{plain: plain} do
      patterns = "Enum.map/2\n# a comment\n\n:ets.insert/2"
      base = %{"mode" => "calls", "patterns" => patterns}
      what = [calls: ["Enum.map/2", ":ets.insert/2"]]

      cases = [
        {%{}, "Kino.Trace.calls([\"Enum.map/2\", \":ets.insert/2\"])", []},
        {%{"processes" => "new"}, "pids: :new", pids: :new},
        {%{"processes" => "existing"}, "pids: :existing", pids: :existing},
        {%{"processes" => "some", "targets" => "kino_trace_sc_named"},
         "pids: :kino_trace_sc_named", pids: :kino_trace_sc_named},
        {%{"processes" => "some", "targets" => pid_text(plain)}, "pids: :c.pid(", pids: plain},
        {%{
           "processes" => "some",
           "targets" => "{:global, :kino_trace_sc_global}, :kino_trace_sc_named"
         }, "pids: [{:global, :kino_trace_sc_global}, :kino_trace_sc_named]",
         pids: [{:global, :kino_trace_sc_global}, :kino_trace_sc_named]},
        {%{"return" => false}, "return: false", return: false},
        {%{"exceptions" => false}, "exceptions: false", exceptions: false},
        {%{"caller" => true}, "caller: true", caller: true},
        {%{"limit" => 1_000}, "limit: 1_000", limit: 1_000},
        {%{"rate_count" => 100}, "rate: {100, 1_000}", rate: {100, 1_000}},
        {%{"rate_count" => 5, "rate_period" => 250}, "rate: {5, 250}", rate: {5, 250}},
        {%{"nodes" => "all"}, "nodes: :all", nodes: :all},
        {%{"nodes" => "some", "node_names" => Atom.to_string(node())}, "nodes: :", nodes: node()},
        {%{"timeout" => 60_000}, "timeout: 60_000", timeout: 60_000}
      ]

      for {fields, expected_text, opts} <- cases do
        code = source(Map.merge(base, fields))
        assert code =~ expected_text, "#{inspect(fields)}: #{code}"
        # nothing else than that option
        assert length(Regex.scan(~r/\w+: /, code)) == length(opts), code

        trace = evaluate(code)

        try do
          assert %Kino.Trace{} = trace
          assert plan(trace) == Plan.new!(what, opts), "#{inspect(fields)}: #{code}"
          assert Kino.Trace.info(trace).patterns == ["Enum.map/2", ":ets.insert/2"]
        after
          Kino.Trace.stop(trace)
        end
      end
    end

    test "calls: every option at once" do
      attrs = %{
        "patterns" => "Enum.map/2",
        "processes" => "some",
        "targets" => "kino_trace_sc_named",
        "return" => false,
        "exceptions" => false,
        "caller" => true,
        "limit" => 10,
        "rate_count" => 1,
        "rate_period" => 2,
        "nodes" => "all",
        "timeout" => 30_000
      }

      code = source(attrs)

      assert code == """
             Kino.Trace.calls(["Enum.map/2"],
               pids: :kino_trace_sc_named,
               return: false,
               exceptions: false,
               caller: true,
               limit: 10,
               rate: {1, 2},
               nodes: :all,
               timeout: 30_000
             )\
             """

      trace = evaluate(code)

      try do
        opts = [
          pids: :kino_trace_sc_named,
          return: false,
          exceptions: false,
          caller: true,
          limit: 10,
          rate: {1, 2},
          nodes: :all,
          timeout: 30_000
        ]

        assert plan(trace) == Plan.new!([calls: ["Enum.map/2"]], opts)
      after
        Kino.Trace.stop(trace)
      end
    end

    test "messages: targets as the first argument, the message pattern, limits", %{plain: plain} do
      cases = [
        {%{}, "Kino.Trace.messages(:all)", :all, []},
        {%{"processes" => "new"}, "Kino.Trace.messages(:new)", :new, []},
        {%{"processes" => "existing"}, "Kino.Trace.messages(:existing)", :existing, []},
        {%{"processes" => "distributed"}, "Kino.Trace.messages(:distributed)", :distributed, []},
        {%{"processes" => "some", "targets" => "kino_trace_sc_named, #{pid_text(plain)}"},
         "Kino.Trace.messages([:kino_trace_sc_named, :c.pid(", [:kino_trace_sc_named, plain], []},
        {%{"match" => " {:ok, _} "}, ~S|Kino.Trace.messages(:all, pattern: "{:ok, _}")|, :all,
         pattern: "{:ok, _}"},
        {%{"limit" => 5, "rate_count" => 2, "timeout" => 1_000, "nodes" => "all"},
         "Kino.Trace.messages(:all, limit: 5, rate: {2, 1_000}, nodes: :all, timeout: 1_000)",
         :all, limit: 5, rate: {2, 1_000}, nodes: :all, timeout: 1_000}
      ]

      for {fields, expected_text, targets, opts} <- cases do
        code = source(Map.merge(%{"mode" => "messages", "patterns" => "Ignored.in/1"}, fields))
        assert code =~ expected_text, code
        trace = evaluate(code)

        try do
          assert plan(trace) == Plan.new!([messages: targets], opts), code
        after
          Kino.Trace.stop(trace)
        end
      end
    end

    test "processes: targets and limits; calls-only fields are not written" do
      cases = [
        {%{}, "Kino.Trace.processes(:all)", :all, []},
        {%{"processes" => "new", "caller" => true, "return" => false, "match" => "{:ok, _}"},
         "Kino.Trace.processes(:new)", :new, []},
        {%{"processes" => "some", "targets" => "{:global, :kino_trace_sc_global}", "limit" => 3},
         "Kino.Trace.processes({:global, :kino_trace_sc_global}, limit: 3)",
         {:global, :kino_trace_sc_global}, limit: 3}
      ]

      for {fields, expected, targets, opts} <- cases do
        code = source(Map.merge(%{"mode" => "processes"}, fields))
        assert code == expected
        trace = evaluate(code)

        try do
          assert plan(trace) == Plan.new!([processes: targets], opts)
        after
          Kino.Trace.stop(trace)
        end
      end
    end

    test "stats: patterns, processes and nodes; the trace's limits are not written" do
      attrs = %{
        "mode" => "stats",
        "patterns" => "Enum.sum/1\n:lists.reverse/1",
        "limit" => 5,
        "timeout" => 10,
        "nodes" => "all",
        "caller" => true
      }

      for {fields, expected, opts} <- [
            {%{"nodes" => "local"}, ~S|Kino.Trace.stats(["Enum.sum/1", ":lists.reverse/1"])|, []},
            {%{}, ~S|Kino.Trace.stats(["Enum.sum/1", ":lists.reverse/1"], nodes: :all)|,
             nodes: :all},
            {%{"processes" => "some", "targets" => ":kino_trace_sc_named", "nodes" => "local"},
             ~S|Kino.Trace.stats(["Enum.sum/1", ":lists.reverse/1"], pids: :kino_trace_sc_named)|,
             pids: :kino_trace_sc_named}
          ] do
        code = source(Map.merge(attrs, fields))
        assert code == expected
        stats = evaluate(code)

        try do
          assert %Kino.Trace.Stats{} = stats
          info = Kino.Trace.Stats.info(stats)
          assert info.patterns == ["Enum.sum/1", ":lists.reverse/1"]
          assert info.opts == KinoTrace.Stats.Options.validate!(opts)
        after
          Kino.Trace.stop(stats)
        end
      end
    end

    test "record: a recorder of the patterns with its ring and triggers; it runs as the form says" do
      attrs = %{
        "mode" => "record",
        "patterns" => "KinoTraceTest.Sample.Math",
        "processes" => "some",
        "targets" => ":kino_trace_sc_named",
        "ring_events" => 5_000,
        "on_exception" => true,
        "slower_than" => 200,
        "on_match" => "KinoTraceTest.Sample.Math.double(n) when n > 1000",
        "after" => 10
      }

      code = source(attrs)

      assert code ==
               Enum.join(
                 [
                   ~S|Kino.Trace.record(["KinoTraceTest.Sample.Math"],|,
                   ~S|  events: 5_000,|,
                   ~S|  on: [|,
                   ~S|    exception: true,|,
                   ~S|    slower_than: 200,|,
                   ~S|    match: "KinoTraceTest.Sample.Math.double(n) when n > 1000"|,
                   ~S|  ],|,
                   ~S|  after: 10,|,
                   ~S|  pids: :kino_trace_sc_named|,
                   ~S|)|
                 ],
                 "\n"
               )

      rec = evaluate(code)

      try do
        r = Kino.Trace.info(rec).recorder
        assert {r.events, r.after} == {5_000, {:events, 10}}

        assert r.triggers == [
                 exception: true,
                 slower_than: 200,
                 match: "KinoTraceTest.Sample.Math.double(n) when n > 1000"
               ]

        assert plan(rec).options[:pids] == :kino_trace_sc_named
      after
        Kino.Trace.stop(rec)
      end

      # left as they are, the record fields add nothing; the calls' options are written
      assert source(%{"mode" => "record", "patterns" => "Enum.sum/1", "return" => false}) ==
               ~S|Kino.Trace.record(["Enum.sum/1"], return: false)|

      # and the calls mode writes none of them
      assert source(Map.put(attrs, "mode", "calls")) =~ ~r/^Kino.Trace.calls\(/
      refute source(Map.put(attrs, "mode", "calls")) =~ "on:"
    end

    test "patterns are strings, escaped; argument patterns and guards are kept as written" do
      lines = [~S|Map.get(_, "a\"b")|, "Enum.map(list, _) when length(list) > 100"]
      code = source(%{"patterns" => Enum.join(lines, "\n")})

      assert {{:., _, [{:__aliases__, _, [:Kino, :Trace]}, :calls]}, _, [^lines]} =
               Code.string_to_quoted!(code)

      trace = evaluate(code)

      try do
        assert Kino.Trace.info(trace).patterns == lines
      after
        Kino.Trace.stop(trace)
      end
    end

    test "a field that does not read becomes a raise saying why; no trace starts" do
      for {attrs, reason} <- [
            {%{"patterns" => "Enum", "processes" => "some", "targets" => "1 + 1"},
             "is not a process"},
            {%{"patterns" => "Enum", "processes" => "some", "targets" => " "},
             "name at least one process"},
            {%{"patterns" => "Enum", "nodes" => "some", "node_names" => "not a node"},
             "is not a node name"}
          ] do
        code = source(attrs)
        assert code =~ ~r/^raise ArgumentError,/
        assert_raise ArgumentError, ~r/#{reason}/, fn -> evaluate(code) end
      end

      # an empty form: the trace's own message
      assert source(%{}) == "Kino.Trace.calls([])"
      assert_raise ArgumentError, "no trace patterns given", fn -> evaluate(source(%{})) end
    end
  end

  # What the cell's code may be: a Kino.Trace call whose arguments are literals (a pid
  # as :c.pid/3 of integers), or a raise of a message. Anything else fails.
  defp only_literals!(source) do
    case Code.string_to_quoted!(source) do
      {{:., _, [{:__aliases__, _, [:Kino, :Trace]}, fun]}, _, args}
      when fun in [:calls, :messages, :processes, :stats] ->
        Enum.each(args, &literal!(&1, source))

      {:raise, _, [{:__aliases__, _, [:ArgumentError]}, message]} when is_binary(message) ->
        :ok

      other ->
        flunk("not a Kino.Trace call: #{inspect(other)} in #{source}")
    end
  end

  defp literal!(term, _source) when is_atom(term) or is_number(term) or is_binary(term), do: :ok
  defp literal!({:-, _, [number]}, _source) when is_number(number), do: :ok
  # a charlist, as Macro.to_string/1 writes one: no interpolation, no modifiers
  defp literal!({:sigil_c, _, [{:<<>>, _, [text]}, []]}, _source) when is_binary(text), do: :ok

  defp literal!({:__aliases__, _, parts}, source),
    do: Enum.each(parts, &(is_atom(&1) || flunk(source)))

  defp literal!({{:., _, [:c, :pid]}, _, parts}, source),
    do: Enum.each(parts, &(is_integer(&1) || flunk(source)))

  defp literal!({:{}, _, items}, source), do: Enum.each(items, &literal!(&1, source))
  defp literal!({a, b}, source), do: Enum.each([a, b], &literal!(&1, source))
  defp literal!(list, source) when is_list(list), do: Enum.each(list, &literal!(&1, source))
  defp literal!(other, source), do: flunk("not a literal: #{inspect(other)} in #{source}")

  describe "fields carry no code (issue 27)" do
    setup do
      path =
        Path.join(System.tmp_dir!(), "kino_trace_sc_attack_#{System.unique_integer([:positive])}")

      on_exit(fn -> File.rm(path) end)
      %{path: path, cmd: ~s|System.cmd("touch", [#{inspect(path)}])|}
    end

    test "a name that is code is refused: no code is written, evaluating it runs nothing", %{
      path: path,
      cmd: cmd
    } do
      attacks = [
        # the two of the review: an interpolated quoted atom, and a parse error that
        # mentions "atom" (a new atom in a tuple of three)
        ~s|:"\#{#{cmd}}"|,
        ~s|{:global, #{cmd}, :kino_trace_sc_new_atom_4f2}|,
        ~s|{:global, #{cmd}}|,
        ~s|{:via, :global, #{cmd}}|,
        ~s|{:via, #{cmd}, :name}|,
        ~s|{:global, [#{cmd}]}|,
        ~s|{:global, {:a, [1, #{cmd}]}}|,
        ~s|{:global, %{a: #{cmd}}}|,
        ~s|{:global, ~s(\#{#{cmd}})}|,
        ~s|~s(x)|,
        ~s|{:global, ~w(a b)a}|,
        ~s|&System.cmd/2|,
        ~s|{:global, &System.cmd/2}|,
        ~s|"x" \|> String.to_atom()|,
        ~s|{:global, "touch" \|> System.cmd([#{inspect(path)}])}|,
        ~s|unquote(#{cmd})|,
        ~s|{:global, unquote(#{cmd})}|,
        ~s|@attr|,
        ~s|{:global, @attr}|,
        ~s|__ENV__|,
        ~s|{:global, __ENV__}|,
        ~s|__MODULE__|,
        ~s|{:global, x}|,
        ~s|:c.pid(0, 1, #{cmd})|,
        ~s|pid("0.1.\#{#{cmd}}")|,
        ~s|#{cmd}|,
        ~s|fn -> #{cmd} end|,
        ~s|(#{cmd}; :name)|,
        ~s|{:global, (#{cmd}; :name)}|,
        ~s|{:global, -#{cmd}}|,
        ~s|{:global, <<#{cmd}>>}|
      ]

      for attack <- attacks, mode <- ["calls", "messages"] do
        # as typed, and as saved attrs read from a notebook someone else wrote
        attrs = %{
          "mode" => mode,
          "patterns" => "Enum.map/2",
          "processes" => "some",
          "targets" => attack
        }

        for source <- [
              Source.to_source(attrs),
              Controller.to_source(Controller.to_attrs(Controller.init(attrs)))
            ] do
          assert {:raise, _, [_, message]} = Code.string_to_quoted!(source),
                 "#{attack}: #{source}"

          assert message =~ "processes: "
          only_literals!(source)
          assert_raise ArgumentError, fn -> evaluate(source) end
        end

        assert is_binary(Controller.check(Form.new(attrs)).processes), attack
      end

      refute File.exists?(path)
    end

    test "node names that are code are refused alike", %{path: path, cmd: cmd} do
      for attack <- [~s|a@b, #{cmd}|, ~s|:"a@\#{#{cmd}}"|, ~s|a@b#{cmd}|] do
        source =
          Source.to_source(%{"patterns" => "Enum", "nodes" => "some", "node_names" => attack})

        assert source =~ ~r/^raise ArgumentError,\s+"nodes: /, source
        only_literals!(source)
        assert_raise ArgumentError, fn -> evaluate(source) end
      end

      refute File.exists?(path)
    end

    test "names that are literals are written as literals, whether their atoms exist or not", %{
      plain: plain
    } do
      targets =
        "MyApp.KinoTraceScNoSuch9a, Elixir.Enum, kino_trace_sc_named, :\"kino trace sc quoted 9a\", " <>
          "{:global, {:kino_trace_sc_none_9a, 1, \"x\", [-2.5, 'ab']}}, {:via, Registry, {KinoTraceScReg9a, :k}}, " <>
          inspect(plain)

      sources =
        for mode <- ["calls", "messages", "processes", "stats"] do
          Source.to_source(%{
            "mode" => mode,
            "patterns" => "Enum.map/2",
            "processes" => "some",
            "targets" => targets,
            "nodes" => "some",
            "node_names" => "kino_trace_sc_node_9a@host"
          })
        end

      # writing the code made none of the atoms that did not exist (reading it back, below,
      # does)
      for text <- [
            "kino_trace_sc_none_9a",
            "Elixir.KinoTraceScReg9a",
            "kino trace sc quoted 9a",
            "kino_trace_sc_node_9a@host"
          ],
          do: assert(KinoTrace.Base.Name.existing(text) == nil, text)

      for source <- sources do
        refute source =~ "raise", source
        only_literals!(source)

        # on one line or one name per line, as the formatter puts them
        flat =
          source
          |> String.replace(~r/\[\n\s*/, "[")
          |> String.replace(~r/,?\n\s*\]/, "]")
          |> String.replace(~r/\n\s*/, " ")

        assert flat =~
                 ~s|[MyApp.KinoTraceScNoSuch9a, Enum, :kino_trace_sc_named, :"kino trace sc quoted 9a", | <>
                   ~s|{:global, {:kino_trace_sc_none_9a, 1, "x", [-2.5, ~c"ab"]}}, | <>
                   ~s|{:via, Registry, {KinoTraceScReg9a, :k}}, :c.pid(|,
               source

        assert source =~ "nodes: :kino_trace_sc_node_9a@host"
      end
    end
  end

  describe "attrs" do
    test "to_attrs then init gives back the same form, also through JSON as Livebook saves it" do
      forms = [
        Form.defaults(),
        %{
          "mode" => "messages",
          "patterns" => "Enum.map/2\n# later\nMyApp.Repo",
          "processes" => "some",
          "targets" => "MyApp.Cache, #PID<0.1.0>",
          "return" => false,
          "exceptions" => false,
          "caller" => true,
          "match" => "{:ok, _}",
          "limit" => 1,
          "rate_count" => 2,
          "rate_period" => 3,
          "nodes" => "some",
          "node_names" => "a@b, c@d",
          "timeout" => 4,
          "ring_events" => 5,
          "on_exception" => true,
          "slower_than" => 6,
          "on_match" => "Enum.sum(_)",
          "after" => 7
        }
      ]

      for form <- forms do
        controller = Controller.init(form)
        attrs = Controller.to_attrs(controller)
        assert Controller.init(attrs) == controller
        json = attrs |> :json.encode() |> IO.iodata_to_binary() |> :json.decode()
        assert Controller.init(json) == controller
        assert Controller.connect(Controller.init(json)).form == form
      end
    end

    test "a form built field by field from the browser comes back the same" do
      updates = [
        {"mode", "stats"},
        {"patterns", "Enum.sum/1"},
        {"processes", "existing"},
        {"limit", "1_000"},
        {"rate_count", "10"},
        {"rate_period", "500"},
        {"timeout", ""},
        {"caller", true}
      ]

      controller =
        Enum.reduce(updates, Controller.init(nil), fn {field, value}, c ->
          {effects, c} =
            Controller.handle_event(c, "update", %{"field" => field, "value" => value})

          assert {:broadcast, "update", %{^field => _}} = hd(effects)
          c
        end)

      attrs = Controller.to_attrs(controller)
      assert attrs["limit"] == 1_000 and attrs["rate_period"] == 500 and attrs["timeout"] == nil
      assert Controller.init(attrs) == controller
    end

    test "saved attrs with unknown keys or bad values read as the defaults for those fields" do
      form =
        Form.new(%{
          "mode" => 3,
          "limit" => -1,
          "return" => "yes",
          "other" => 1,
          "patterns" => "Enum"
        })

      assert form == %{Form.defaults() | "patterns" => "Enum"}
      assert Form.new("not a map") == Form.defaults()
    end
  end

  describe "controller" do
    test "each pattern line is checked as the widget checks it: errors and warnings inline" do
      controller = Controller.init(nil)
      text = "Enum.map/2\nEnum.mpa/2\n\nKernel.+/2"

      {[update, {:broadcast, "check", check}], _} =
        Controller.handle_event(controller, "update", %{"field" => "patterns", "value" => text})

      assert update == {:broadcast, "update", %{"patterns" => text}}

      assert [
               %{input: "Enum.map/2", ok: true, warning: nil},
               %{input: "Enum.mpa/2", ok: false, error: error},
               %{input: "Kernel.+/2", ok: true, warning: warning}
             ] = check.patterns.results

      assert error =~ "Enum.map/2"
      assert warning =~ "inlined"
    end

    test "a recheck sees a module defined since (as after evaluating the cells above)" do
      controller = Controller.init(%{"patterns" => "KinoTraceScLater.go/0"})
      [{:broadcast, "check", before}] = Controller.recheck(controller)
      assert [%{ok: false}] = before.patterns.results

      Code.compile_string("defmodule KinoTraceScLater do def go, do: :ok end")

      try do
        assert [{:broadcast, "check", %{patterns: %{results: [%{ok: true}]}}}] =
                 Controller.recheck(controller)
      after
        :code.purge(KinoTraceScLater)
        :code.delete(KinoTraceScLater)
      end
    end

    # As documented (the smart cell's moduledoc, the README): the pre-flight check reads
    # a module from its loaded code, so checking a pattern loads a module of the code
    # path, running its on_load, as starting the trace would.
    test "checking a pattern loads a module of the code path, running its on_load" do
      dir =
        Path.join(
          System.tmp_dir!(),
          "kino_trace_sc_on_load_#{System.unique_integer([:positive])}"
        )

      File.mkdir_p!(dir)
      on_exit(fn -> File.rm_rf!(dir) end)
      Process.register(self(), :kino_trace_sc_on_load_listener)

      [{module, binary}] =
        Code.compile_string("""
        defmodule KinoTraceScOnLoad do
          @on_load :loaded
          def loaded do
            send(:kino_trace_sc_on_load_listener, {:loaded, __MODULE__})
            :ok
          end
          def go(x), do: x
        end
        """)

      assert_received {:loaded, KinoTraceScOnLoad}
      :code.purge(module)
      :code.delete(module)
      :code.purge(module)
      File.write!(Path.join(dir, "#{module}.beam"), binary)
      :code.add_patha(String.to_charlist(dir))

      try do
        assert :code.is_loaded(module) == false
        check = Controller.check(Form.new(%{"patterns" => "KinoTraceScOnLoad.go(:ok)"}))
        assert [%{ok: true}] = check.patterns.results
        assert_received {:loaded, KinoTraceScOnLoad}
        assert {:file, _} = :code.is_loaded(module)
      after
        :code.del_path(String.to_charlist(dir))
        :code.purge(module)
        :code.delete(module)
      end
    end

    test "stats refuse argument patterns, line by line" do
      controller = Controller.init(%{"mode" => "stats"})

      {[_, {:broadcast, "check", check}], _} =
        Controller.handle_event(controller, "update", %{
          "field" => "patterns",
          "value" => "Enum.sum/1\nEnum.map([], _)"
        })

      assert [%{ok: true}, %{ok: false, error: error}] = check.patterns.results
      assert error =~ "argument patterns and guards are not supported"

      # the same line is fine for calls
      {_, controller} =
        Controller.handle_event(controller, "update", %{
          "field" => "patterns",
          "value" => "Enum.map([], _)"
        })

      {[_, {:broadcast, "check", check}], _} =
        Controller.handle_event(controller, "update", %{"field" => "mode", "value" => "calls"})

      assert [%{ok: true}] = check.patterns.results
    end

    test "processes, nodes and the message pattern are checked", %{plain: plain} do
      check = fn attrs -> Controller.check(Form.new(attrs)) end

      assert check.(%{
               "processes" => "some",
               "targets" => "kino_trace_sc_named, #{inspect(plain)}"
             }).processes == nil

      assert check.(%{"processes" => "some", "targets" => ":kino_trace_sc_nobody"}).processes =~
               "no process is registered"

      assert check.(%{"processes" => "some", "targets" => "NoSuch.ModuleName9f"}).processes =~
               "no process is registered as NoSuch.ModuleName9f"

      assert check.(%{"processes" => "some", "targets" => "1 + 1"}).processes =~
               "is not a process"

      # on other nodes, names are those of each node: not looked up here
      assert check.(%{
               "processes" => "some",
               "targets" => ":kino_trace_sc_nobody",
               "nodes" => "all"
             }).processes == nil

      assert check.(%{"nodes" => "some", "node_names" => Atom.to_string(node())}).nodes == nil

      assert check.(%{"nodes" => "some", "node_names" => "nobody@nowhere"}).nodes =~
               "not connected"

      assert check.(%{"mode" => "messages", "match" => "{:ok, _}"}).match == nil

      assert check.(%{"mode" => "messages", "match" => "{:ok,"}).match =~
               "invalid message pattern"

      assert check.(%{"mode" => "calls", "match" => "{:ok,"}).match == nil

      # a recorder's match trigger, as record/2 checks it
      assert check.(%{"mode" => "record", "on_match" => "Enum.sum(list)"}).on_match == nil

      assert check.(%{"mode" => "record", "on_match" => "Enum.smu(list)"}).on_match =~
               "did you mean Enum.sum/1"

      assert check.(%{"mode" => "calls", "on_match" => "Enum.smu(list)"}).on_match == nil
      assert check.(%{"mode" => "messages"}).patterns == nil
    end

    test "typing process and node names creates no atom, nor does writing the code" do
      controller = Controller.init(%{"processes" => "some"})

      # as Kino does after each event: to_attrs, then to_source
      type = fn i ->
        value =
          ":kino_trace_sc_typed_#{i}, {:global, :kino_trace_sc_g#{i}}, Kino.Trace.Sc#{i}, sc_#{i}"

        {_, c} =
          Controller.handle_event(controller, "update", %{"field" => "targets", "value" => value})

        {_, c} = Controller.handle_event(c, "update", %{"field" => "nodes", "value" => "some"})

        {_, c} =
          Controller.handle_event(c, "update", %{
            "field" => "node_names",
            "value" => "sc_#{i}@host#{i}"
          })

        assert Controller.to_source(Controller.to_attrs(c)) =~
                 ":kino_trace_sc_typed_#{i}, {:global, :kino_trace_sc_g#{i}}"
      end

      # once first, so the modules it uses are loaded (loading one adds its atoms)
      type.(0)
      before = :erlang.system_info(:atom_count)
      Enum.each(1..200, type)
      assert :erlang.system_info(:atom_count) - before < 20
    end

    test "completion of the line being typed, as in the widget" do
      controller = Controller.init(nil)

      assert {[{:reply, "completions", %{seq: 3, prefix: "insert_n", items: items}}], ^controller} =
               Controller.handle_event(controller, "complete", %{
                 "text" => ":ets.insert_n",
                 "seq" => 3
               })

      assert Enum.map(items, & &1.insert) == ["insert_new/2"]
    end

    test "a bad value is refused and answered to its sender; the form keeps its value" do
      controller = Controller.init(%{"limit" => 5})

      for {field, value} <- [
            {"limit", "-3"},
            {"limit", "ten"},
            {"mode", "all"},
            {"caller", "yes"},
            {"nope", 1}
          ] do
        assert {[{:reply, "error", %{field: ^field, message: message}}], ^controller} =
                 Controller.handle_event(controller, "update", %{
                   "field" => field,
                   "value" => value
                 })

        assert message =~ field
      end
    end

    test "a patterns text over the widget's bounds is refused as a whole" do
      controller = Controller.init(nil)
      text = Enum.map_join(1..501, "\n", fn i -> "Enum.map/#{rem(i, 3)}" end)

      assert {[{:reply, "error", %{field: "patterns", message: message}}], ^controller} =
               Controller.handle_event(controller, "update", %{
                 "field" => "patterns",
                 "value" => text
               })

      assert message =~ "at most 500"
    end
  end

  test "the cell's own process is never traced: a trace of Enum does not show the form's checks" do
    trace = Kino.Trace.calls(["Enum.map/2"])

    try do
      cell =
        Task.async(fn ->
          c = Controller.init(%{"patterns" => "Enum.map/2"})

          {_, c} =
            Controller.handle_event(c, "update", %{
              "field" => "patterns",
              "value" => "Enum.map/2\n:ets"
            })

          Controller.to_source(Controller.to_attrs(c))
          self()
        end)
        |> Task.await()

      # the same work in a plain process is traced
      plain =
        Task.async(fn ->
          KinoTrace.SmartCell.Source.to_source(%{"patterns" => "Enum.map/2"})
          self()
        end)
        |> Task.await()

      pids = fn -> trace |> Kino.Trace.events(10_000) |> Enum.map(& &1.pid) |> MapSet.new() end
      KinoTraceTest.Helpers.wait_until(fn -> plain in pids.() end)
      refute cell in pids.()
    after
      Kino.Trace.stop(trace)
    end
  end

  test "the notebook's smart cell: its saved form writes the code saved with it" do
    notebook = File.read!(Path.expand("../../../guides/getting_started.livemd", __DIR__))

    cells =
      Regex.scan(
        ~r/<!-- livebook:(\{[^\n]*"livebook_object":"smart_cell"\}) -->\n\n```elixir\n(.*?)\n```/s,
        notebook,
        capture: :all_but_first
      )

    assert [_ | _] = cells

    for [meta, code] <- cells do
      meta = JSON.decode!(meta)
      assert meta["kind"] == "Elixir.Kino.Trace.SmartCell"
      # as Livebook saves attrs: JSON, then base 64 without padding
      attrs = meta["attrs"] |> Base.decode64!(padding: false) |> JSON.decode!()
      assert Controller.to_attrs(Controller.init(attrs)) == attrs
      assert Source.to_source(attrs) == code
    end
  end

  test "the smart cell module is defined only with Kino" do
    assert Code.ensure_loaded?(SmartCell) == Code.ensure_loaded?(Kino.SmartCell)
  end
end
