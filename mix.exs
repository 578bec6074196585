# kino_trace needs OTP 27+: it runs every trace in its own isolated `:trace` session,
# a module added in OTP 27. Fail at once, before anything compiles, when it is older.
otp_release = String.to_integer(System.otp_release())

if otp_release < 27 do
  Mix.raise("""
  kino_trace needs Erlang/OTP 27 or newer, but this is OTP #{otp_release}.

  It runs each trace in its own isolated trace session (the `:trace` module, new in OTP 27),
  so several traces, :dbg and other tools can run at once without touching each other.
  Run `scripts/setup.sh` to build OTP 27 and Elixir 1.18, then `source scripts/env.sh`.
  """)
end

unless Version.match?(System.version(), ">= 1.17.0") do
  Mix.raise(
    "kino_trace needs Elixir 1.17 or newer (this is #{System.version()}); run scripts/setup.sh"
  )
end

Code.require_file("mix/compile.kino_trace_nif.ex", __DIR__)
Code.require_file("mix/kino_trace.limits.ex", __DIR__)

defmodule KinoTrace.MixProject do
  use Mix.Project

  @version "0.1.0"
  # The one place the repository's address is written (the project has no public remote
  # yet: set the real one before the first `mix hex.publish`).
  @source_url "https://github.com/kino-trace/kino_trace"

  def project do
    [
      app: :kino_trace,
      version: @version,
      elixir: "~> 1.17",
      start_permanent: Mix.env() == :prod,
      compilers: [:kino_trace_nif] ++ Mix.compilers(),
      deps: deps(),
      elixirc_paths: elixirc_paths(Mix.env()),
      erlc_paths: ["src"],
      description:
        "Live function-call tracing for the BEAM: a Livebook widget, a console printer and ExUnit assertions",
      source_url: @source_url,
      docs: docs(),
      package: package()
    ]
  end

  # What Hex ships: test/mix/package_test.exs builds exactly these files as a dependency,
  # native tracer and all, and checks nothing of test/, bench/ or _build is among them.
  def package do
    [
      licenses: ["Apache-2.0"],
      links: %{
        "GitHub" => @source_url,
        "Changelog" => "#{@source_url}/blob/main/CHANGELOG.md"
      },
      files: ~w(lib src mix c_src/core c_src/nif CMakeLists.txt mix.exs .formatter.exs
                README.md LICENSE CHANGELOG.md)
    ]
  end

  def application do
    [
      mod: {KinoTrace.Application, []},
      extra_applications: [:logger, :runtime_tools, :tools]
    ]
  end

  # HexDocs opens on the getting-started notebook, as the kino packages' docs do, and
  # lists the public modules only (every other one is `@moduledoc false`), the Kinos
  # together. test/project/structure_test.exs checks the list; doc_links_test.exs that
  # no doc links to a hidden module.
  defp docs do
    [
      main: "getting_started",
      source_ref: "v#{@version}",
      extras: [
        "guides/getting_started.livemd",
        "guides/livebook.md",
        "guides/tracing.md",
        "guides/patterns.md",
        "guides/options_and_limits.md",
        "guides/other_nodes.md",
        "guides/installation.md",
        "guides/testing_with_traces.md",
        "guides/trace_files.md",
        "guides/post_mortem.md",
        "CHANGELOG.md"
      ],
      groups_for_extras: [Guides: ~r{^guides/}],
      assets: %{"docs" => "docs"},
      groups_for_modules: [
        Tracing: [
          Kino.Trace,
          Kino.Trace.Event,
          Kino.Trace.Cut,
          Kino.Trace.Plan,
          Kino.Trace.Foreign,
          Kino.Trace.FileError
        ],
        Kinos: [Kino.Trace.Widget, Kino.Trace.StatsWidget, Kino.Trace.SmartCell],
        "Console and diagrams": [Kino.Trace.Printer, Kino.Trace.Mermaid],
        Statistics: [Kino.Trace.Stats, Kino.Trace.Stats.Snapshot, Kino.Trace.Stats.Row],
        ExUnit: [Kino.Trace.Capture, Kino.Trace.Assertions]
      ]
    ]
  end

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(:bench), do: ["lib", "bench/support"]
  defp elixirc_paths(_), do: ["lib"]

  # Kino is optional: the core, the console printer and the ExUnit assertions need no
  # Kino. It is declared only when Hex is loaded (real users have it), so the offline
  # build here, with no Hex and no registry, still works.
  defp deps do
    if Code.ensure_loaded?(Hex) do
      [{:kino, "~> 0.14", optional: true}]
    else
      []
    end
  end
end
