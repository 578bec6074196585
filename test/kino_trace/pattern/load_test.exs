defmodule KinoTrace.Pattern.LoadTest do
  # async: false: suspends the code server, which every test loading code waits on.
  use ExUnit.Case, async: false

  alias KinoTrace.Pattern

  # A module that is not loaded is looked for along the whole code path, in the code
  # server, every time. A pattern asks for it only when loading could help: when its
  # arguments hold names that are not atoms yet (which the module's code may hold). In
  # OTP 29's full suite, parsing 2 000 patterns on a missing module took over a minute
  # while other tests loaded code.
  test "a pattern whose arguments hold no new names parses without the code server" do
    # what parsing and the task below load is loaded first: while the code server is
    # suspended, a call to a module not loaded yet would wait for it
    task = Task.async(fn -> Pattern.parse("KinoTraceTest.NotLoadedWarmUp.f(1, :ok, [_ | _])") end)
    assert {:ok, {:ok, _}} = Task.yield(task, 60_000)
    Task.shutdown(Task.async(fn -> :ok end), :brutal_kill)
    module = KinoTraceTest.NotLoaded
    refute :erlang.module_loaded(module)

    :sys.suspend(:code_server)

    result =
      try do
        task = Task.async(fn -> Pattern.parse("#{inspect(module)}.f(1, :ok, [_ | _])") end)
        Task.yield(task, 5_000) || Task.shutdown(task, :brutal_kill)
      after
        :sys.resume(:code_server)
      end

    assert {:ok, {:ok, %Pattern{module: ^module, arity: 3}}} = result
  end

  test "a name in the arguments that only the module's code holds: the module is loaded for it" do
    dir = Path.join(System.tmp_dir!(), "kino_trace_load_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    # built as text, compiled by erlc in an OS process: neither atom exists here yet
    n = System.unique_integer([:positive])
    {mod, atom} = {"kino_trace_load_mod_#{n}", "kino_trace_load_atom_#{n}"}

    File.write!(
      Path.join(dir, mod <> ".erl"),
      "-module(#{mod}).\n-export([f/1]).\nf(#{atom}) -> ok.\n"
    )

    {_, 0} = System.cmd("erlc", ["-o", dir, Path.join(dir, mod <> ".erl")])
    Code.prepend_path(dir)
    module = String.to_atom(mod)

    try do
      refute :erlang.module_loaded(module)

      assert {:ok, %Pattern{module: ^module, head: [literal]}} =
               Pattern.parse(":#{mod}.f(:#{atom})")

      assert :erlang.module_loaded(module)
      assert literal == String.to_existing_atom(atom)
    after
      :code.purge(module)
      :code.delete(module)
      Code.delete_path(dir)
      File.rm_rf!(dir)
    end
  end
end
