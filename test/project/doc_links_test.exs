defmodule KinoTraceTest.Project.DocLinksTest do
  # No public doc links to a hidden module: HexDocs shows the docs of the public modules
  # (test/project/structure_test.exs lists them) and the extras of mix.exs (the guides), and ExDoc
  # turns `Module`, `Module.fun/2`, `t:Module.type/0` and `:erlang_module` in backticks
  # into links. A link to a module that is `@moduledoc false` (every KinoTrace.* one, the
  # Erlang modules of src/) leads nowhere. The docs are read from the sources, so the Kino
  # adapters, which are not compiled here, are read too.
  use ExUnit.Case, async: true

  @root Path.expand("../..", __DIR__)

  # The modules HexDocs shows.
  defp public_modules do
    for path <- Path.wildcard(Path.join(@root, "lib/kino/**/*.ex")),
        {name, doc} <- moduledocs(File.read!(path)),
        doc != false,
        into: MapSet.new(),
        do: name
  end

  # Every module kino_trace defines: lib/ (compiled here or not) and src/.
  defp own_modules do
    elixir =
      for path <- Path.wildcard(Path.join(@root, "lib/**/*.ex")),
          [_, name] <- Regex.scan(~r/^\s*defmodule ([\w.]+) do/m, File.read!(path)),
          do: name

    erlang =
      for path <- Path.wildcard(Path.join(@root, "src/*.erl")),
          do: ":" <> Path.basename(path, ".erl")

    MapSet.new(elixir ++ erlang)
  end

  # {module name, its @moduledoc (a string, or false)} of each module of a source file.
  defp moduledocs(source) do
    {_, found} =
      source
      |> Code.string_to_quoted!()
      |> Macro.prewalk([], fn
        {:defmodule, _, [{:__aliases__, _, parts}, [do: body]]} = node, acc ->
          {node, [{Enum.map_join(parts, ".", &Atom.to_string/1), moduledoc(body)} | acc]}

        node, acc ->
          {node, acc}
      end)

    found
  end

  defp moduledoc(body) do
    body
    |> block()
    |> Enum.find_value(:none, fn
      {:@, _, [{:moduledoc, _, [value]}]} -> text(value)
      _ -> nil
    end)
  end

  defp block({:__block__, _, exprs}), do: exprs
  defp block(expr), do: [expr]

  # The text of a doc attribute's value: a string, a ~S/~s heredoc, or false.
  defp text(false), do: false
  defp text(string) when is_binary(string), do: string

  defp text({sigil, _, [{:<<>>, _, parts}, _]}) when sigil in [:sigil_S, :sigil_s],
    do: Enum.filter(parts, &is_binary/1) |> Enum.join()

  defp text({:<<>>, _, parts}), do: parts |> Enum.filter(&is_binary/1) |> Enum.join()
  defp text(_), do: ""

  # Every doc text of the public modules of a source file: @moduledoc, @doc and @typedoc
  # (of a module nested in another, its own module's).
  defp doc_texts(source, public), do: source |> Code.string_to_quoted!() |> walk(nil, public)

  defp walk({:defmodule, _, [{:__aliases__, _, parts}, [do: body]]}, _module, public),
    do: walk(body, Enum.map_join(parts, ".", &Atom.to_string/1), public)

  defp walk({:@, _, [{attr, _, [value]}]}, module, public)
       when attr in [:moduledoc, :doc, :typedoc] do
    text = text(value)
    if is_binary(text) and MapSet.member?(public, module), do: [text], else: []
  end

  defp walk({left, _, right}, module, public),
    do: walk(left, module, public) ++ walk(right, module, public)

  defp walk({left, right}, module, public),
    do: walk(left, module, public) ++ walk(right, module, public)

  defp walk(list, module, public) when is_list(list),
    do: Enum.flat_map(list, &walk(&1, module, public))

  defp walk(_leaf, _module, _public), do: []

  # The modules a text links to, as ExDoc autolinks them: backticked `Mod`,
  # `Mod.fun/2`, `t:Mod.t/0`, `c:Mod.cb/1`, `m:Mod`, `:mod`, `:mod.fun/2`.
  @doc false
  def linked_modules(text) do
    for [_, code] <- Regex.scan(~r/`([^`\n]+)`/, text),
        module = linked_module(String.trim(code)),
        module != nil,
        uniq: true,
        do: module
  end

  defp linked_module(code) do
    code = String.replace(code, ~r/^[mtc]:/, "")

    cond do
      match = Regex.run(~r/^([A-Z]\w*(?:\.[A-Z]\w*)*)(?:\.[a-z_]\w*[?!]?\/\d+)?$/, code) ->
        Enum.at(match, 1)

      match = Regex.run(~r/^(:[a-z]\w*)(?:\.[a-z_]\w*\/\d+)?$/, code) ->
        Enum.at(match, 1)

      true ->
        nil
    end
  end

  defp hidden_links(file, text, public, own) do
    for module <- linked_modules(text),
        MapSet.member?(own, module),
        not MapSet.member?(public, module),
        do: "#{file}: `#{module}`"
  end

  test "the link finder sees ExDoc's autolink forms" do
    text =
      "See `KinoTrace.Pattern`, `KinoTrace.Complete.complete/2`, `t:KinoTrace.Options.schema/0`, `:kino_trace_agent`, `m:Kino.Trace`; not `x = 1` or `Enum.map(list, f)`."

    assert linked_modules(text) ==
             [
               "KinoTrace.Pattern",
               "KinoTrace.Complete",
               "KinoTrace.Options",
               ":kino_trace_agent",
               "Kino.Trace"
             ]
  end

  test "the public modules' docs link to no hidden module" do
    public = public_modules()
    own = own_modules()
    assert MapSet.member?(public, "Kino.Trace") and MapSet.member?(own, "KinoTrace.Pattern")

    hidden =
      for path <- Path.wildcard(Path.join(@root, "lib/kino/**/*.ex")),
          text <- doc_texts(File.read!(path), public),
          link <- hidden_links(Path.relative_to(path, @root), text, public, own),
          do: link

    assert hidden == [], "public docs link to hidden modules:\n" <> Enum.join(hidden, "\n")
  end

  # (README.md is not among them: HexDocs opens on the getting-started guide.)
  test "the guides link to no hidden module" do
    public = public_modules()
    own = own_modules()
    extras = for extra <- Mix.Project.config()[:docs][:extras], do: to_string(extra)
    assert "guides/getting_started.livemd" in extras

    hidden =
      for file <- extras,
          link <- hidden_links(file, File.read!(Path.join(@root, file)), public, own),
          do: link

    assert hidden == [], "documents link to hidden modules:\n" <> Enum.join(hidden, "\n")
  end
end
