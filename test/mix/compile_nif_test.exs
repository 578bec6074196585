defmodule Mix.Tasks.Compile.KinoTraceNifTest do
  use ExUnit.Case, async: true

  alias Mix.Tasks.Compile.KinoTraceNif

  @root Path.expand("../..", __DIR__)

  test "the native tracer is where :code.priv_dir/1 finds it, and loaded" do
    path = Path.join(:code.priv_dir(:kino_trace), "kino_trace_nif.so")
    assert File.regular?(path)
    assert KinoTrace.Tracer.loaded?()
    assert KinoTrace.Tracer.load_error() == nil
  end

  test "a second compile with no change rebuilds nothing" do
    lib = Path.join(:code.priv_dir(:kino_trace), "kino_trace_nif.so")
    before = File.stat!(lib, time: :posix).mtime
    assert Mix.Tasks.Compile.KinoTraceNif.run([]) == {:noop, []}
    assert File.stat!(lib, time: :posix).mtime == before
  end

  describe "KINO_TRACE_CMAKE_ARGS" do
    setup do
      dir =
        Path.join(
          System.tmp_dir!(),
          "kino_trace_cmake_test_#{System.unique_integer([:positive])}"
        )

      on_exit(fn -> File.rm_rf!(dir) end)
      %{dir: dir}
    end

    test "its words follow the project's own arguments" do
      args = KinoTraceNif.configure_args("/out", ~S|-DA=1 "-DB=two words"|)
      assert "-DKINO_TRACE_NIF_OUTPUT=/out" in args
      assert Enum.take(args, -2) == ["-DA=1", "-DB=two words"]
      assert KinoTraceNif.configure_args("/out", "") == Enum.drop(args, -2)
    end

    # The real CMake (configure only, no compiling): a value given once must not outlive
    # the argument, and reconfigure?/2 (which run/1 asks too) says when it has to go.
    @tag :slow
    @tag timeout: 180_000
    test "an argument left out of the next configure is gone from CMake's cache", %{dir: dir} do
      build = Path.join(dir, "cmake")
      priv = Path.join(dir, "priv")
      plain = KinoTraceNif.configure_args(priv, "")
      thread = KinoTraceNif.configure_args(priv, "-DKINO_TRACE_SANITIZE=thread")

      assert KinoTraceNif.reconfigure?(build, thread)
      :ok = KinoTraceNif.configure!(@root, build, thread)
      assert sanitize(build) == "thread"
      refute KinoTraceNif.reconfigure?(build, thread)
      assert KinoTraceNif.reconfigure?(build, plain)

      :ok = KinoTraceNif.configure!(@root, build, plain)
      assert sanitize(build) == ""
      refute KinoTraceNif.reconfigure?(build, plain)
      assert KinoTraceNif.reconfigure?(build, Enum.drop(plain, -1))

      # A bad value fails the configure; without it the next configure works again.
      bad = KinoTraceNif.configure_args(priv, "-DKINO_TRACE_SANITIZE=bogus")

      assert_raise Mix.Error, ~r/KINO_TRACE_SANITIZE must be/, fn ->
        KinoTraceNif.configure!(@root, build, bad)
      end

      assert KinoTraceNif.reconfigure?(build, plain)
      :ok = KinoTraceNif.configure!(@root, build, plain)
      assert sanitize(build) == ""
      refute KinoTraceNif.reconfigure?(build, plain)
    end
  end

  # The value of KINO_TRACE_SANITIZE in the build directory's CMake cache.
  defp sanitize(build) do
    [value] =
      Regex.run(
        ~r/^KINO_TRACE_SANITIZE:STRING=(.*)$/m,
        File.read!(Path.join(build, "CMakeCache.txt")),
        capture: :all_but_first
      )

    value
  end
end
