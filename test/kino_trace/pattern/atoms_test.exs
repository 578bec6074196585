defmodule KinoTrace.Pattern.AtomsTest do
  # Text typed into kino_trace never creates atoms: atoms are never freed, and a full
  # atom table aborts the VM. Every entry point gets random lines full of names that
  # are not atoms, and the VM's atom count must not move.
  #
  # async: false: the atom count is global, and tests running alongside (loading
  # modules, compiling) would move it.
  use ExUnit.Case, async: false

  @moduletag :slow

  alias KinoTrace.Pattern
  alias KinoTrace.Base.Name
  alias KinoTrace.Pattern.Quoted
  alias KinoTrace.Widget.Controller

  doctest KinoTrace.Base.Name
  doctest KinoTrace.Pattern.Quoted

  @moduletag timeout: 900_000

  # Lines per entry point (9 of them): 112 500 in all in CI (CI=true, set by .ci/run;
  # several minutes), 11 250 otherwise (a minute or two); KINO_TRACE_ATOM_LINES sets it.
  @lines_per_entry String.to_integer(
                     System.get_env(
                       "KINO_TRACE_ATOM_LINES",
                       if(System.get_env("CI"), do: "12500", else: "1250")
                     )
                   )

  # Atoms a first use may make once (a module loaded on the way, a cached name).
  @slack 5

  defp atom_count, do: :erlang.system_info(:atom_count)

  # Runs `fun` and returns how many atoms the VM gained meanwhile.
  defp atoms_made(fun) do
    before = atom_count()
    fun.()
    atom_count() - before
  end

  defp existing?(text), do: Name.existing(text) != nil

  ## Random pattern lines

  # Every call gives names never seen before in this VM: any atom made from them
  # shows in the count.
  defp fresh(prefix) do
    name = "#{prefix}k#{System.unique_integer([:positive])}q#{:rand.uniform(1_000_000)}"
    refute existing?(name)
    name
  end

  defp var, do: fresh("v")

  # A fresh name of at most 10 characters.
  defp fresh_short(prefix) do
    name = prefix <> "q" <> Integer.to_string(:rand.uniform(36 ** 8), 36)
    if existing?(name), do: fresh_short(prefix), else: name
  end

  defp alias_name, do: fresh("Zk")
  defp fun_name, do: fresh("f")

  defp line do
    v = var()
    w = var()

    case :rand.uniform(26) do
      1 -> "#{alias_name()}.#{alias_name()}"
      2 -> alias_name()
      3 -> ":#{fresh("zz")}"
      4 -> "Enum.#{fun_name()}/2"
      5 -> "#{alias_name()}.#{fun_name()}/#{:rand.uniform(4)}"
      6 -> ":ets.#{fun_name()}"
      7 -> "Map.get(#{v}, #{w}) when is_map(#{v}) and map_size(#{v}) > #{:rand.uniform(9)}"
      8 -> "Enum.map(#{v}, _) when length(#{v}) > #{:rand.uniform(100)} or #{v} == []"
      9 -> "Map.get(_, :#{fresh("na")})"
      10 -> "Map.get(_, :\"#{fresh("q ")} #{fresh("r")}\")"
      11 -> "Map.get(%{#{fresh("k")}: #{v}}, #{w})"
      12 -> "Map.get(%#{alias_name()}{#{fresh("k")}: _}, _)"
      13 -> "Map.get(#{v}, ~w(#{fresh("s")} #{fresh("t")})a)"
      14 -> "Map.get(#{v}, _) when #{fun_name()}(#{v}) or #{alias_name()}.#{fun_name()}(#{v})"
      15 -> "Map.get(#{v}, _) when #{v}.#{fresh("field")} > 1"
      16 -> "Map.get(\"#{fresh("s")}\", ~#{sigil()}(#{fresh("x")}))"
      17 -> "Map.get(\"\#{#{v}}\", :\"#{fresh("a")}\#{#{w}}\")"
      18 -> "&#{alias_name()}.#{fun_name()}/1"
      19 -> "Enum.\"#{fresh("f ")}\"/1"
      20 -> ":\"Elixir.#{alias_name()}\".#{fun_name()}/0"
      21 -> "{:ok, #{v}} when #{v} > #{w}"
      22 -> "{:\"$gen_call\", _, {:#{fresh("get")}, #{v}}}"
      23 -> "#{fresh("mod")}.#{fun_name()}/1"
      24 -> long_line(v)
      25 -> "Map.get([#{fresh("kw")}: #{v}], #{alias_name()}.#{alias_name()}.#{fun_name()}(#{w}))"
      26 -> syntax_error()
    end
  end

  defp sigil, do: for(_ <- 1..3, into: "", do: <<?A + :rand.uniform(26) - 1>>)

  # Long: many new names, and for the widget more bytes than a line may have.
  defp long_line(v) do
    count = Enum.random([20, 300])
    names = Enum.map_join(1..count, ", ", fn _ -> var() end)
    "Map.get({#{v}, #{names}}, _) when #{v} > 0"
  end

  # A line cut short, or with a stray token: the tokenizer stops half-way.
  defp syntax_error do
    case :rand.uniform(4) do
      1 -> "Map.get(#{var()}, "
      2 -> "#{alias_name()}.#{fun_name()}(#{var()}, :#{fresh("a")} :#{fresh("b")})"
      3 -> "Map.get(#{var()}) when #{var()} >"
      4 -> "%{#{fresh("k")}: #{var()}"
    end
  end

  defp lines(n), do: for(_ <- 1..n, do: line())

  ## Entry points: each takes lines and feeds them in

  # A process whose calls and messages are traced: it does nothing, so the traces
  # the valid lines start stay quiet.
  defp idle do
    pid = spawn(fn -> Process.sleep(:infinity) end)
    on_exit(fn -> Process.exit(pid, :kill) end)
    pid
  end

  defp feed(:parse, lines, _ctx), do: Enum.each(lines, &Pattern.parse/1)

  defp feed(:parse_each, lines, _ctx) do
    for chunk <- Enum.chunk_every(lines, 500) do
      assert length(Pattern.parse_each(chunk)) == length(chunk)
    end
  end

  defp feed(:parse_all!, lines, _ctx) do
    for chunk <- Enum.chunk_every(lines, 500) do
      assert_raise ArgumentError, fn -> Pattern.parse_all!(chunk) end
    end
  end

  defp feed(:calls, lines, ctx) do
    for chunk <- Enum.chunk_every(lines, 500) do
      assert_raise ArgumentError, fn -> Kino.Trace.calls(chunk, pids: ctx.idle) end
    end
  end

  defp feed(:set_patterns, lines, ctx) do
    for chunk <- Enum.chunk_every(lines, 500) do
      assert length(Kino.Trace.set_patterns(ctx.trace, chunk)) == length(chunk)
    end
  end

  # As the browser sends them: lines longer than an event allows go alone (and are
  # refused without being parsed), the others in events of 100.
  defp feed(:widget, lines, ctx) do
    {long, short} = Enum.split_with(lines, &(byte_size(&1) > 4096))

    for event <- Enum.chunk_every(short, 100) ++ Enum.map(long, &[&1]) do
      {[{_kind, "patterns", payload}], _controller} =
        Controller.handle_event(ctx.controller, "set_patterns", %{"patterns" => event})

      assert length(payload.results) == length(event) or payload.error
    end
  end

  defp feed(:messages, lines, ctx) do
    for line <- lines do
      try do
        ctx.idle |> Kino.Trace.messages(pattern: line) |> Kino.Trace.stop()
      rescue
        ArgumentError -> :ok
      end
    end
  end

  defp feed(:stats, lines, ctx) do
    for chunk <- Enum.chunk_every(lines, 500) do
      assert_raise ArgumentError, fn -> Kino.Trace.stats(chunk, pids: ctx.idle) end
    end
  end

  # Completion as the widget asks for it: each line, and each line cut short where a
  # cursor could be.
  defp feed(:complete, lines, ctx) do
    for line <- lines, text <- [line, String.slice(line, 0, div(String.length(line), 2))] do
      {[{:reply, "completions", %{items: items}}], _controller} =
        Controller.handle_event(ctx.controller, "complete", %{"text" => text, "seq" => 1})

      assert is_list(items)
    end
  end

  @entry_points [
    :complete,
    :parse,
    :parse_each,
    :parse_all!,
    :calls,
    :set_patterns,
    :widget,
    :messages,
    :stats
  ]

  describe "random lines leave the atom count unchanged" do
    setup do
      idle = idle()
      trace = Kino.Trace.calls(["Enum.map/2"], pids: idle)
      {controller, _effects} = Controller.init(trace, lifeline: false)
      on_exit(fn -> Kino.Trace.stop(trace) end)
      %{idle: idle, trace: trace, controller: controller}
    end

    for entry <- @entry_points do
      test "through #{entry}", ctx do
        # First uses load modules and fill caches: not part of the count.
        feed(unquote(entry), lines(300), ctx)

        lines = lines(@lines_per_entry)
        made = atoms_made(fn -> feed(unquote(entry), lines, ctx) end)

        assert made <= @slack,
               "#{@lines_per_entry} lines through #{unquote(entry)} made #{made} atoms"
      end
    end
  end

  ## What the names that are not atoms mean

  describe "names that are not atoms" do
    test "variables may have any name" do
      v = var()
      w = var()
      text = "Map.get(#{v}, #{w}) when is_map(#{v}) and #{w} != nil"

      assert atoms_made(fn ->
               assert {:ok, pattern} = Pattern.parse(text)
               assert pattern.head == [:"$1", :"$2"]
               assert Pattern.to_string(pattern) == text
               assert [{_, {:ok, _checked, []}}] = Pattern.parse_each([text])
             end) <= @slack

      refute existing?(v)
      refute existing?(w)
    end

    test "an unknown module is reported with a suggestion, and stays no atom" do
      wanted = "GenServer" <> fresh("")

      assert [{_, {:error, message}}] = Pattern.parse_each(["#{wanted}.call/2"])

      assert message == "unknown module #{wanted}; did you mean GenServer?" or
               message == "unknown module #{wanted}"

      assert [{_, {:error, "unknown module GenServerx; did you mean GenServer?"}}] =
               Pattern.parse_each(["GenServerx.call/2"])

      refute existing?("Elixir." <> wanted)
      refute existing?(wanted)
    end

    test "an unknown function is reported with a suggestion, and stays no atom" do
      name = "map" <> fresh("")
      assert [{_, {:error, message}}] = Pattern.parse_each(["Enum.#{name}/2"])
      assert message == "Enum.#{name}/2 is not a function" or message =~ "did you mean Enum."
      refute existing?(name)
      refute existing?("MACRO-" <> name)
    end

    test "a literal atom that does not exist is refused: no term can contain it" do
      atom = fresh("status")

      for text <- [
            "Map.get(_, :#{atom})",
            "Map.get(%{#{atom}: _}, _)",
            "Map.get(_, ~w(ok #{atom})a)",
            "Map.get(x, _) when x == :#{atom}",
            "Map.get(x, _) when x in [:ok, :#{atom}]"
          ] do
        assert {:error, message} = Pattern.parse(text)
        assert message =~ "unknown atom :#{atom}: no such atom exists yet"
      end

      assert {:error, message} = KinoTrace.Plan.MessagePattern.compile("{:#{atom}, _}", false)
      assert message =~ "invalid message pattern \"{:#{atom}, _}\": unknown atom :#{atom}"

      refute existing?(atom)
    end

    test "an alias that names no module is refused as a literal, and stays no atom" do
      name = alias_name()

      for text <- ["Map.get(%#{name}{}, _)", "Map.get(#{name}, _)"] do
        assert {:error, message} = Pattern.parse(text)
        assert message =~ "unknown module #{name}: no module or atom of that name exists yet"
      end

      refute existing?("Elixir." <> name)
    end

    test "messages name what they could not use, as written" do
      f = fun_name()
      a = alias_name()

      assert {:error, message} = Pattern.parse("Map.get(x, _) when #{a}.#{f}(x)")
      assert message =~ "#{a}.#{f}(x) cannot be used in a trace guard"

      assert {:error, message} = Pattern.parse("Map.get(x, _) when #{f}(x)")
      assert message =~ "#{f}/1 cannot be used in a trace guard"
      refute existing?(f)
    end

    test "too many new names in one pattern are refused" do
      # short names: the text stays within the bytes of a pattern (KinoTrace.Pattern.Edit)
      short = fn -> fresh_short("v") end
      names = Enum.map_join(1..257, ",", fn _ -> short.() end)

      assert {:error, "too many new names (257; at most 256 in one pattern)"} =
               Pattern.parse("Map.get({#{names}}, _)")
    end

    test "printing a quoted form with names writes them back as they were" do
      a = alias_name()
      f = fun_name()
      text = ~s|{:"a #{f}", %{"c #{f}": x}, #{a}.Bar.#{f}(y), :erlang.#{f}(), :#{f}, #{f}: 1}|
      names = for part <- ["a " <> f, "c " <> f, a, f], do: part
      assert {:ok, quoted} = Quoted.parse(text)
      assert Quoted.to_string(quoted) == text
      assert Enum.reject(names, &existing?/1) == names
      assert Quoted.to_string(quoted |> List.wrap() |> List.duplicate(20)) =~ ~r/^[^\n]+$/
    end
  end

  describe "a module on the code path that is not loaded" do
    setup do
      module = fresh("kt_on_path_")
      atom = fresh("kt_only_in_code_")
      dir = Path.join(System.tmp_dir!(), module)
      File.mkdir_p!(dir)
      source = Path.join(dir, module <> ".erl")

      File.write!(source, """
      -module(#{module}).
      -export([check/1]).
      check(#{atom}) -> ok;
      check(_) -> error.
      """)

      {_, 0} = System.cmd(System.find_executable("erlc"), ["-o", dir, source])
      Code.prepend_path(dir)

      on_exit(fn ->
        Code.delete_path(dir)
        File.rm_rf!(dir)
      end)

      %{module: module, atom: atom}
    end

    test "resolves, is loaded, and the atoms of its code can be matched", ctx do
      refute existing?(ctx.module)
      refute existing?(ctx.atom)

      assert [{_, {:ok, pattern, []}}] =
               Pattern.parse_each([":#{ctx.module}.check(:#{ctx.atom})"])

      assert Atom.to_string(pattern.module) == ctx.module
      assert pattern.function == :check
      assert [{[atom], [], []}] = Pattern.match_spec(pattern)
      assert Atom.to_string(atom) == ctx.atom
    end
  end
end
