defmodule Kino.Trace.MermaidTest do
  # Kino.Trace.to_mermaid/2 on real traces and on hostile events. The diagrams come from
  # KinoTraceTest.MermaidSamples, which the browser test below hands to Mermaid's own
  # parser and renderer in Chromium: a diagram Mermaid rejects fails it.
  use ExUnit.Case, async: false

  alias Kino.Trace.Event
  alias KinoTraceTest.{AgentSample, MermaidSamples}

  import KinoTraceTest.Helpers, only: [await_events: 2]

  doctest Kino.Trace.Mermaid

  @root Path.expand("../../..", __DIR__)

  # One statement per line: a participant, an arrow, an activation or a note.
  @statement ~r/^  (participant P\d+ as (?<alias>.*)|P\d+(->>|-->>|--x|-x)P\d+: (?<arrow>.*)|(activate|deactivate) P\d+|Note over P\d+(,P\d+)?: (?<note>.*)|%% .*)$/u

  describe "every diagram" do
    test "is one statement per line, labels escaped and short, activations balanced" do
      for %{name: name, source: source} <- MermaidSamples.all() do
        assert ["sequenceDiagram" | lines] = String.split(source, "\n", trim: true), name
        assert String.ends_with?(source, "\n")
        assert byte_size(source) < 50_000, "#{name}: #{byte_size(source)} bytes"

        for line <- lines do
          captures = Regex.named_captures(@statement, line)
          assert captures, "#{name}: not a statement: #{inspect(line)}"
          label = Enum.find_value(["alias", "arrow", "note"], "", &non_empty(captures[&1]))
          assert_escaped(label, name)
        end

        assert_balanced(lines, name)
      end
    end
  end

  describe "real traces" do
    test "a ping-pong: one arrow per message, the server named, its calls activated" do
      rounds = 3
      %{source: source, run: run, events: events} = MermaidSamples.ping_pong(rounds)
      lines = String.split(source, "\n", trim: true)

      ping = participant(lines, inspect(run.ping))
      pong = participant(lines, inspect(run.name))
      assert ping && pong, source

      pings = Enum.filter(lines, &String.starts_with?(&1, "  #{ping}->>#{pong}: {:ping, "))
      pongs = Enum.filter(lines, &String.starts_with?(&1, "  #{pong}->>#{ping}: {:pong, "))
      assert length(pings) == rounds and length(pongs) == rounds, source

      # the receives of traced sends are not drawn again
      receives = Enum.count(events, &(&1.kind == :receive and match?({:ping, _, _}, &1.data)))
      assert receives == rounds
      refute source =~ "receive {:ping,"

      assert Enum.count(lines, &(&1 == "  activate #{pong}")) == rounds
      assert Enum.count(lines, &(&1 == "  deactivate #{pong}")) == rounds

      assert Enum.any?(
               lines,
               &(&1 == "  #{pong}->>#{pong}: KinoTraceTest.SequenceSample.reply/1")
             )

      assert Enum.any?(
               lines,
               &(&1 =~
                   ~r/^  #{pong}-->>#{pong}: -> 10 \(.+\)  KinoTraceTest\.SequenceSample\.reply\/1$/)
             )

      assert source =~ "Note over #{pong}: exit {:shutdown, :done}"
      assert source =~ "Note over #{pong}: register :kino_trace_sequence_pong"
      assert Regex.match?(~r/Note over #{pong},P\d+: spawn /, source)
      assert Regex.match?(~r/Note over #{pong},P\d+: link /, source)
      refute source =~ "left out"
    end

    test "calls as activations: nested, errors and exceptions; or as notes" do
      %{source: source, capture: capture} = MermaidSamples.calls()
      assert Kino.Trace.Capture.complete?(capture)
      calls = Enum.count(capture.events, &(&1.kind == :call))
      lines = String.split(source, "\n", trim: true)

      assert Enum.count(lines, &String.starts_with?(&1, "  activate ")) == calls
      assert Enum.count(lines, &String.starts_with?(&1, "  deactivate ")) == calls
      assert Enum.count(lines, &(&1 =~ ~r/^  P1->>P1: SampleApp\.Cache\.fetch\/2$/)) == 4
      assert Enum.any?(lines, &(&1 =~ ~r/^  P1-->>P1: -> \{:error, :not_found\}/))
      # the exception ends in a cross, at each level it went through
      assert Enum.count(lines, &(&1 =~ ~r/^  P1--xP1: !! \*\* \(ArgumentError\) negative id: -1/)) ==
               2

      %{source: notes, capture: capture} = MermaidSamples.calls_as_notes()
      refute notes =~ "activate"

      note_lines =
        notes
        |> String.split("\n", trim: true)
        |> Enum.filter(&String.starts_with?(&1, "  Note over P1: "))

      assert length(note_lines) == length(capture.events)
      assert "  Note over P1: SampleApp.Cache.fetch(:users, 1)" in note_lines
    end

    test "a GenServer call: the reply to the caller's alias is an arrow to the caller" do
      %{source: source, capture: capture} = MermaidSamples.genserver_call()
      assert Kino.Trace.Capture.complete?(capture)
      lines = String.split(source, "\n", trim: true)
      caller = participant(lines, inspect(self()))
      agent = participant(lines, ":kino_trace_mermaid_agent")
      assert caller && agent, source

      # the request and the reply by what they carry, not OTP's envelope (issue 39 item 8)
      assert Enum.any?(
               lines,
               &String.starts_with?(&1, "  #{caller}->>#{agent}: call {:get, #35;Function#60;")
             )

      assert "  #{agent}->>#{caller}: reply 42" in lines
      refute source =~ "gen_call"
      refute source =~ "Reference"

      assert Enum.any?(
               lines,
               &(&1 =~ ~r/^  #{agent}->>#{agent}: KinoTraceTest\.MermaidSamples\.echo\/1$/)
             )

      # no participant for the alias, no separate receive of the reply
      refute Enum.any?(lines, &(&1 =~ ~r/participant P\d+ as #35;Reference/))
      refute source =~ ~r/receive \{\[:alias \| .*\], 42\}/
    end

    test "GenServer replies to a caller not traced go to the caller: one participant per process" do
      # issue 23 item 4: Kino.Trace.messages([:counter]) on a named Agent, Agent.get twice
      name = :kino_trace_mermaid_counter
      agent = AgentSample.start(name)
      caller = AgentSample.caller(name)
      on_exit(fn -> AgentSample.stop(agent, caller) end)
      trace = Kino.Trace.messages([name])
      on_exit(fn -> Kino.Trace.stop(trace) end)

      assert AgentSample.go(caller) == [0, 1]
      events = await_events(trace, &(Enum.count(&1, fn e -> e.kind == :send end) >= 2))
      # the replies are sent to aliases (references), as gen calls do since OTP 24
      assert [ref, _] = for(%{kind: :send, peer: peer} <- events, do: peer)
      assert is_reference(ref)

      source = Kino.Trace.to_mermaid(events)
      lines = String.split(source, "\n", trim: true)
      agent_id = participant(lines, ":#{name}")
      caller_id = participant(lines, inspect(caller))
      assert agent_id && caller_id, source
      assert length(Enum.filter(lines, &String.starts_with?(&1, "  participant "))) == 2, source

      replies = Enum.filter(lines, &(&1 =~ ~r/^  #{agent_id}->>#{caller_id}: reply [01]$/))
      assert length(replies) == 2, source
    end

    test "a caller traced too: each reply is one arrow, its receive drawn with it" do
      name = :kino_trace_mermaid_counter_both
      agent = AgentSample.start(name)
      caller = AgentSample.caller(name)
      on_exit(fn -> AgentSample.stop(agent, caller) end)
      trace = Kino.Trace.messages([name, caller])
      on_exit(fn -> Kino.Trace.stop(trace) end)

      AgentSample.go(caller)

      events =
        await_events(
          trace,
          &(Enum.count(&1, fn e -> match?(%{kind: :receive, data: {[:alias | _], _}}, e) end) >= 2)
        )

      source = Kino.Trace.to_mermaid(events)
      lines = String.split(source, "\n", trim: true)
      agent_id = participant(lines, ":#{name}")
      caller_id = participant(lines, inspect(caller))
      refute Enum.any?(lines, &(&1 =~ ~r/participant P\d+ as #35;Reference/)), source

      assert length(Enum.filter(lines, &(&1 =~ ~r/^  #{agent_id}->>#{caller_id}: reply /))) == 2,
             source

      refute source =~ ~r/Note over #{caller_id}: receive reply /
    end

    test "capped at max_messages, with a note saying how many were left out" do
      %{source: source, capture: capture} = sample = MermaidSamples.capped_messages()
      assert Kino.Trace.Capture.complete?(capture)
      lines = String.split(source, "\n", trim: true)
      arrows = Enum.filter(lines, &(&1 =~ ~r/^  P1->>P1: /))
      assert length(arrows) == 200
      assert List.last(arrows) == "  P1->>P1: {:n, 200}"
      assert List.last(lines) == "  Note over P1: 100 more events left out (max_messages: 200)"

      [{_, all}, {_, one}] = sample.variants
      assert length(Regex.scan(~r/^  P1->>P1: /m, all)) == 300
      refute all =~ "left out"
      assert one =~ "\n  Note over P1: 299 more events left out (max_messages: 1)\n"
    end

    test "a running trace: its last events" do
      %{events: events, variants: [{_, from_events}]} = sample = MermaidSamples.ping_pong(2)
      assert length(events) > 5
      # the same events as a list give the same diagram as the trace did
      assert from_events == sample.source

      %{source: source} = MermaidSamples.running_trace()
      assert source =~ ~r/-> 4 \(.+\)  KinoTraceTest\.MermaidSamples\.echo\/1/
      refute source =~ "-> 3 "
      # the call of the last return was not among the events: nothing to deactivate
      refute source =~ "activate"
    end
  end

  describe "hostile terms" do
    test "every label is escaped, cut, and still says what the term is" do
      %{source: source} = MermaidSamples.hostile_events()
      lines = String.split(source, "\n", trim: true)

      for line <- lines, label = label_of(line), label != nil do
        text = unescape(label)
        assert String.length(text) <= 80, "label too long: #{text}"
        refute text =~ ~r/[\x00-\x1f\x7f\x{2028}\x{2029}]/u
      end

      assert "  participant P1 as :P2" in lines
      assert "  participant P2 as :\"end#59;#35;#60;br>\"" in lines
      assert Enum.any?(lines, &String.contains?(&1, "#60;script>alert(1)#60;/script>"))
      assert Enum.any?(lines, &String.contains?(&1, ~s(:"日本語 ünïcödé 😀")))
      # a 1 MB string and a 100 000 items list are cut
      assert Enum.any?(lines, &(&1 =~ ~r/^  P1->>P2: "x#59;#35;#60;x#59;.*…$/))
      assert Enum.any?(lines, &(&1 =~ ~r/^  P1->>P2: \[1, 2, 3, .*\.\.\.\]$/))
      # pids, refs, funs and ports read as they inspect
      for prefix <- [
            "#35;PID#60;",
            "#35;Reference#60;",
            "#35;Function#60;",
            "#35;Port#60;",
            "#38;Enum.map/2"
          ] do
        assert String.contains?(source, prefix), "no #{prefix}"
      end

      # the register note names the process; the unregistered send is a cross
      assert source =~ ~s(Note over P3: register :"reg#59;#35;#60;br>\\nname")
      assert Regex.match?(~r/^  P1-xP\d+: "gone#59;#35;" \(no such process\)$/m, source)
    end

    test "the real tracer's cut terms too" do
      %{source: source, capture: capture} = MermaidSamples.hostile_trace()
      assert Kino.Trace.Capture.complete?(capture)
      assert source =~ ~s(P1->>P1: :"semi#59;colon")

      assert source =~
               "P1--xP1: !! ** (ArgumentError) bad#59; #60;br> #35;1 #37;#37; second line"
    end

    test "a diagram stays under Mermaid's size limit" do
      %{source: source} = MermaidSamples.size_limit()
      assert byte_size(source) < 50_000
      arrows = length(Regex.scan(~r/^  P1->>P2: /m, source))
      assert arrows > 10 and arrows < 200

      assert source =~
               "\n  Note over P1,P2: #{200 - arrows} more events left out (Mermaid's size limit)\n"
    end
  end

  describe "pairing" do
    test "a receive seen before its send is still one arrow" do
      assert MermaidSamples.early_receive().source ==
               """
               sequenceDiagram
                 participant P1 as #35;PID#60;0.601.0>
                 participant P2 as #35;PID#60;0.602.0>
                 P1->>P2: :hi
                 P1->>P2: :hi
                 Note over P1,P2: link #35;PID#60;0.602.0>
               """
    end

    test "returns close only calls that were opened" do
      %{source: source} = MermaidSamples.unpaired()
      lines = String.split(source, "\n", trim: true)
      assert Enum.count(lines, &(&1 == "  activate P1")) == 2
      assert Enum.count(lines, &(&1 == "  deactivate P1")) == 2
      assert "  P1-->>P1: -> 6  Enum.sum/1" in lines
      # Elixir's name of the error, as the widget says it (issue 39 item 9)
      assert "  P1--xP1: !! ** (ArithmeticError) bad argument in arithmetic expression  Enum.sum/1" in lines
      assert "  Note over P2: receive {:from, :nowhere}" in lines
      refute source =~ "returned to"
    end

    test "a process of another node: its name says which node" do
      source = MermaidSamples.other_node().source
      assert source =~ "participant P1 as #35;PID#60;"
      assert source =~ "participant P2 as :cache on other@host\n"
      assert source =~ "P1->>P2: :get\n"
    end

    test "a name two processes had is told apart by the pid" do
      source = MermaidSamples.same_name().source
      assert source =~ "participant P1 as :server\n"
      assert source =~ "participant P2 as :server #35;PID#60;0.702.0>\n"
    end
  end

  describe "bad input" do
    test "raises ArgumentError naming the problem" do
      event = %Event{id: 1, kind: :exit, pid: self(), data: :normal}

      assert_raise ArgumentError,
                   ~r/list of Kino.Trace.Event structs, got at position 1: :oops/,
                   fn ->
                     Kino.Trace.to_mermaid([event, :oops])
                   end

      assert_raise ArgumentError, ~r/expected a Kino.Trace, a Kino.Trace.Capture or a list/, fn ->
        Kino.Trace.to_mermaid(%{events: []})
      end

      assert_raise ArgumentError,
                   ~r/invalid value for :max_messages: expected a positive integer, got: 0/,
                   fn ->
                     Kino.Trace.to_mermaid([event], max_messages: 0)
                   end

      assert_raise ArgumentError, ~r/invalid value for :calls: expected a boolean/, fn ->
        Kino.Trace.to_mermaid([event], calls: :no)
      end

      assert_raise ArgumentError, ~r/invalid value for :max_label/, fn ->
        Kino.Trace.to_mermaid([event], max_label: 2)
      end

      assert_raise ArgumentError, ~r/expected options to be a keyword list/, fn ->
        Kino.Trace.to_mermaid([event], [:calls])
      end
    end

    test "events the tracer would not make still give a diagram" do
      %{source: source, variants: [{_, notes}]} = MermaidSamples.malformed()

      for source <- [source, notes] do
        assert source =~ "args: :oops"
        assert source =~ "participant P2 as nil"
      end

      refute notes =~ "activate"
    end

    test "an ended trace says so" do
      trace = Kino.Trace.calls(["KinoTraceTest.MermaidSamples.echo/1"])
      Kino.Trace.stop(trace)
      assert_raise ArgumentError, ~r/the trace has ended/, fn -> Kino.Trace.to_mermaid(trace) end
    end

    test "mermaid/2 needs Kino" do
      event = %Event{id: 1, kind: :exit, pid: self(), data: :normal}

      if Code.ensure_loaded?(Kino.Mermaid) do
        assert %{__struct__: Kino.JS} = Kino.Trace.mermaid([event])
      else
        assert_raise RuntimeError, ~r/Kino is not loaded.*Kino.Trace.to_mermaid\/2/, fn ->
          Kino.Trace.mermaid([event])
        end
      end

      # the diagram's own errors come first
      assert_raise ArgumentError, fn -> Kino.Trace.mermaid([:oops]) end
    end
  end

  describe "Mermaid's own parser" do
    @describetag :browser
    @describetag timeout: 300_000

    test "accepts and renders every diagram, and rejects a broken one" do
      assert File.dir?(Path.join(@root, "assets/node_modules/mermaid")),
             "Mermaid is not installed: run `npm ci` in assets/"

      samples = MermaidSamples.all()
      hostile = Enum.find(samples, &(&1.name == "hostile terms (built events)"))

      # Control cases: the check must fail on diagrams Mermaid rejects.
      broken = [
        %{
          name: "control: an unescaped ;",
          source: String.replace(hostile.source, "#59;", ";"),
          expect: "reject"
        },
        %{
          name: "control: deactivate first",
          source: "sequenceDiagram\n  deactivate P1\n",
          expect: "reject"
        }
      ]

      # and the diagrams shown in the docs
      documented = documented_diagrams()
      assert Enum.any?(documented, &String.starts_with?(&1.name, "guides/tracing.md"))

      diagrams =
        Enum.map(samples, &Map.take(&1, [:name, :source, :texts])) ++ documented ++ broken

      {output, status} = run_node("mermaid.test.mjs", %{diagrams: diagrams})
      assert status == 0, "Mermaid check failed:\n#{output}"

      assert output =~
               "#{length(samples) + length(documented)} diagrams accepted and rendered, 2 broken ones rejected"

      # and it does fail when a diagram it should accept is broken
      bad = [%{name: "unescaped", source: hd(broken).source, texts: []}]
      {output, status} = run_node("mermaid.test.mjs", %{diagrams: bad})
      assert status != 0
      assert output =~ "unescaped: Mermaid rejected it"
    end
  end

  ## Helpers

  defp non_empty(nil), do: nil
  defp non_empty(""), do: nil
  defp non_empty(text), do: text

  defp label_of(line) do
    case Regex.named_captures(@statement, line) do
      nil -> nil
      captures -> Enum.find_value(["alias", "arrow", "note"], &non_empty(captures[&1]))
    end
  end

  # No character Mermaid would read as syntax or markup, outside an entity.
  defp assert_escaped(label, name) do
    bare = String.replace(label, ~r/#\d+;/, "")
    refute bare =~ ~r/[#;<&\r\n]|%%/, "#{name}: unescaped label: #{inspect(label)}"
  end

  # Mermaid rejects a deactivation of a participant that is not active.
  defp assert_balanced(lines, name) do
    Enum.reduce(lines, %{}, fn line, active ->
      case Regex.run(~r/^  (activate|deactivate) (P\d+)$/, line) do
        [_, "activate", p] ->
          Map.update(active, p, 1, &(&1 + 1))

        [_, "deactivate", p] ->
          assert Map.get(active, p, 0) > 0, "#{name}: #{p} deactivated while inactive"
          Map.update!(active, p, &(&1 - 1))

        nil ->
          active
      end
    end)
  end

  defp participant(lines, label) do
    Enum.find_value(lines, fn line ->
      case Regex.run(~r/^  participant (P\d+) as (.*)$/, line) do
        [_, id, alias_text] -> if unescape(alias_text) == label, do: id
        nil -> nil
      end
    end)
  end

  defp unescape(text) do
    Regex.replace(~r/#(\d+);/, text, fn _, code -> <<String.to_integer(code)::utf8>> end)
  end

  # The ```mermaid blocks of the README and the guides.
  defp documented_diagrams do
    guides =
      for path <- Path.wildcard(Path.join(@root, "guides/*.{md,livemd}")),
          do: Path.relative_to(path, @root)

    for file <- ["README.md" | Enum.sort(guides)],
        text = File.read!(Path.join(@root, file)),
        [whole, source] <- Regex.scan(~r/^```mermaid\n(.*?)^```$/ms, text) do
      {offset, _} = :binary.match(text, whole)
      line = text |> binary_part(0, offset) |> String.split("\n") |> length()
      %{name: "#{file}:#{line}", source: source, texts: []}
    end
  end

  defp run_node(script, fixture) do
    dir = Path.join(System.tmp_dir!(), "kino_trace_mermaid_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf(dir) end)
    path = Path.join(dir, "diagrams.json")
    File.write!(path, JSON.encode!(fixture))

    {output, status} =
      System.cmd("node", [Path.join(@root, "test/browser/" <> script), path],
        stderr_to_stdout: true
      )

    IO.puts(output)
    {output, status}
  end
end
