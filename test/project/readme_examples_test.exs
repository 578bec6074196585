defmodule KinoTraceTest.Project.ReadmeExamplesTest do
  # Every Elixir example of README.md, of the guides (guides/*.md) and of the
  # getting-started notebook runs as written (see
  # KinoTraceTest.DocExamples), against the app of test/support/readme_app.exs (MyApp.*,
  # running under MyApp.Sup): the documents cannot drift from the code.
  #
  # Each example of the README and of a Markdown guide is a test of its own, in a fresh
  # process (`Mix.install` left out).
  # The notebook's cells run in order in one process, as Livebook runs them. What an IEx
  # example shows after an expression is checked against its value or the console output
  # (times, pids and durations may differ; `...` stands for anything). An ExUnit module
  # is compiled and its tests run. An example that cannot run here is listed in @skip
  # below with the reason, and shows as a skipped test with it.
  #
  # Tracing with `pids: :all` sees every process: no other test runs meanwhile.
  use ExUnit.Case, async: false

  import KinoTraceTest.Helpers, only: [wait_until: 1, kino_sessions: 0]

  alias KinoTraceTest.DocExamples

  @moduletag timeout: 120_000

  @root Path.expand("../..", __DIR__)
  @notebook "guides/getting_started.livemd"
  # the README and every Markdown guide, each example on its own
  @markdown [
    "README.md"
    | for(
        path <- Path.wildcard(Path.join(@root, "guides/*.md")),
        do: Path.relative_to(path, @root)
      )
      |> Enum.sort()
  ]
  @documents @markdown ++ [@notebook]

  # Examples that cannot run in a test: a snippet of the example's code (it must match
  # exactly one example) => why. Say, an example that needs Kino, Livebook, the network
  # or other nodes:
  #
  #     @skip %{"Kino.Layout.tabs(" => "needs Kino, which this build does not have"}
  @skip %{
    "Kino.Trace.mermaid(small)" => "needs Kino (Kino.Mermaid), which this build does not have",
    ~s|Node.connect(:"app@prod-host")| =>
      "needs a running node to connect to (agent_test.exs traces real nodes that have nothing of kino_trace)",
    ~s|Node.connect(:"shop@10.0.0.12")| =>
      "needs a running node to connect to (as the README's example)",
    ~s|nodes: [:"app@host"], to: [path: "/var/tmp/repo.ktrace"| =>
      "needs a running node to trace (files_nodes_test.exs writes and fetches the files of real nodes)",
    ~s|nodes: [:"app@host"], events: 10_000| =>
      "needs a running node to record (record_nodes_test.exs records real nodes that have nothing of kino_trace)"
  }

  for document <- @documents, do: @external_resource(Path.join(@root, document))

  examples = fn document ->
    DocExamples.blocks(File.read!(Path.join(@root, document)), document)
  end

  # {:run, block} or {:skip, reason, block}
  plan = fn block ->
    case Enum.filter(@skip, fn {snippet, _} -> String.contains?(block.code, snippet) end) do
      [{_snippet, reason}] ->
        {:skip, reason, block}

      [] ->
        case DocExamples.auto_skip(block) do
          :run -> {:run, block}
          {:skip, reason} -> {:skip, reason, block}
        end

      several ->
        raise "#{block.file}:#{block.line} matches several @skip entries: #{inspect(Enum.map(several, &elem(&1, 0)))}"
    end
  end

  # The file, line and first line of code (not a comment) of an example.
  name = fn block ->
    first =
      block.code
      |> String.split("\n")
      |> Enum.map(&String.trim/1)
      |> Enum.find("", &(&1 != "" and not String.starts_with?(&1, "#")))

    "#{block.file}:#{block.line} #{first |> String.replace(~r/\s+/, " ") |> String.slice(0, 60)}"
  end

  # The app exists only while these tests run (other tests count on MyApp.* not
  # existing): it is compiled here, and afterwards every module compiled meanwhile (the
  # app's and the examples') is unloaded.
  setup_all do
    before = in_memory_modules()
    Code.compile_file(Path.join(@root, "test/support/readme_app.exs"))
    start_supervised!(MyApp.Sup)

    on_exit(fn ->
      for module <- in_memory_modules() -- before do
        :code.purge(module)
        :code.delete(module)
      end
    end)
  end

  defp in_memory_modules, do: for({module, []} <- :code.all_loaded(), do: module)

  # Runs the examples; once their process has exited, none of their traces is left.
  defp run!(blocks) do
    case DocExamples.run(blocks) do
      :ok -> :ok
      {:error, message} -> flunk(message)
    end

    wait_until(fn ->
      kino_sessions() == [] and
        DynamicSupervisor.count_children(KinoTrace.SessionSupervisor).active == 0
    end)
  end

  # README.md and the Markdown guides: each example on its own.
  for document <- @markdown, block <- examples.(document) do
    with {:skip, reason, _} <- plan.(block), do: @tag(skip: reason)

    test name.(block) do
      run!([unquote(Macro.escape(block))])
    end
  end

  # The notebook: its cells in order, in one process.
  notebook = Enum.map(examples.(@notebook), plan)

  @notebook_cells for {:run, block} <- notebook, do: block

  test "guides/getting_started.livemd runs cell by cell" do
    assert length(@notebook_cells) > 5
    run!(@notebook_cells)
  end

  for {:skip, reason, block} <- notebook do
    @tag skip: reason
    test name.(block), do: :ok
  end

  test "every guide is run: the Markdown guides and the notebook are all the guides" do
    guides =
      for path <- Path.wildcard(Path.join(@root, "guides/*")), do: Path.relative_to(path, @root)

    assert Enum.sort(guides) == Enum.sort(tl(@markdown) ++ [@notebook])
    assert length(@markdown) > 5
  end

  test "every example is found: each ```elixir fence is one example" do
    for document <- @documents do
      text = File.read!(Path.join(@root, document))
      fences = Regex.scan(~r/^\s*```\s*elixir/m, text) |> length()

      assert length(DocExamples.blocks(text, document)) == fences,
             "#{document} has an elixir fence the examples test does not see (indented, or with a space?)"
    end
  end

  test "each @skip entry matches exactly one example" do
    blocks = Enum.flat_map(@documents, &DocExamples.blocks(File.read!(Path.join(@root, &1)), &1))

    for {snippet, _reason} <- @skip do
      matching = Enum.filter(blocks, &String.contains?(&1.code, snippet))

      assert length(matching) == 1,
             "@skip #{inspect(snippet)} matches #{length(matching)} examples"
    end
  end
end
