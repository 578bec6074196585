defmodule Mix.Tasks.Compile.KinoTraceNif.Progress do
  @moduledoc false
  # Runs `cmake --build` and says on Mix.shell/0 each C++ file compiled and each library
  # linked as CMake reports them: "[ 40%] Building CXX object .../c_src/nif/x.cpp.o"
  # (make), "[3/7] Building CXX object ..." (Ninja), "[100%] Linking CXX shared module
  # ...". The whole output is kept for the error message of a failed build. (A port, not
  # System.cmd/3 into a Collectable: this file is loaded after protocols are
  # consolidated.)

  @spec cmd(Path.t(), [String.t()]) :: {String.t(), non_neg_integer()}
  def cmd(exe, args) do
    port =
      Port.open({:spawn_executable, exe}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        :hide,
        args: args
      ])

    collect(port, [], "")
  end

  defp collect(port, out, partial) do
    receive do
      {^port, {:data, chunk}} ->
        [partial | done] = (partial <> chunk) |> String.split("\n") |> Enum.reverse()
        done = Enum.reverse(done)
        Enum.each(done, &report/1)
        collect(port, Enum.reduce(done, out, &[&1 <> "\n" | &2]), partial)

      {^port, {:exit_status, status}} ->
        report(partial)
        {IO.iodata_to_binary([Enum.reverse(out), partial]), status}
    end
  end

  defp report(line) do
    case Regex.run(
           ~r/^\[\s*([^\]]+)\]\s+(Building|Linking) \w+ (?:\w+ )?(?:object|module|library)\s+(\S+)/,
           line
         ) do
      [_, where, "Building", object] ->
        file =
          object |> String.replace(~r/\.(o|obj)$/, "") |> String.replace(~r/^.*?(c_src\/)/, "\\1")

        Mix.shell().info("kino_trace:   compiling #{file} [#{where}]")

      [_, where, "Linking", lib] ->
        Mix.shell().info("kino_trace:   linking #{Path.basename(lib)} [#{where}]")

      nil ->
        :ok
    end
  end
end

defmodule Mix.Tasks.Compile.KinoTraceNif do
  @moduledoc """
  Builds kino_trace's native tracer (`c_src/`) with CMake and puts the shared library
  where `:code.priv_dir(:kino_trace)` finds it (`kino_trace_nif.so`; `.dll` on Windows).

  Incremental: when no file under `c_src/` nor `CMakeLists.txt` is newer than the built
  library and the CMake arguments are the ones it was built with, nothing runs. When the
  arguments change (`KINO_TRACE_CMAKE_ARGS`, `CI`, another OTP), the CMake build
  directory is emptied and configured afresh: CMake keeps every `-D` value in its cache,
  so an argument left out would otherwise stay in force. `mix clean` removes the library
  and the CMake build directory. `mix compile --force` builds again.

  kino_trace works without its native tracer, through the pure-Erlang one
  (`kino_trace_fallback`), so a machine that cannot build it still compiles kino_trace:

    * **something missing** (no `cmake`, no C++ compiler, no `erl_nif.h`, no {fmt}
      headers and no network to fetch them): one warning names what is
      missing and how to install it, and compiling goes on without the library;
    * **the build fails** (a compile error in `c_src/`): an error when `CI=true`, when
      `KINO_TRACE_NATIVE=required`, or when kino_trace is the project being compiled
      (its own repository); as a dependency elsewhere, a warning, and compiling goes on.

  A build that went without the library leaves `priv/kino_trace_nif.skipped`, whose
  text is why (the tracer's `load_error/0` tells it), and is not tried again until the
  sources, the arguments, `KINO_TRACE_NATIVE` or the build tools found on `PATH`
  change (see `skip_stamp/3`), or `--force` is given.

  With `MIX_ENV=bench` it also builds the benchmark's floor tracer
  (`kino_trace_floor_tracer`, see `bench/`). With `MIX_ENV=test` the library can make
  its allocations fail on demand (`KINO_TRACE_FAULT_INJECTION`, for the tests).

  Environment:
    * `KINO_TRACE_CMAKE_ARGS` - extra arguments for the CMake configure step
    * `CI=true` - builds with `-Werror` (`/WX`), and a failing build is an error
    * `KINO_TRACE_NATIVE` - `auto` (the default, as above), `required` (anything that
      keeps the native tracer from building is an error) or `off` (do not build it)
  """
  use Mix.Task.Compiler

  @lib "kino_trace_nif"
  @bench_libs ["kino_trace_floor_tracer"]

  @impl true
  def run(args) do
    root = project_root()
    targets = Enum.map(libs(), &Path.join(priv_dir(), &1 <> lib_suffix()))
    sources = sources(root)
    cmake_args = configure_args(priv_dir(), System.get_env("KINO_TRACE_CMAKE_ARGS", ""))
    force? = "--force" in args

    cond do
      native_setting() == "off" ->
        skip(
          targets,
          cmake_args,
          "KINO_TRACE_NATIVE=off was set when kino_trace was compiled",
          nil
        )

      force? ->
        outcome(build(root, targets, cmake_args), targets, cmake_args)

      not reconfigure?(build_dir(), cmake_args) and Enum.all?(targets, &up_to_date?(&1, sources)) ->
        {:noop, []}

      skipped?(skip_stamp(cmake_args, native_setting(), toolchain()), sources) ->
        {:noop, []}

      true ->
        outcome(build(root, targets, cmake_args), targets, cmake_args)
    end
  end

  @impl true
  def clean do
    File.rm_rf!(build_dir())
    Enum.each([@lib | @bench_libs], &File.rm(Path.join(priv_dir(), &1 <> lib_suffix())))
    File.rm(skip_marker())
    :ok
  end

  defp libs, do: if(Mix.env() == :bench, do: [@lib | @bench_libs], else: [@lib])

  @doc "The file name suffix of a NIF library here: `.dll` on Windows, else `.so` (macOS too)."
  @spec lib_suffix() :: String.t()
  def lib_suffix, do: if(match?({:win32, _}, :os.type()), do: ".dll", else: ".so")

  defp project_root, do: Path.expand("..", __DIR__)
  defp priv_dir, do: Path.join(Mix.Project.app_path(), "priv")
  defp build_dir, do: Path.join(Mix.Project.build_path(), "kino_trace_cmake")
  defp skip_marker, do: Path.join(priv_dir(), @lib <> ".skipped")
  defp skip_stamp, do: Path.join(build_dir(), "kino_trace_skipped_args")
  defp missing_file(build_dir), do: Path.join(build_dir, "kino_trace_missing.txt")

  defp native_setting, do: System.get_env("KINO_TRACE_NATIVE", "auto")

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

  # The last build went without the library, on this stamp (skip_stamp/3), and no
  # source changed.
  defp skipped?(stamp, sources) do
    File.read(skip_stamp()) == {:ok, stamp} and File.exists?(skip_marker()) and
      up_to_date?(skip_stamp(), sources)
  end

  @doc """
  What a build that went without the library was decided on, as the text kept beside
  it: the CMake arguments, the setting of `KINO_TRACE_NATIVE` and the toolchain found
  (`toolchain/1`). The decision holds while all three stay the same: compiling after
  `KINO_TRACE_NATIVE=off` is unset builds the library, and so does compiling once CMake
  or a compiler is installed (issue 39 item 2).
  """
  @spec skip_stamp([String.t()], String.t(), String.t()) :: String.t()
  def skip_stamp(args, setting, toolchain) do
    stamp(args) <> "KINO_TRACE_NATIVE=" <> setting <> "\n" <> toolchain
  end

  @doc """
  The build tools on `path` (a `PATH`), as text: where each of CMake, make, Ninja and
  the C++ compilers is and when it was installed (or that it is not there), and the
  variables that choose a compiler or where CMake looks (`CXX`, `CC`,
  `CMAKE_PREFIX_PATH`). Installing or upgrading one of them changes it.
  """
  @spec toolchain(String.t() | nil) :: String.t()
  def toolchain(path \\ System.get_env("PATH")) do
    dirs = String.split(path || "", path_separator(), trim: true)

    tools =
      for tool <- ~w(cmake make gmake ninja nmake c++ g++ clang++ cl) do
        "#{tool}: " <> (Enum.find_value(dirs, &installed(Path.join(&1, tool))) || "none") <> "\n"
      end

    vars = for var <- ~w(CXX CC CMAKE_PREFIX_PATH), do: "#{var}=#{System.get_env(var, "")}\n"
    IO.iodata_to_binary([tools, vars])
  end

  defp path_separator, do: if(match?({:win32, _}, :os.type()), do: ";", else: ":")

  # "path mtime" of an executable file at `path` (or `path.exe`), else nil
  defp installed(path) do
    Enum.find_value([path, path <> ".exe"], fn candidate ->
      case File.stat(candidate, time: :posix) do
        {:ok, %{type: :regular, mtime: mtime}} -> "#{candidate} #{mtime}"
        _ -> nil
      end
    end)
  end

  @doc """
  The CMake configure arguments for a NIF built into `output_dir`, followed by `extra`
  (a string of shell-like words, as in `KINO_TRACE_CMAKE_ARGS`).
  """
  @spec configure_args(Path.t(), String.t()) :: [String.t()]
  def configure_args(output_dir, extra) do
    erts_include =
      Path.join([:code.root_dir(), "erts-#{:erlang.system_info(:version)}", "include"])

    werror = if ci?(), do: "ON", else: "OFF"

    [
      "-DCMAKE_BUILD_TYPE=Release",
      "-DKINO_TRACE_ERTS_INCLUDE=#{erts_include}",
      "-DKINO_TRACE_NIF_OUTPUT=#{output_dir}",
      "-DKINO_TRACE_WERROR=#{werror}",
      "-DKINO_TRACE_TESTS=OFF",
      # the tests make allocations fail (test/kino_trace/tracer/alloc_faults_test.exs)
      "-DKINO_TRACE_FAULT_INJECTION=#{if Mix.env() == :test, do: "ON", else: "OFF"}"
    ] ++ OptionParser.split(extra)
  end

  defp ci?, do: System.get_env("CI") in ["true", "1"]

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
    case configure(root, build_dir, args) do
      :ok -> :ok
      {:missing, items} -> Mix.raise("kino_trace: missing #{Enum.join(items, ", ")}")
      {:failed, message} -> Mix.raise(message)
    end
  end

  # :ok, {:missing, what} or {:failed, message}
  defp configure(root, build_dir, args) do
    if reconfigure?(build_dir, args), do: File.rm_rf!(build_dir)
    File.mkdir_p!(build_dir)
    missing = missing_file(build_dir)
    File.rm(missing)

    case cmd("cmake", ["-S", root, "-B", build_dir, "-DKINO_TRACE_MISSING_FILE=#{missing}" | args]) do
      :ok ->
        case File.read(missing) do
          {:ok, text} ->
            {:missing, String.split(text, "\n", trim: true)}

          {:error, _} ->
            File.write!(stamp_path(build_dir), stamp(args))
            :ok
        end

      {:error, :enoent} ->
        {:missing, ["CMake 3.18 or newer (no cmake on PATH)"]}

      {:error, {status, out}} ->
        configure_failure(out, status, args)
    end
  end

  # A configure that stopped: an environment it cannot use (an old CMake, a pinned
  # archive it could not download) is something missing; anything else a failure.
  defp configure_failure(out, status, args) do
    cond do
      out =~ ~r/CMAKE_MAKE_PROGRAM is not set|unable to find a build program/ ->
        {:missing, ["a build tool for CMake (make, or Ninja with KINO_TRACE_CMAKE_ARGS=-GNinja)"]}

      out =~ ~r/No CMAKE_CXX_COMPILER could be found|CMAKE_CXX_COMPILER not set/ ->
        {:missing, ["a C++17 compiler (g++, clang++ or MSVC)"]}

      out =~ ~r/CMake 3\.\d+ or higher is required/ ->
        {:missing, ["CMake 3.18 or newer (#{cmake_version()} is too old)"]}

      download = Regex.run(~r/kino_trace: no system (.+?); using (\S+)/, out) ->
        [_, what, url] = download

        {:missing,
         ["#{what} (none installed, and #{url} could not be fetched: #{last_error(out)})"]}

      true ->
        {:failed,
         "kino_trace: `cmake` configure failed (exit #{status}) with #{Enum.join(args, " ")}:\n#{out}"}
    end
  end

  defp cmake_version do
    case System.cmd("cmake", ["--version"], stderr_to_stdout: true) do
      {out, 0} -> out |> String.split("\n") |> hd()
      _ -> "this cmake"
    end
  rescue
    _ -> "this cmake"
  end

  defp last_error(out) do
    out
    |> String.split("\n", trim: true)
    |> Enum.filter(&(&1 =~ ~r/error|fail|could not|couldn't|timed out|resolve/i))
    |> List.last("see CMake's output")
    |> String.trim()
  end

  defp stamp_path(build_dir), do: Path.join(build_dir, "kino_trace_configure_args")
  defp stamp(args), do: Enum.map_join(args, &(&1 <> "\n"))

  defp build(root, targets, args), do: build(root, build_dir(), targets, args)

  @doc """
  Configures (when `args` changed) and builds the libraries `targets` (full paths, in
  the directory `args` name as `KINO_TRACE_NIF_OUTPUT`) of `root` in `build_dir`.
  Returns `:ok`, `{:missing, what}` or `{:failed, message}`.

  A build takes a while (about 20 s on two cores, longer on a busy machine) and runs
  inside `mix compile` or `Mix.install/2`, where nothing else is printed meanwhile. So
  it says what it builds and how long that takes, then each step as CMake reaches it
  (configuring, each C++ file compiled, linking), and how long it took, on
  `Mix.shell/0`.
  """
  @spec build(Path.t(), Path.t(), [Path.t()], [String.t()]) ::
          :ok | {:missing, [String.t()]} | {:failed, String.t()}
  def build(root, build_dir, [target | _] = targets, args) do
    File.mkdir_p!(Path.dirname(target))
    started = System.monotonic_time(:millisecond)

    if System.find_executable("cmake") do
      Mix.shell().info(
        "==> kino_trace: building its native tracer (a C++ NIF, with CMake); " <>
          "this takes about half a minute, once (until kino_trace or OTP changes)"
      )
    end

    with :ok <- step("configuring (CMake)", fn -> configure(root, build_dir, args) end),
         :ok <- compile(build_dir, targets) do
      seconds = (System.monotonic_time(:millisecond) - started) / 1000
      names = Enum.map_join(targets, ", ", &Path.basename/1)

      Mix.shell().info(
        "==> kino_trace: native tracer built in #{:erlang.float_to_binary(seconds, decimals: 1)} s (#{names})"
      )

      :ok
    end
  end

  # (no cmake: nothing to say, the warning of what is missing follows)
  defp step(what, fun) do
    if System.find_executable("cmake"), do: Mix.shell().info("kino_trace:   " <> what)
    fun.()
  end

  # `cmake --build` runs whatever the generator is (make, Ninja, MSBuild...); `--config`
  # picks the configuration of a multi-config one (Visual Studio, Xcode).
  defp compile(build_dir, targets) do
    cmake_targets = Enum.map(targets, &Path.basename(&1, lib_suffix()))
    jobs = "#{System.schedulers_online()}"

    build_args = [
      "--build",
      build_dir,
      "--config",
      "Release",
      "--parallel",
      jobs,
      "--target" | cmake_targets
    ]

    case cmd("cmake", build_args, progress: true) do
      :ok ->
        case Enum.reject(targets, &File.exists?/1) do
          [] ->
            # CMake only relinks when objects change; touch so the mtime check above holds.
            Enum.each(targets, &File.touch!/1)
            :ok

          absent ->
            {:failed,
             "kino_trace: CMake finished but #{Enum.join(absent, ", ")} was not produced"}
        end

      {:error, :enoent} ->
        {:missing, ["CMake 3.18 or newer (no cmake on PATH)"]}

      {:error, {status, out}} ->
        {:failed,
         "kino_trace: building the native tracer failed (`cmake --build`, exit #{status}):\n#{out}"}
    end
  end

  defp cmd(exe, args, opts \\ []) do
    case System.find_executable(exe) do
      nil ->
        {:error, :enoent}

      path ->
        run =
          if opts[:progress],
            do: &__MODULE__.Progress.cmd/2,
            else: &System.cmd(&1, &2, stderr_to_stdout: true)

        case run.(path, args) do
          {_out, 0} -> :ok
          {out, status} -> {:error, {status, out}}
        end
    end
  end

  # --- without the native tracer -----------------------------------------------------

  defp outcome(:ok, _targets, _args) do
    File.rm(skip_marker())
    File.rm(skip_stamp())
    {:ok, []}
  end

  defp outcome({:missing, items}, targets, args) do
    if native_setting() == "required" do
      Mix.raise(
        "kino_trace: the native tracer cannot be built (KINO_TRACE_NATIVE=required): missing #{Enum.join(items, ", ")}"
      )
    end

    skip(targets, args, "missing #{Enum.join(items, "; ")}", install_hint())
  end

  defp outcome({:failed, message}, targets, args) do
    if ci?() or native_setting() == "required" or own_project?() do
      Mix.raise(message)
    end

    skip(
      targets,
      args,
      "its build failed (compiling kino_trace printed why)",
      failed_hint(message)
    )
  end

  # kino_trace compiled as itself (its repository), not as another project's dependency.
  defp own_project?, do: not Keyword.has_key?(Mix.Project.config(), :deps_app_path)

  # No library: a stale one would be older than the sources, so it goes. The marker
  # tells the tracer why it has no library, and the warning tells the user, once: on
  # Mix's shell, standard output, as the build's progress, since Livebook shows a cell's
  # standard output and not its standard error (IO.warn's), which goes to the terminal
  # Livebook runs in (issue 39 item 13).
  defp skip(targets, args, why, hint) do
    Enum.each(targets, &File.rm/1)
    File.mkdir_p!(priv_dir())
    File.write!(skip_marker(), "the native tracer was not built: #{why}")
    File.mkdir_p!(build_dir())
    File.write!(skip_stamp(), skip_stamp(args, native_setting(), toolchain()))

    if hint do
      message = warning(why, hint)
      Mix.shell().info([:yellow, "warning: " <> message, :reset])
      {:ok, [diagnostic(message)]}
    else
      {:ok, []}
    end
  end

  @doc false
  def warning(why, hint) do
    """
    kino_trace: its native tracer was not built: #{why}.
    kino_trace works without it, on its pure-Erlang tracer (kino_trace_fallback): every \
    feature is there, at a higher cost per traced event (see the README, "Without a C++ \
    toolchain"). #{hint}\
    """
  end

  defp install_hint do
    """
    To get the native tracer, install CMake (3.18+) and a C++17 compiler, then \
    recompile kino_trace (`mix deps.compile kino_trace --force`, or \
    `Mix.install(..., force: true)`); {fmt} is fetched if not installed:
      Debian/Ubuntu: sudo apt-get install cmake make g++ libfmt-dev libconcurrentqueue-dev
      macOS:         xcode-select --install && brew install cmake
      Windows:       winget install Kitware.CMake Microsoft.VisualStudio.2022.BuildTools \
    (with the "Desktop development with C++" workload)
    """
  end

  defp failed_hint(message) do
    """
    This is a bug of kino_trace's on this compiler or system: please report it with \
    the output below.
    #{message}
    """
  end

  defp diagnostic(message) do
    %Mix.Task.Compiler.Diagnostic{
      compiler_name: "kino_trace_nif",
      file: Path.join(project_root(), "CMakeLists.txt"),
      message: message,
      position: nil,
      severity: :warning
    }
  end
end
