defmodule Mix.Tasks.Compile.KinoTraceNif do
  @moduledoc """
  Builds kino_trace's native tracer (`c_src/`) with CMake and puts the shared library
  where `:code.priv_dir(:kino_trace)` finds it.

  Incremental: when no file under `c_src/` nor `CMakeLists.txt` is newer than the built
  library and the CMake arguments are the ones it was built with, nothing runs. When the
  arguments change (`KINO_TRACE_CMAKE_ARGS`, `CI`, another OTP), the CMake build
  directory is emptied and configured afresh: CMake keeps every `-D` value in its cache,
  so an argument left out would otherwise stay in force. `mix clean` removes the library
  and the CMake build directory.

  With `MIX_ENV=bench` it also builds the benchmark's floor tracer
  (`kino_trace_floor_tracer.so`, see `bench/`).

  Environment:
    * `KINO_TRACE_CMAKE_ARGS` - extra arguments for the CMake configure step
    * `CI=true` - builds with `-Werror`
  """
  use Mix.Task.Compiler

  @lib "kino_trace_nif.so"
  @bench_libs ["kino_trace_floor_tracer.so"]

  @impl true
  def run(_args) do
    root = project_root()
    targets = Enum.map(libs(), &Path.join(priv_dir(), &1))
    sources = sources(root)
    args = configure_args(priv_dir(), System.get_env("KINO_TRACE_CMAKE_ARGS", ""))

    if not reconfigure?(build_dir(), args) and Enum.all?(targets, &up_to_date?(&1, sources)) do
      {:noop, []}
    else
      build(root, targets, args)
      {:ok, []}
    end
  end

  @impl true
  def clean do
    File.rm_rf!(build_dir())
    Enum.each([@lib | @bench_libs], &File.rm(Path.join(priv_dir(), &1)))
    :ok
  end

  defp libs, do: if(Mix.env() == :bench, do: [@lib | @bench_libs], else: [@lib])

  defp project_root, do: Path.expand("..", __DIR__)
  defp priv_dir, do: Path.join(Mix.Project.app_path(), "priv")
  defp build_dir, do: Path.join(Mix.Project.build_path(), "kino_trace_cmake")

  defp sources(root) do
    [Path.join(root, "CMakeLists.txt") | Path.wildcard(Path.join(root, "c_src/**/*.{h,hpp,cpp}"))]
  end

  defp up_to_date?(target, sources) do
    case File.stat(target, time: :posix) do
      {:ok, %{mtime: built}} ->
        Enum.all?(sources, fn s -> File.stat!(s, time: :posix).mtime <= built end)

      {:error, _} ->
        false
    end
  end

  @doc """
  The CMake configure arguments for a NIF built into `output_dir`, followed by `extra`
  (a string of shell-like words, as in `KINO_TRACE_CMAKE_ARGS`).
  """
  @spec configure_args(Path.t(), String.t()) :: [String.t()]
  def configure_args(output_dir, extra) do
    erts_include =
      Path.join([:code.root_dir(), "erts-#{:erlang.system_info(:version)}", "include"])

    werror = if System.get_env("CI") in ["true", "1"], do: "ON", else: "OFF"

    [
      "-DCMAKE_BUILD_TYPE=Release",
      "-DKINO_TRACE_ERTS_INCLUDE=#{erts_include}",
      "-DKINO_TRACE_NIF_OUTPUT=#{output_dir}",
      "-DKINO_TRACE_WERROR=#{werror}",
      "-DKINO_TRACE_TESTS=OFF"
    ] ++ OptionParser.split(extra)
  end

  @doc """
  Whether `build_dir` must be configured afresh for `args`: true unless its last
  successful configure had exactly these arguments (so also when it was never
  configured, or its last configure failed).
  """
  @spec reconfigure?(Path.t(), [String.t()]) :: boolean()
  def reconfigure?(build_dir, args) do
    File.read(stamp_path(build_dir)) != {:ok, stamp(args)}
  end

  @doc """
  Runs the CMake configure step of `root` in `build_dir` with `args`. When `args` differ
  from the last successful configure there, the directory is emptied first, so no
  cache entry of earlier arguments survives. Raises `Mix.Error` when CMake fails.
  """
  @spec configure!(Path.t(), Path.t(), [String.t()]) :: :ok
  def configure!(root, build_dir, args) do
    if reconfigure?(build_dir, args), do: File.rm_rf!(build_dir)
    File.mkdir_p!(build_dir)
    cmd!("cmake", ["-S", root, "-B", build_dir | args])
    File.write!(stamp_path(build_dir), stamp(args))
  end

  defp stamp_path(build_dir), do: Path.join(build_dir, "kino_trace_configure_args")
  defp stamp(args), do: Enum.map_join(args, &(&1 <> "\n"))

  defp build(root, [target | _] = targets, args) do
    build_dir = build_dir()
    File.mkdir_p!(Path.dirname(target))

    Mix.shell().info("==> kino_trace: building native tracer (CMake)")
    configure!(root, build_dir, args)
    cmake_targets = Enum.map(targets, &Path.basename(&1, ".so"))

    cmd!(
      "cmake",
      ["--build", build_dir, "--target"] ++
        cmake_targets ++ ["-j", "#{System.schedulers_online()}"]
    )

    for target <- targets do
      unless File.exists?(target) do
        Mix.raise("kino_trace: CMake finished but #{target} was not produced")
      end

      # CMake only relinks when objects change; touch so the mtime check above holds.
      File.touch!(target)
    end
  end

  defp cmd!(exe, args) do
    unless System.find_executable(exe) do
      Mix.raise("kino_trace: #{exe} not found; run scripts/setup.sh to install the build tools")
    end

    case System.cmd(exe, args, stderr_to_stdout: true) do
      {_out, 0} ->
        :ok

      {out, status} ->
        Mix.raise("kino_trace: `#{exe} #{Enum.join(args, " ")}` failed (exit #{status}):\n#{out}")
    end
  end
end
