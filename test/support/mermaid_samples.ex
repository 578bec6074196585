defmodule KinoTraceTest.MermaidSamples do
  @moduledoc false
  # The Mermaid diagrams the tests make, from real traces and from events built by
  # hand (hostile terms, a size overflow, unpaired events). test/kino/trace/mermaid_test.exs
  # checks their shape; its browser test has every one of them parsed and rendered by
  # Mermaid itself in Chromium (test/browser/mermaid.test.mjs).
  #
  # Each sample is %{name, source, texts}: `texts` must show in the rendered diagram.
  # A sample may have `variants`: more diagrams of the same events with other options,
  # [{name, source}], which `all/0` lists as samples of their own.

  alias Kino.Trace.Event
  alias KinoTraceTest.SequenceSample

  @doc "Returns its argument: traced with hostile terms."
  def echo(term), do: term

  @doc "Raises an ArgumentError whose message is hostile."
  def boom(message), do: raise(ArgumentError, message)

  @doc "Every sample and variant, in a stable order."
  def all do
    Enum.flat_map(samples(), fn sample ->
      variants = for {name, source} <- Map.get(sample, :variants, []), do: sample(name, source)
      [Map.take(sample, [:name, :source, :texts]) | variants]
    end)
  end

  defp samples do
    [
      doc_example(),
      doc_example_capped(),
      empty(),
      ping_pong(),
      calls(),
      calls_as_notes(),
      capped_messages(),
      lifecycle(),
      hostile_events(),
      hostile_trace(),
      size_limit(),
      unpaired(),
      running_trace(),
      early_receive(),
      same_name(),
      malformed(),
      widget_reply(),
      genserver_call(),
      other_node()
    ]
  end

  defp sample(name, source, texts \\ []), do: %{name: name, source: source, texts: texts}

  @doc "The moduledoc's examples."
  def doc_example do
    ping = :c.pid(0, 210, 0)
    cache = :c.pid(0, 211, 0)

    events = [
      %Event{id: 1, kind: :send, pid: ping, data: {:fetch, 42}, peer: cache},
      %Event{id: 2, kind: :receive, pid: cache, name: MyApp.Cache, data: {:fetch, 42}},
      %Event{
        id: 3,
        kind: :call,
        pid: cache,
        name: MyApp.Cache,
        module: MyApp.Repo,
        function: :get,
        arity: 1,
        args: [42]
      },
      %Event{
        id: 4,
        kind: :return,
        pid: cache,
        name: MyApp.Cache,
        module: MyApp.Repo,
        function: :get,
        arity: 1,
        return: {:ok, "#1"},
        call_id: 3
      },
      %Event{id: 5, kind: :send, pid: cache, name: MyApp.Cache, data: {:ok, "#1"}, peer: ping},
      %Event{id: 6, kind: :exit, pid: cache, name: MyApp.Cache, data: :normal}
    ]

    sample("doc example", Kino.Trace.to_mermaid(events), [
      "#PID<0.210.0>",
      "MyApp.Cache",
      "{:fetch, 42}",
      "MyApp.Repo.get/1",
      ~s(-> {:ok, "#1"}),
      "exit :normal"
    ])
  end

  def doc_example_capped do
    pid = :c.pid(0, 210, 0)

    events =
      for id <- 1..3 do
        %Event{
          id: id,
          kind: :call,
          pid: pid,
          name: :worker,
          module: Enum,
          function: :sum,
          arity: 1,
          args: [[id]]
        }
      end

    source = Kino.Trace.to_mermaid(events, calls: false, args: true, max_messages: 2)

    sample("doc example, capped", source, [
      "Enum.sum([2])",
      "1 more event left out (max_messages: 2)"
    ])
  end

  def empty, do: sample("no events", Kino.Trace.to_mermaid([]))

  @doc "A real ping-pong: messages, the server's calls, its name, spawn, link, exit."
  def ping_pong(rounds \\ 3) do
    run = SequenceSample.start(rounds)
    trace = SequenceSample.trace(run)

    try do
      SequenceSample.go(run)

      receive do
        {:sequence_done, _} -> :ok
      after
        10_000 -> raise "the ping-pong did not finish"
      end

      source = Kino.Trace.to_mermaid(trace)
      events = Kino.Trace.events(trace)

      Map.merge(
        sample("ping-pong (real trace)", source, [
          ":kino_trace_sequence_pong",
          "{:pong, 10}",
          "KinoTraceTest.SequenceSample.reply/1"
        ]),
        %{
          run: run,
          events: events,
          variants: [{"ping-pong from its events", Kino.Trace.to_mermaid(events)}]
        }
      )
    after
      Kino.Trace.stop(trace)
    end
  end

  @doc "A real capture of calls, with nested calls, an error return and exceptions."
  def calls do
    capture = capture_calls()
    source = Kino.Trace.to_mermaid(capture)

    Map.merge(
      sample("calls (real capture)", source, [
        "SampleApp.Cache.fetch/2",
        "SampleApp.Repo.get/2",
        "(ArgumentError) negative id: -1"
      ]),
      %{capture: capture}
    )
  end

  def calls_as_notes do
    capture = capture_calls()
    source = Kino.Trace.to_mermaid(capture, calls: false, args: true)

    Map.merge(
      sample("calls as notes (real capture)", source, ["SampleApp.Cache.fetch(:users, 1)"]),
      %{capture: capture}
    )
  end

  defp capture_calls do
    Kino.Trace.capture(["SampleApp.Cache.fetch/2", "SampleApp.Repo.get/2"], fn ->
      SampleApp.Cache.fetch(:users, 1)
      SampleApp.Cache.fetch(:users, 1)
      SampleApp.Cache.fetch(:users, 0)

      try do
        SampleApp.Cache.fetch(:users, -1)
      rescue
        ArgumentError -> :ok
      end
    end)
  end

  @doc "A real capture of 300 messages: capped at 200."
  def capped_messages do
    capture =
      Kino.Trace.capture(
        ["KinoTraceTest.MermaidSamples.echo/1"],
        fn ->
          for i <- 1..300, do: send(self(), {:n, i})
          for _ <- 1..300, do: receive(do: ({:n, _} -> :ok))
        end,
        messages: true,
        pattern: "{:n, _}"
      )

    source = Kino.Trace.to_mermaid(capture)

    Map.merge(
      sample("300 messages, capped (real capture)", source, [
        "{:n, 200}",
        "100 more events left out (max_messages: 200)"
      ]),
      %{
        capture: capture,
        variants: [
          {"300 messages, max_messages: 300", Kino.Trace.to_mermaid(capture, max_messages: 300)},
          {"300 messages, max_messages: 1", Kino.Trace.to_mermaid(capture, max_messages: 1)}
        ]
      }
    )
  end

  @doc "A real capture of process events: spawn, link, unlink, register, exit."
  def lifecycle do
    name = :kino_trace_mermaid_worker

    capture =
      Kino.Trace.capture(
        ["KinoTraceTest.MermaidSamples.echo/1"],
        fn ->
          parent = self()

          {pid, ref} =
            spawn_monitor(fn ->
              Process.register(self(), name)
              send(parent, :registered)
              receive do: (:go -> exit({:shutdown, :done}))
            end)

          receive do: (:registered -> :ok)
          Process.link(pid)
          Process.unlink(pid)
          send(pid, :go)
          receive do: ({:DOWN, ^ref, :process, _, _} -> :ok)
        end,
        messages: true,
        processes: true
      )

    source = Kino.Trace.to_mermaid(capture)

    Map.merge(
      sample("lifecycle (real capture)", source, [inspect(name), "exit {:shutdown, :done}"]),
      %{capture: capture}
    )
  end

  @doc "Terms that break a careless diagram: every kind of event carries them."
  def hostile_terms do
    [
      :"quote\"d",
      :"semi;colon",
      :"hash#tag",
      :"a-->>b",
      :end,
      :"new\nline",
      :"<br>",
      :"日本語 ünïcödé 😀",
      "quotes \" ; # %% <br> <script>alert(1)</script> &amp; -->> end\nnewline\r\n\ttab",
      "%%{init: {\"theme\": \"forest\"}}%%",
      "#quot; #35; #9829;",
      "\u2028 \u2029 \u0085 \u007f",
      <<255, 254, ?;>>,
      Enum.reduce(1..2_000, :x, &{&1, [&2]}),
      Enum.to_list(1..100_000),
      String.duplicate("x;#<", 250_000),
      self(),
      make_ref(),
      fn x -> x end,
      &Enum.map/2,
      hd(Port.list()),
      %{"key;" => "val#", :"k<>" => [1, 2]},
      {:"$gen_call", {self(), make_ref()}, {:fetch, "end"}},
      %ArgumentError{message: "multi\nline ; # <b>"}
    ]
  end

  @doc "Events built by hand from hostile terms, names and function names."
  def hostile_events do
    a = :c.pid(0, 301, 0)
    b = :c.pid(0, 302, 0)
    c = :c.pid(0, 303, 0)
    terms = hostile_terms()
    module = :"Elixir.My;App#<br>"
    function = :"fun;#<>\nend"

    per_term =
      terms
      |> Enum.with_index(1)
      |> Enum.flat_map(fn {term, i} ->
        base = 10 * i

        [
          %Event{id: base, kind: :send, pid: a, name: :P2, data: term, peer: b},
          %Event{id: base + 1, kind: :receive, pid: b, name: :"end;#<br>", data: term},
          %Event{
            id: base + 2,
            kind: :call,
            pid: b,
            name: :"end;#<br>",
            module: module,
            function: function,
            arity: 1,
            args: [term]
          },
          %Event{
            id: base + 3,
            kind: :return,
            pid: b,
            name: :"end;#<br>",
            module: module,
            function: function,
            arity: 1,
            return: term,
            call_id: base + 2,
            duration: 1_234
          },
          %Event{
            id: base + 4,
            kind: :send,
            pid: b,
            name: :"end;#<br>",
            data: {:reply, term},
            peer: c
          },
          %Event{id: base + 5, kind: :exit, pid: c, data: term}
        ]
      end)

    more = [
      %Event{
        id: 1_000,
        kind: :call,
        pid: a,
        name: :P2,
        module: module,
        function: function,
        arity: 1,
        args: [:x]
      },
      %Event{
        id: 1_001,
        kind: :exception,
        pid: a,
        name: :P2,
        module: module,
        function: function,
        arity: 1,
        exception: {:error, %ArgumentError{message: "line1\nline2; <br> #x %%"}},
        call_id: 1_000
      },
      %Event{
        id: 1_002,
        kind: :exception,
        pid: a,
        name: :P2,
        module: module,
        function: function,
        arity: 1,
        exception: {:throw, {:"a;b", "<i>"}},
        call_id: 999
      },
      %Event{
        id: 1_003,
        kind: :spawn,
        pid: a,
        peer: c,
        data: {module, function, [:"x;y", "<br>"]}
      },
      %Event{id: 1_004, kind: :link, pid: a, peer: c},
      %Event{id: 1_005, kind: :register, pid: c, data: :"reg;#<br>\nname"},
      %Event{
        id: 1_006,
        kind: :send_to_non_existing,
        pid: a,
        data: "gone;#",
        peer: :c.pid(0, 304, 0)
      },
      %Event{id: 1_007, kind: :unregister, pid: c, data: :"reg;#<br>\nname"},
      %Event{
        id: 1_008,
        kind: :send,
        pid: :c.pid(0, 305, 0),
        name: :"-->>d->x:y",
        data: :"->>",
        peer: a
      }
    ]

    events = per_term ++ more
    source = Kino.Trace.to_mermaid(events, max_messages: 1_000)

    sample("hostile terms (built events)", source, [
      ":P2",
      ~s(:"end;#<br>"),
      ~s(:"-->>d->x:y"),
      ~s({:reply, :"quote\\"d"}),
      ~s({:reply, :"a-->>b"}),
      ~s(:"日本語 ünïcödé 😀"),
      ~s("%%{init: {\\"theme\\": \\"forest\\"}}%%"),
      ~s("#quot; #35; #9829;"),
      ~s(-> :"semi;colon"),
      "** (ArgumentError) line1 line2; <br> #x %%",
      ~s(exit %ArgumentError{message: "multi\\nline ; # <b>"})
    ])
  end

  @doc "Hostile terms through a real trace (the tracer's cuts included)."
  def hostile_trace do
    terms = hostile_terms()

    capture =
      Kino.Trace.capture(
        ["KinoTraceTest.MermaidSamples.echo/1", "KinoTraceTest.MermaidSamples.boom/1"],
        fn ->
          for term <- terms do
            send(self(), echo(term))
            receive do: (_ -> :ok)
          end

          try do
            boom("bad; <br> #1 %%\nsecond line")
          rescue
            ArgumentError -> :ok
          end
        end,
        messages: true
      )

    source = Kino.Trace.to_mermaid(capture, max_messages: 1_000)

    Map.merge(
      sample("hostile terms (real capture)", source, [
        "KinoTraceTest.MermaidSamples.echo/1",
        ~s(:"semi;colon"),
        ~s(:"<br>"),
        "** (ArgumentError) bad; <br> #1 %% second line"
      ]),
      %{capture: capture}
    )
  end

  @doc "Long labels of escaped characters: the diagram stops at Mermaid's size limit."
  def size_limit do
    a = :c.pid(0, 401, 0)
    b = :c.pid(0, 402, 0)

    events =
      for i <- 1..200,
          do: %Event{
            id: i,
            kind: :send,
            pid: a,
            data: String.duplicate("#<;", 400) <> "#{i}",
            peer: b
          }

    source = Kino.Trace.to_mermaid(events, max_label: 2_000)

    sample("over Mermaid's size limit (built events)", source, ["left out (Mermaid's size limit)"])
  end

  @doc "Events whose other half is missing: a return without its call, a receive without its send."
  def unpaired do
    a = :c.pid(0, 501, 0)
    b = :c.pid(0, 502, 0)

    events = [
      %Event{
        id: 5,
        kind: :return,
        pid: a,
        module: Enum,
        function: :sum,
        arity: 1,
        return: 6,
        call_id: 4
      },
      %Event{
        id: 6,
        kind: :exception,
        pid: a,
        module: Enum,
        function: :sum,
        arity: 1,
        exception: {:error, :badarith},
        call_id: 3
      },
      %Event{id: 7, kind: :receive, pid: b, data: {:from, :nowhere}},
      %Event{id: 8, kind: :getting_linked, pid: b, peer: a},
      %Event{id: 9, kind: :spawned, pid: b, peer: a, data: {Enum, :sum, [[1]]}},
      %Event{id: 10, kind: :return_to, pid: a, module: Enum, function: :map, arity: 2},
      %Event{id: 11, kind: :call, pid: a, module: Enum, function: :sum, arity: 1, args: [[1]]},
      %Event{id: 12, kind: :call, pid: a, module: Enum, function: :sum, arity: 1, args: [[2]]},
      %Event{id: 13, kind: :return, pid: a, module: Enum, function: :sum, arity: 1, return: 2},
      %Event{id: 14, kind: :return, pid: a, module: Enum, function: :sum, arity: 1, return: 1},
      %Event{id: 15, kind: :return, pid: a, module: Enum, function: :sum, arity: 1, return: 0}
    ]

    sample("unpaired events (built events)", Kino.Trace.to_mermaid(events), [
      "receive {:from, :nowhere}",
      "-> 6  Enum.sum/1"
    ])
  end

  @doc "A running trace's last event: a return whose call is not among the events."
  def running_trace do
    trace = Kino.Trace.calls(["KinoTraceTest.MermaidSamples.echo/1"])

    try do
      for i <- 1..4, do: echo(i)
      source = Kino.Trace.to_mermaid(trace, last: 1)
      sample("a running trace, last: 1", source, ["KinoTraceTest.MermaidSamples.echo/1"])
    after
      Kino.Trace.stop(trace)
    end
  end

  @doc "A receive and a getting_linked seen before their send and link."
  def early_receive do
    [a, b] = [:c.pid(0, 601, 0), :c.pid(0, 602, 0)]

    events = [
      %Event{id: 1, kind: :receive, pid: b, data: :hi},
      %Event{id: 2, kind: :send, pid: a, peer: b, data: :hi},
      %Event{id: 3, kind: :send, pid: a, peer: b, data: :hi},
      %Event{id: 4, kind: :getting_linked, pid: b, peer: a},
      %Event{id: 5, kind: :link, pid: a, peer: b}
    ]

    sample("receive before send (built events)", Kino.Trace.to_mermaid(events), [":hi"])
  end

  @doc "Two processes that had the same name."
  def same_name do
    events = [
      %Event{
        id: 1,
        kind: :send,
        pid: :c.pid(0, 701, 0),
        name: :server,
        peer: :c.pid(0, 702, 0),
        data: 1
      },
      %Event{
        id: 2,
        kind: :send,
        pid: :c.pid(0, 702, 0),
        name: :server,
        peer: :c.pid(0, 701, 0),
        data: 2
      }
    ]

    sample("one name, two processes (built events)", Kino.Trace.to_mermaid(events), [
      ":server #PID<0.702.0>"
    ])
  end

  @doc "Events the tracer would not make: no module, arguments not a list, no pid."
  def malformed do
    pid = :c.pid(0, 801, 0)

    events = [
      %Event{id: 1, kind: :call, pid: pid, module: nil, args: nil},
      %Event{id: 2, kind: :call, pid: pid, module: Enum, function: :sum, arity: 1, args: :oops},
      %Event{
        id: 3,
        kind: :exception,
        pid: pid,
        module: Enum,
        function: :sum,
        arity: 1,
        exception: :bad
      },
      %Event{id: 4, kind: :send, pid: nil, peer: nil, data: :x}
    ]

    Map.merge(
      sample("malformed events", Kino.Trace.to_mermaid(events, args: true), ["args: :oops"]),
      %{
        variants: [
          {"malformed events as notes", Kino.Trace.to_mermaid(events, calls: false, args: true)}
        ]
      }
    )
  end

  @doc """
  The widget's "Copy as Mermaid": the real controller answers "get_mermaid" for the
  events of one of two calls of a real trace.
  """
  def widget_reply do
    alias KinoTrace.Widget.Controller

    trace = Kino.Trace.calls(["SampleApp.Cache.fetch/2", "SampleApp.Repo.get/2"])

    try do
      Task.async(fn ->
        SampleApp.Cache.fetch(:users, 12)
        SampleApp.Cache.fetch(:users, 13)
      end)
      |> Task.await()

      # the controller starts from the trace's history: it holds every event
      {controller, _effects} = Controller.init(trace, lifeline: false)
      events = Kino.Trace.events(trace)
      call = Enum.find(events, &match?(%Event{kind: :call, args: [:users, 12]}, &1))
      return = Enum.find(events, &(&1.call_id == call.id))
      ids = for event <- events, event.id >= call.id and event.id <= return.id, do: event.id

      {[{:reply, "mermaid", reply}], controller} =
        Controller.handle_event(controller, "get_mermaid", %{"ids" => Enum.reverse(ids)})

      Map.merge(
        sample("the widget's Copy as Mermaid (real trace)", reply.source, ["SampleApp.Repo.get/2"]),
        %{
          reply: reply,
          ids: ids,
          events: events,
          controller: controller
        }
      )
    after
      Kino.Trace.stop(trace)
    end
  end

  @doc "A real GenServer call: its reply goes to the caller's alias, drawn to the caller."
  def genserver_call do
    {:ok, agent} = Agent.start(fn -> 41 end, name: :kino_trace_mermaid_agent)

    try do
      capture =
        Kino.Trace.capture(
          ["KinoTraceTest.MermaidSamples.echo/1"],
          fn -> Agent.get(agent, &echo(&1 + 1)) end,
          pids: [agent],
          messages: true
        )

      source = Kino.Trace.to_mermaid(capture)

      Map.merge(
        sample("a GenServer call (real capture)", source, [":kino_trace_mermaid_agent", "-> 42"]),
        %{
          capture: capture,
          agent: agent
        }
      )
    after
      Agent.stop(agent)
    end
  end

  @doc "Processes of another node (pids made as the distribution would make them)."
  def other_node do
    cache = remote_pid("other@host", 42)
    worker = remote_pid("other@host", 43)

    events = [
      %Event{id: 1, kind: :send, node: :other@host, pid: worker, peer: cache, data: :get},
      %Event{id: 2, kind: :receive, node: :other@host, pid: cache, name: :cache, data: :get}
    ]

    source = Kino.Trace.to_mermaid(events)
    sample("processes of another node (built events)", source, [":cache on other@host", ":get"])
  end

  defp remote_pid(node, id) do
    name = to_string(node)

    :erlang.binary_to_term(
      <<131, 88, 118, byte_size(name)::16, name::binary, id::32, 0::32, 1::32>>
    )
  end
end
