defmodule KinoTraceTest.Project.DocCoverageTest do
  # Every public function and macro of the public modules has a doc with an example
  # that runs (an `iex>` doctest), and every public module with such examples is
  # doctested by some test. The Kino adapters (Kino.Trace.Widget, StatsWidget,
  # SmartCell) are not compiled here, so they are not checked; nor are the two
  # functions below, which render with Kino.
  use ExUnit.Case, async: true

  @need_kino [{Kino.Trace, :mermaid, 2}, {Kino.Trace.Mermaid, :render, 2}]

  defp public_modules do
    {:ok, modules} = :application.get_key(:kino_trace, :modules)

    for module <- modules,
        match?({:docs_v1, _, _, _, %{}, _, _}, Code.fetch_docs(module)),
        String.starts_with?(inspect(module), "Kino.Trace"),
        # test/support is compiled into the application in the test environment
        module.module_info(:compile)[:source] |> List.to_string() |> String.contains?("/lib/"),
        do: module
  end

  test "every documented public function has an iex> example" do
    missing =
      for module <- public_modules(),
          {:docs_v1, _, _, _, _, _, docs} = Code.fetch_docs(module),
          {{kind, name, arity}, _, _, doc, _} <- docs,
          kind in [:function, :macro],
          doc != :hidden,
          {module, name, arity} not in @need_kino,
          not (match?(%{"en" => text} when is_binary(text), doc) and doc["en"] =~ "iex>"),
          do: "#{inspect(module)}.#{name}/#{arity}"

    assert missing == [], "public functions with no iex> example:\n" <> Enum.join(missing, "\n")
  end

  test "every public module with iex> examples is doctested" do
    tests = for path <- Path.wildcard("test/**/*_test.exs"), do: File.read!(path)

    undoctested =
      for module <- public_modules(),
          {:docs_v1, _, _, _, moduledoc, _, docs} = Code.fetch_docs(module),
          texts = [moduledoc | Enum.map(docs, &elem(&1, 3))],
          Enum.any?(texts, &match?(%{"en" => "" <> _}, &1)) and
            Enum.any?(texts, &(is_map(&1) and is_binary(&1["en"]) and &1["en"] =~ "iex>")),
          not Enum.any?(
            tests,
            &(&1 =~ ~r/^\s*doctest #{Regex.escape(inspect(module))}(?:\s|,|$)/m)
          ),
          do: inspect(module)

    assert undoctested == []
  end
end
