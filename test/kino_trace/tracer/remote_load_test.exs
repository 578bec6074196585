defmodule KinoTrace.Tracer.RemoteLoadTest do
  # The native tracer on a node that never installed kino_trace: a real :peer node
  # started with OTP's code path only (no Elixir, no kino_trace), which gets
  # kino_trace_tracer's object code with :code.load_binary/3 and the NIF library from a
  # directory of its own, named by the persistent_term {kino_trace_tracer, nif_path}.
  # Everything run there is Erlang (erl_eval), as a remote agent's would be.
  use ExUnit.Case, async: false

  import KinoTraceTest.Peers, only: [ensure_distribution: 0]

  @moduletag timeout: 120_000

  setup_all do
    ensure_distribution()
  end

  setup do
    # Only OTP's code path: no -pa, as a node that never installed kino_trace.
    {_peer, node} = KinoTraceTest.Peers.start_peer(:tracer_load, code: :otp)

    # Nothing of ours is there: the test would prove nothing otherwise.
    assert :erpc.call(node, :code, :priv_dir, [:kino_trace]) == {:error, :bad_name}
    assert :erpc.call(node, :code, :which, [:kino_trace_tracer]) == :non_existing
    assert :erpc.call(node, :code, :which, [:elixir]) == :non_existing

    # The library where a remote agent would put it: a directory of its own.
    dir =
      Path.join(System.tmp_dir!(), "kino_trace_remote_load_#{System.unique_integer([:positive])}")

    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)

    File.cp!(
      Path.join(:code.priv_dir(:kino_trace), "kino_trace_nif.so"),
      Path.join(dir, "kino_trace_nif.so")
    )

    %{node: node, nif_path: Path.join(dir, "kino_trace_nif")}
  end

  # Evaluates Erlang `source` on `node` (with `bindings`) and returns its value.
  defp eval(node, source, bindings \\ []) do
    {:ok, tokens, _} = :erl_scan.string(String.to_charlist(source))
    {:ok, exprs} = :erl_parse.parse_exprs(tokens)

    bindings =
      Enum.reduce(bindings, :erl_eval.new_bindings(), fn {k, v}, b ->
        :erl_eval.add_binding(k, v, b)
      end)

    {:value, value, _} = :erpc.call(node, :erl_eval, :exprs, [exprs, bindings], 30_000)
    value
  end

  # Loads kino_trace_tracer on `node` as a remote agent does: the library's path in the
  # persistent_term only while code:load_binary/3 runs (`nil`: no path given). Whatever
  # was loaded before is removed first.
  defp load(node, nif_path) do
    {module, binary, file} = :code.get_object_code(:kino_trace_tracer)

    eval(
      node,
      """
      code:purge(Module), code:delete(Module), code:purge(Module),
      case NifPath of
          nil -> ok;
          _ -> persistent_term:put({kino_trace_tracer, nif_path}, NifPath)
      end,
      Loaded = code:load_binary(Module, File, Binary),
      persistent_term:erase({kino_trace_tracer, nif_path}),
      Loaded.
      """,
      Module: module,
      File: file,
      Binary: binary,
      NifPath: nif_path && String.to_charlist(nif_path)
    )
  end

  defp loaded(node), do: :erpc.call(node, :kino_trace_tracer, :loaded, [])
  defp load_error(node), do: :erpc.call(node, :kino_trace_tracer, :load_error, [])

  defp kept(node, key),
    do: :erpc.call(node, :persistent_term, :get, [{:kino_trace_tracer, key}, :none])

  test "loaded from a path of its own, it traces on a node with only OTP", %{
    node: node,
    nif_path: nif_path
  } do
    assert {:module, :kino_trace_tracer} = load(node, nif_path)
    assert loaded(node)
    assert load_error(node) == :undefined
    # Nothing left behind by the load.
    assert kept(node, :load_error) == :none
    assert kept(node, :nif_path) == :none

    {id, ready, {raw, more?}, counters, worker} =
      eval(node, ~S"""
      Resource = kino_trace_tracer:new_session(self(), #{}),
      Id = kino_trace_tracer:session_id(Resource),
      Session = trace:session_create(remote_load_test, {kino_trace_tracer, Resource}, []),
      Parent = self(),
      Worker = spawn(fun() -> receive go -> lists:seq(1, 3), Parent ! {done, self()} end end),
      1 = trace:function(Session, {lists, seq, 2}, true, [global]),
      1 = trace:process(Session, Worker, true, [call]),
      Worker ! go,
      receive {done, Worker} -> ok after 10000 -> exit(worker_stuck) end,
      Ready = receive {kino_trace, Id, ready} -> ready after 10000 -> not_ready end,
      Drained = kino_trace_tracer:drain(Resource, 100),
      Counters = kino_trace_tracer:counters(Resource),
      true = trace:session_destroy(Session),
      ok = kino_trace_tracer:close(Resource),
      {Id, Ready, Drained, Counters, Worker}.
      """)

    assert is_integer(id) and id > 0
    assert ready == :ready
    assert node(worker) == node
    assert [{:call, ^worker, t, _scheduler, :lists, :seq, 2, [1, 3], :undefined, 0}] = raw
    assert is_integer(t)
    # the drain that empties the queue puts it to sleep
    assert more? == :recheck
    assert %{accepted: 1, delivered: 1, queued: 0} = counters
  end

  test "a wrong path leaves the module loaded without its NIFs, and says why", %{
    node: node,
    nif_path: nif_path
  } do
    wrong = Path.join(Path.dirname(nif_path), "nowhere/kino_trace_nif")
    assert {:module, :kino_trace_tracer} = load(node, wrong)
    refute loaded(node)
    error = load_error(node)
    assert error =~ "kino_trace: could not load its native tracer from #{wrong}: "
    assert error =~ "load_failed"

    assert_raise ErlangError, ~r/not_loaded/, fn ->
      :erpc.call(node, :kino_trace_tracer, :new_session, [self(), %{}])
    end

    # No path and no kino_trace application there: no priv directory to load from.
    assert {:module, :kino_trace_tracer} = load(node, nil)
    refute loaded(node)

    assert load_error(node) =~
             "kino_trace: could not load its native tracer from kino_trace's priv directory: "

    # A load that works afterwards forgets the earlier failure.
    assert {:module, :kino_trace_tracer} = load(node, nif_path)
    assert loaded(node)
    assert load_error(node) == :undefined
    assert kept(node, :load_error) == :none
  end
end
