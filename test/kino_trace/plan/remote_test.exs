defmodule KinoTrace.Plan.RemoteTest do
  # A node's part of a plan, built on this node against a peer that has no kino_trace
  # (only OTP's and Elixir's code paths), with modules and names only the peer has.
  use ExUnit.Case, async: false

  @moduletag :slow

  alias Kino.Trace.Plan
  alias KinoTrace.Base.Name
  alias KinoTrace.Base.Lookup
  alias KinoTrace.Plan.TailCalls

  doctest Lookup

  @moduletag timeout: 120_000

  setup_all do
    KinoTraceTest.Peers.ensure_distribution()
  end

  # A peer with OTP's code path and Elixir's lib dirs (or OTP's alone), nothing of kino_trace.
  defp start_peer(name, elixir? \\ true),
    do: KinoTraceTest.Peers.start_peer(name, code: if(elixir?, do: :bare, else: :otp))

  # Compiles an Erlang module with erlc (another OS process: its name never becomes an
  # atom here) into a fresh directory. Returns {module name text, dir}.
  defp compile_module(source_fun) do
    name = "kt_peer_#{System.unique_integer([:positive])}_#{System.pid()}"
    dir = Path.join(System.tmp_dir!(), "kino_trace_plan_remote_#{name}")
    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    source = Path.join(dir, name <> ".erl")
    File.write!(source, source_fun.(name))
    {output, status} = System.cmd("erlc", ["-o", dir, source], stderr_to_stdout: true)
    assert status == 0, output
    {name, dir}
  end

  defp sample_source(name) do
    """
    -module(#{name}).
    -export([loop/1, run/1, stop_node/1, whereis_name/1]).

    loop(0) -> done;
    loop(N) -> loop(N - 1).

    run(X) -> {#{name}_atom, X}.

    stop_node(_) -> ok.

    %% A {:via, module, name} lookup that takes the node down.
    whereis_name(_) -> erlang:halt().
    """
  end

  # A peer with the sample module on its code path (not loaded yet).
  defp peer_with_sample(peer_name) do
    {peer, node} = start_peer(peer_name)
    {name, dir} = compile_module(&sample_source/1)
    true = :erpc.call(node, :code, :add_patha, [String.to_charlist(dir)])
    {peer, node, name}
  end

  test "the peer has no kino_trace, and Elixir" do
    {_peer, node} = start_peer(:bare)
    assert :erpc.call(node, :code, :which, [KinoTrace.Session]) == :non_existing
    assert :erpc.call(node, :code, :which, [KinoTrace.Base.Lookup]) == :non_existing
    assert is_list(:erpc.call(node, :code, :which, [Enum]))
  end

  # Its part of the plan is built here, and kino_trace's agent traces there: the node
  # needs nothing of kino_trace (before the agent, starting failed there; the agent's own
  # tests are agent_test.exs).
  test "a trace of a peer without kino_trace starts there, and leaves nothing when stopped" do
    {_peer, node} = start_peer(:no_session)
    trace = Kino.Trace.calls([":lists.sum/1"], nodes: [node])
    3 = :erpc.call(node, :lists, :sum, [[1, 2]])

    KinoTraceTest.Helpers.await_events(
      trace,
      &Enum.any?(&1, fn e -> e.kind == :return and e.return == 3 end)
    )

    Kino.Trace.stop(trace)

    KinoTraceTest.Helpers.wait_until(fn ->
      KinoTraceTest.Peers.kino_sessions(node) == [] and
        KinoTraceTest.Peers.kino_modules(node) == []
    end)
  end

  test "a node with OTP alone (no Elixir): its part is built from OTP's modules" do
    {_peer, node} = start_peer(:otp_only, false)
    assert :erpc.call(node, :code, :which, [Enum]) == :non_existing

    plan =
      Plan.new!([calls: [":lists.sum/1", ":ets.insert/2"], processes: :kernel_sup], nodes: [node])

    part = Plan.node_part!(plan, node)

    assert Enum.map(part.calls.patterns, &KinoTrace.Pattern.mfa/1) == [
             {:lists, :sum, 1},
             {:ets, :insert, 2}
           ]

    assert part.processes.targets == [:erpc.call(node, :erlang, :whereis, [:kernel_sup])]

    error =
      assert_raise ArgumentError, fn -> Plan.new!([calls: ["Enum.sum/1"]], nodes: [node]) end

    assert error.message =~
             "on node #{inspect(node)}: invalid trace pattern \"Enum.sum/1\": unknown module Enum"
  end

  test "patterns on a module only the peer has resolve for that node and fail here" do
    {_peer, node, name} = peer_with_sample(:patterns)
    # the module's name is not even an atom here yet
    assert Name.existing(name) == nil

    plan = Plan.new!([calls: [":#{name}.loop/1", ":#{name}.run", ":#{name}"]], nodes: [node])
    assert plan.calls == nil and plan.nodes == [node]

    part = Plan.node_part!(plan, node)
    module = String.to_existing_atom(name)

    assert part.nodes == [node] and part.what == plan.what and part.options == plan.options and
             part.limits == plan.limits

    assert Enum.map(part.calls.patterns, &KinoTrace.Pattern.mfa/1) ==
             [{module, :loop, 1}, {module, :run, :_}, {module, :_, :_}]

    assert part.calls.pids == [:all]
    assert {{module, :_, :_}, [{:_, [], [{:exception_trace}]}]} in part.calls.functions.steps
    # the compiler's module_info/0,1 of that module are set untraced, read there
    assert {{module, :module_info, 0}, false} in part.calls.functions.steps
    # loaded there (as a trace of it would), not here
    assert :erpc.call(node, :erlang, :module_loaded, [module])
    refute :erlang.module_loaded(module)

    # here the module does not exist
    assert_raise ArgumentError, ~r/unknown module :#{name}/, fn ->
      Plan.new!([calls: [":#{name}.loop/1"]], [])
    end

    # a trace of this node and the peer: the peer's part is fine, this node's is not
    error =
      assert_raise ArgumentError, fn ->
        Plan.new!([calls: [":#{name}.loop/1"]], nodes: [node, node()])
      end

    assert error.message =~ "invalid trace pattern \":#{name}.loop/1\": unknown module :#{name}"
    refute error.message =~ "on node"
  end

  test "a pattern's warnings name the node; warn: false leaves them out" do
    {_peer, node} = start_peer(:warnings)
    plan = Plan.new!([calls: ["Kernel.+/2"]], [])

    warned = ExUnit.CaptureIO.capture_io(:stderr, fn -> Plan.node_part!(plan, node) end)
    assert warned =~ "on node #{inspect(node)}: Kernel.+/2 is inlined by the compiler"

    assert ExUnit.CaptureIO.capture_io(:stderr, fn -> Plan.node_part!(plan, node, warn: false) end) ==
             ""
  end

  test "a module this node has and the peer does not is reported on the peer, named by node" do
    {_peer, node} = start_peer(:local_only)

    error =
      assert_raise ArgumentError, fn ->
        Plan.new!([calls: ["KinoTrace.Base.Lookup.run/2"]], nodes: [node(), node], force: true)
      end

    assert error.message ==
             "on node #{inspect(node)}: invalid trace pattern \"KinoTrace.Base.Lookup.run/2\": unknown module KinoTrace.Base.Lookup"
  end

  test "a typo gets a did-you-mean from the peer's functions and modules" do
    {_peer, node, name} = peer_with_sample(:typo)
    plan = Plan.new!([calls: ["Enum.sum/1"]], [])

    error =
      assert_raise ArgumentError, fn ->
        Plan.node_part!(%{plan | what: [calls: [":#{name}.lop/1"]]}, node)
      end

    assert error.message ==
             "on node #{inspect(node)}: invalid trace pattern \":#{name}.lop/1\": :#{name}.lop/1 is not a function; did you mean :#{name}.loop/1?"

    # arities and private functions are read there too
    error =
      assert_raise ArgumentError, fn ->
        Plan.node_part!(%{plan | what: [calls: [":#{name}.loop/2"]]}, node)
      end

    assert error.message =~ ":#{name}.loop/2 does not exist; :#{name}.loop has arities 1"

    # an unknown module: suggested from the peer's modules (its code path)
    typo = String.slice(name, 0..-2//1)

    error =
      assert_raise ArgumentError, fn ->
        Plan.node_part!(%{plan | what: [calls: [":#{typo}"]]}, node)
      end

    assert error.message ==
             "on node #{inspect(node)}: invalid trace pattern \":#{typo}\": unknown module :#{typo}; did you mean :#{name}?"

    # which this node does not have to suggest
    error = assert_raise ArgumentError, fn -> Plan.new!([calls: [":#{typo}"]], []) end
    refute error.message =~ "did you mean :#{name}?"
  end

  test "literal atoms of the peer's module, in argument patterns and message patterns" do
    {_peer, node, name} = peer_with_sample(:atoms)
    # (without returns: reading its tail calls would bring its code's atoms here)
    plan = Plan.new!([calls: ["Enum.sum/1"]], return: false, exceptions: false)
    # loads the module there: the atoms of its code exist there, not here
    Plan.node_part!(%{plan | what: [calls: [":#{name}.loop/1"]]}, node)
    assert Name.existing(name <> "_atom") == nil

    message_pattern = "{:#{name}_atom, _}"

    assert_raise ArgumentError, ~r/unknown atom :#{name}_atom/, fn ->
      Plan.new!([messages: :all], pattern: message_pattern)
    end

    part =
      Plan.node_part!(
        %{
          plan
          | what: [messages: :all],
            options: Keyword.put(plan.options, :pattern, message_pattern)
        },
        node
      )

    atom = String.to_existing_atom(name <> "_atom")
    assert [{[_to, {^atom, :_}], [], []}] = part.messages.specs.send

    part =
      Plan.node_part!(%{plan | what: [calls: [":#{name}.run(x) when x == :#{name}_atom"]]}, node)

    assert [%{guards: [[{:==, :"$1", ^atom}]]}] = part.calls.patterns
  end

  test "literal atoms in argument patterns: the module is loaded there first" do
    {_peer, node, name} = peer_with_sample(:atoms_first)
    plan = Plan.new!([calls: ["Enum.sum/1"]], [])
    part = Plan.node_part!(%{plan | what: [calls: [":#{name}.run({:#{name}_atom, _})"]]}, node)
    atom = String.to_existing_atom(name <> "_atom")
    assert [%{head: [{^atom, :_}]}] = part.calls.patterns
  end

  test "names are looked up on the peer" do
    {_peer, node} = start_peer(:names)
    pid = Node.spawn(node, :timer, :sleep, [:infinity])
    true = :erpc.call(node, :erlang, :register, [:kino_trace_peer_only_name, pid])
    :yes = :erpc.call(node, :global, :register_name, [{__MODULE__, :peer_global}, pid])
    on_exit(fn -> :global.unregister_name({__MODULE__, :peer_global}) end)

    plan =
      Plan.new!([calls: ["Enum.sum/1"], messages: :kino_trace_peer_only_name, processes: [pid]],
        nodes: [node],
        pids: :kino_trace_peer_only_name
      )

    part = Plan.node_part!(plan, node)
    assert part.calls.pids == [pid]
    assert part.messages.targets == [pid]
    assert part.processes.targets == [pid]

    for name <- [
          {:global, {__MODULE__, :peer_global}},
          {:via, :global, {__MODULE__, :peer_global}}
        ] do
      assert Plan.node_part!(
               %{plan | options: Keyword.put(plan.options, :pids, [name, self()])},
               node
             ).calls.pids == [pid]
    end

    # not here
    assert_raise ArgumentError, ~r/no process is registered as :kino_trace_peer_only_name/, fn ->
      Plan.new!([calls: ["Enum.sum/1"]], pids: :kino_trace_peer_only_name)
    end

    error =
      assert_raise ArgumentError, fn ->
        Plan.new!([processes: :kino_trace_nobody], nodes: [node])
      end

    assert error.message ==
             "on node #{inspect(node)}: invalid processes target: no process is registered as :kino_trace_nobody"

    # a {:via, module, name} whose module the peer does not have
    error =
      assert_raise ArgumentError, fn ->
        Plan.new!([calls: ["Enum.sum/1"]], nodes: [node], pids: {:via, KinoTrace.Session, :x})
      end

    assert error.message ==
             "on node #{inspect(node)}: invalid value for :pids: cannot look up {:via, KinoTrace.Session, :x}: KinoTrace.Session.whereis_name/1 is not defined"
  end

  test "tail-call cycles of the peer's module are read there" do
    {_peer, node, name} = peer_with_sample(:cycles)
    plan = Plan.new!([calls: ["Enum.sum/1"]], [])

    part = Plan.node_part!(%{plan | what: [calls: [":#{name}"]]}, node)
    module = String.to_existing_atom(name)
    assert MapSet.member?(part.calls.functions.no_returns, {module, :loop, 1})
    refute MapSet.member?(part.calls.functions.no_returns, {module, :run, 1})

    assert TailCalls.cycles_all([module], :local, Lookup.new(node)) == %{
             module => MapSet.new(loop: 1)
           }

    # not here: the module cannot be loaded
    assert TailCalls.cycles(module) == :unknown

    # loaded there from a binary, with no object file on its code path: unknown, as a
    # module compiled in memory here
    {other, dir} = compile_module(&sample_source/1)
    other = String.to_atom(other)
    beam = File.read!(Path.join(dir, "#{other}.beam"))

    {:module, ^other} =
      :erpc.call(node, :code, :load_binary, [other, ~c"/nowhere/#{other}.beam", beam])

    assert TailCalls.cycles_all([other], :local, Lookup.new(node)) == %{other => :unknown}

    # then the plan keeps the returns of loop/1 (the stack guard covers it)
    part = Plan.node_part!(%{plan | what: [calls: [{other, :_, :_}]]}, node)
    assert MapSet.size(part.calls.functions.no_returns) == 0
  end

  test "a node that goes away while its part is built gives a clear error" do
    {_peer, node, name} = peer_with_sample(:gone)
    module = String.to_atom(name)

    # the patterns are looked up there, then the {:via, ...} name takes the node down
    error =
      assert_raise ArgumentError, fn ->
        Plan.new!([calls: [":#{name}.loop/1"]], nodes: [node], pids: {:via, module, :anyone})
      end

    assert error.message ==
             "on node #{inspect(node)}: lost the connection to #{inspect(node)} while its modules and names were looked up (:noconnection)"

    # and a part built once it is gone
    plan = Plan.new!([calls: ["Enum.sum/1"]], [])
    error = assert_raise ArgumentError, fn -> Plan.node_part!(plan, node) end
    assert error.message =~ "on node #{inspect(node)}: lost the connection to #{inspect(node)}"
    # no answer of the abandoned calls is left in this process's mailbox
    refute_received _
  end

  test "a thousand patterns on the peer" do
    {_peer, node} = start_peer(:many)

    {name, dir} =
      compile_module(fn name ->
        functions = for i <- 1..1_000, do: "f#{i}(X) -> X + #{i}."
        exports = Enum.map_join(1..1_000, ", ", &"f#{&1}/1")
        "-module(#{name}).\n-export([#{exports}]).\n" <> Enum.join(functions, "\n") <> "\n"
      end)

    true = :erpc.call(node, :code, :add_patha, [String.to_charlist(dir)])
    patterns = for i <- 1..1_000, do: ":#{name}.f#{i}/1"
    plan = Plan.new!([calls: ["Enum.sum/1"]], [])

    # the look-ups there are batched: a handful of steps (each one round trip of calls
    # sent together), not one per pattern
    session = :trace.session_create(:plan_remote_steps, self(), [])
    on_exit(fn -> :trace.session_destroy(session) end)
    run = {Lookup, :run, 2}
    1 = :trace.function(session, run, true, [:call_count])

    part = Plan.node_part!(%{plan | what: [calls: patterns]}, node)
    assert length(part.calls.patterns) == 1_000
    assert length(part.calls.functions.steps) == 1_000

    {:call_count, steps} = :trace.info(session, run, :call_count)
    assert steps in 1..10, "#{steps} look-up steps for 1 000 patterns"
  end
end
