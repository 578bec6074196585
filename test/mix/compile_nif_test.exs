defmodule Mix.Tasks.Compile.KinoTraceNifTest do
  use ExUnit.Case, async: true

  test "the native tracer is where :code.priv_dir/1 finds it, and loaded" do
    path = Path.join(:code.priv_dir(:kino_trace), "kino_trace_nif.so")
    assert File.regular?(path)
    assert Kino.Trace.Tracer.loaded?()
  end

  test "a second compile with no change rebuilds nothing" do
    lib = Path.join(:code.priv_dir(:kino_trace), "kino_trace_nif.so")
    before = File.stat!(lib, time: :posix).mtime
    assert Mix.Tasks.Compile.KinoTraceNif.run([]) == {:noop, []}
    assert File.stat!(lib, time: :posix).mtime == before
  end
end
