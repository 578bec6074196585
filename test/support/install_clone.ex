defmodule KinoTraceTest.InstallClone do
  @moduledoc false
  # `Mix.install/1` of a clone of this repository in another VM, as a user's notebook or
  # script installs kino_trace: the tests of the NIF's build (what it does with no
  # toolchain, with KINO_TRACE_NATIVE) run it with a PATH and environment of their own.

  @root Path.expand("../..", __DIR__)
  @tools ~w(sh bash dirname readlink sed basename uname cat env tr grep head tail ls mkdir rm cp mv)

  @doc "The build tools none of which `bin_dir!/1`'s directory has."
  def compilers, do: ~w(cmake make ninja cc c++ gcc g++ clang clang++)

  @doc "Clones this repository into `dir`/kino_trace; returns the clone's path."
  def clone!(dir) do
    clone = Path.join(dir, "kino_trace")
    {_, 0} = System.cmd("git", ["clone", "--quiet", @root, clone], stderr_to_stdout: true)
    clone
  end

  @doc """
  Elixir's and OTP's executables and a few shell tools, as links in `dir`/bin: a PATH
  where none of `compilers/0` is.
  """
  def bin_dir!(dir) do
    bin = Path.join(dir, "bin")
    File.mkdir_p!(bin)
    erlang_bin = Path.join(:code.root_dir(), "bin")
    elixir_bin = System.find_executable("elixir") |> Path.dirname()

    for source_dir <- [elixir_bin, erlang_bin],
        file <- File.ls!(source_dir),
        not File.exists?(Path.join(bin, file)),
        do: File.ln_s!(Path.join(source_dir, file), Path.join(bin, file))

    for tool <- @tools,
        path = System.find_executable(tool),
        do: File.ln_s!(path, Path.join(bin, tool))

    for c <- compilers(), File.exists?(Path.join(bin, c)), do: raise("#{c} is in #{bin}")
    bin
  end

  @doc """
  Runs `script` (a file in `dir`) with the `elixir` found on `path`, with only `env`
  (and `PATH`, `HOME`, `MIX_INSTALL_DIR` under `dir`, `LANG`) set. Returns `{output, status}`.
  """
  def run(dir, script, path, env) do
    elixir =
      Enum.find_value(String.split(path, ":"), &System.find_executable(Path.join(&1, "elixir")))

    System.cmd(elixir, [script],
      cd: dir,
      stderr_to_stdout: true,
      env:
        Enum.map(System.get_env(), fn {k, _} -> {k, nil} end) ++
          [
            {"PATH", path},
            {"HOME", Path.join(dir, "home")},
            {"MIX_INSTALL_DIR", Path.join(dir, "mix_install")},
            {"LANG", "C.UTF-8"}
          ] ++ env
    )
  end

  @doc """
  Runs `mix args` in `project` with the `mix` found on `path`, the environment as in
  `run/4`. Returns `{output, status}`.
  """
  def mix(dir, project, args, path, env) do
    mix = Enum.find_value(String.split(path, ":"), &System.find_executable(Path.join(&1, "mix")))

    System.cmd(mix, args,
      cd: project,
      stderr_to_stdout: true,
      env:
        Enum.map(System.get_env(), fn {k, _} -> {k, nil} end) ++
          [{"PATH", path}, {"HOME", Path.join(dir, "home")}, {"LANG", "C.UTF-8"}] ++ env
    )
  end

  @doc "The value of the script's `RESULT name: value` line."
  def result(out, name) do
    case Regex.run(~r/^RESULT #{name}: (.*)$/m, out, capture: :all_but_first) do
      [value] -> value
      nil -> ExUnit.Assertions.flunk("no RESULT #{name} in:\n#{out}")
    end
  end
end
