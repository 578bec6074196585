defmodule KinoTrace.CompleteTest do
  # Completion of pattern lines: from loaded modules, and from modules that are only
  # on the code path, compiled by `erlc` (another VM) so that none of their names is an
  # atom here: reading them must not make one.
  #
  # async: false: the atom count and the code path are global.
  use ExUnit.Case, async: false

  alias KinoTrace.Complete
  alias KinoTrace.Complete.Beam
  alias KinoTrace.Base.Name
  import Bitwise, only: [<<<: 2, >>>: 2]
  import KinoTraceTest.Helpers, only: [wait_until: 1]

  doctest KinoTrace.Complete
  doctest KinoTrace.Complete.Beam
  doctest KinoTrace.Complete.Modules
  doctest Kino.Trace, only: [complete: 2]

  @moduletag timeout: 300_000

  defp inserts(text), do: Enum.map(Complete.complete(text).items, & &1.insert)
  defp labels(text), do: Enum.map(Complete.complete(text).items, & &1.label)

  # A name no atom has in this VM.
  defp fresh(prefix) do
    name = (prefix <> Integer.to_string(:rand.uniform(1 <<< 62), 36)) |> String.downcase()
    assert Name.existing(name) == nil
    name
  end

  # Compiles Erlang source in a separate VM (erlc) into `dir`.
  defp erlc(dir, module, source, opts \\ []) do
    file = Path.join(dir, module <> ".erl")
    File.write!(file, source)
    {output, status} = System.cmd("erlc", opts ++ ["-o", dir, file], stderr_to_stdout: true)
    assert status == 0, output
    File.rm!(file)
    Path.join(dir, module <> ".beam")
  end

  defp module_source(module, functions) do
    exports = Enum.map_join(functions, ", ", fn {name, arity} -> "'#{name}'/#{arity}" end)

    bodies =
      Enum.map_join(functions, "\n", fn {name, arity} ->
        args = Enum.map_join(1..arity//1, ", ", &"A#{&1}")
        "'#{name}'(#{args}) -> ok."
      end)

    "-module('#{module}').\n-export([#{exports}]).\n#{bodies}\n"
  end

  defp with_code_path(dir) do
    true = :code.add_patha(String.to_charlist(dir))

    on_exit(fn ->
      :code.del_path(String.to_charlist(dir))
      File.rm_rf!(dir)
    end)
  end

  defp tmp_dir(name) do
    dir = Path.join(System.tmp_dir!(), "kino_trace_#{name}_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    dir
  end

  # Modules only on the code path, none of their names an atom here.
  defp fresh_modules(_context) do
    dir = tmp_dir("complete")
    with_code_path(dir)

    root = "Kt" <> String.capitalize(fresh("fresh"))
    elixir = "Elixir.#{root}.Worker"
    run = fresh("run_")
    erlang = fresh("kt_mod_")
    start = fresh("start_")

    erlc(dir, elixir, module_source(elixir, [{run, 1}, {run, 2}, {"a b", 0}]), ["+compressed"])
    erlc(dir, erlang, module_source(erlang, [{start, 0}, {"#{start}_link", 1}]))

    for name <- [root, elixir, erlang, run, start], do: assert(Name.existing(name) == nil)
    %{dir: dir, root: root, elixir: elixir, run: run, erlang: erlang, start: start}
  end

  describe "what it completes" do
    test "module names, by their next alias segment" do
      assert %{
               prefix: "Ca",
               items: [
                 %{label: "Cache", insert: "Cache", kind: :module, detail: "SampleApp.Cache"}
               ]
             } =
               Complete.complete("SampleApp.Ca")

      assert "Repo" in inserts("SampleApp.")
      assert inserts("  Enu") == ["Enum", "Enumerable"]
      assert inserts(":et") == [":ets"]
      assert ":erlang" in inserts(":erl")
    end

    test "functions, one item per arity; after a module's dot also the modules under it" do
      assert %{prefix: "fe", items: items} = Complete.complete("SampleApp.Cache.fe")
      assert Enum.map(items, & &1.insert) == ["fetch/1", "fetch/2", "fetch_all/2"]
      assert Enum.all?(items, &(&1.kind == :function))
      assert hd(items).detail == "SampleApp.Cache.fetch/1"

      assert inserts(":ets.ins") == ["insert/2", "insert_new/2"]
      assert "valid?/1" in inserts("String.val")

      kernel = Complete.complete("Kernel.").items

      assert %{insert: "SpecialForms", kind: :module} =
               Enum.find(kernel, &(&1.kind == :module and &1.insert == "SpecialForms"))

      assert Enum.any?(kernel, &(&1.kind == :function))
    end

    test "the arities of a function, after ( or /" do
      assert Complete.complete("Enum.map_join(") == %{
               prefix: "",
               items: [
                 %{
                   label: "map_join/2",
                   insert: "_, _)",
                   kind: :function,
                   detail: "Enum.map_join/2"
                 },
                 %{
                   label: "map_join/3",
                   insert: "_, _, _)",
                   kind: :function,
                   detail: "Enum.map_join/3"
                 }
               ]
             }

      assert inserts("Enum.map(") == ["_, _)"]
      assert inserts("Enum.reduce/") == ["2", "3"]
      assert inserts(":erlang.node(") == [")", "_)"]
    end

    test "only the last line, and only a pattern's head" do
      assert inserts("Enum.map/2\n:ets.insert_n") == ["insert_new/2"]
      assert inserts("Enum.map(list, Str") == []
      assert inserts("Enum.map(x") == []
      assert inserts("") == []
      assert inserts("enum.ma") == []
    end

    test "no macros, generated functions or __info__ unless asked for; operators unquoted and last" do
      refute Enum.any?(
               labels("Kernel."),
               &String.starts_with?(&1, ["MACRO-", "-", "\"MACRO", "\"-"])
             )

      refute "def/2" in labels("Kernel.de")
      refute "__info__/1" in labels("Enum.")
      assert "__info__/1" in labels("Enum._")
      refute "module_info/0" in labels("Enum.")
      assert labels("Enum.module") == ["module_info/0", "module_info/1"]

      erlang = Complete.complete(":erlang.", limit: 1_000).items
      assert List.last(erlang).label =~ ~r/^[^a-z]/
      assert Enum.any?(erlang, &(&1.label == "+/2"))
    end

    test "a suggestion that changes nothing is none; :limit caps the items" do
      assert inserts("Enumerable") == []
      assert length(Complete.complete(":", limit: 3).items) == 3
      assert Complete.complete("Enum.", limit: 0).items == []
    end

    test "what is not text of a pattern line" do
      assert Complete.complete(<<"Enum.ma", 0xFF>>) == %{prefix: "", items: []}

      assert Complete.complete("Enum.ma" <> String.duplicate(" ", 5_000)) == %{
               prefix: "",
               items: []
             }

      assert_raise ArgumentError,
                   "expected the text of a pattern line (a string), got: :enum",
                   fn ->
                     Complete.complete(:enum)
                   end

      assert_raise ArgumentError, ~r/:limit/, fn -> Complete.complete("Enum.", limit: -1) end
    end

    # Its options go through KinoTrace.Options, as every front end's (issue 35).
    test "bad options raise the ArgumentError every front end raises, naming the option" do
      for {opts, message} <- [
            {[limit: -1], "invalid value for :limit: expected a non-negative integer, got: -1"},
            {[node: "a@b"], ~s(invalid value for :node: expected a node name, got: "a@b")},
            {[limt: 5],
             "unknown option :limt (did you mean :limit?). Known options: :limit, :node"},
            {:bad, "expected options to be a keyword list, got: :bad"}
          ] do
        assert_raise ArgumentError, message, fn -> Complete.complete("Enum.", opts) end
        assert_raise ArgumentError, message, fn -> Kino.Trace.complete("Enum.", opts) end
      end
    end
  end

  describe "modules only on the code path" do
    setup :fresh_modules

    test "are offered, with exports read from the file; nothing is loaded and no atom made", m do
      queries = fn ->
        assert %{items: [%{insert: "Worker", detail: detail}]} = Complete.complete("#{m.root}.Wo")
        assert detail == String.replace_prefix(m.elixir, "Elixir.", "")

        alias_path = String.replace_prefix(m.elixir, "Elixir.", "")
        assert inserts("#{alias_path}.") == ["#{m.run}/1", "#{m.run}/2", ~s("a b"/0)]
        assert inserts("#{alias_path}.#{m.run}(") == ["_)", "_, _)"]
        assert inserts(":" <> String.slice(m.erlang, 0..-3//1)) == [":" <> m.erlang]
        assert inserts(":#{m.erlang}.st") == ["#{m.start}/0", "#{m.start}_link/1"]
      end

      # The first run may load code that completion uses (its own modules, :zlib), whose
      # atoms are no input's; the names below must never become atoms, in either run.
      queries.()
      before = :erlang.system_info(:atom_count)
      queries.()
      assert :erlang.system_info(:atom_count) == before

      for name <- [m.root, m.elixir, m.erlang, m.run, m.start],
          do: assert(Name.existing(name) == nil)
    end

    test "a file added to or rewritten in a code path directory is seen", m do
      assert inserts(":#{m.erlang}.st") == ["#{m.start}/0", "#{m.start}_link/1"]

      added = fresh("kt_added_")
      erlc(m.dir, added, module_source(added, [{"go", 0}]))
      wait_until(fn -> inserts(":#{added}.") == ["go/0"] end)

      erlc(m.dir, m.erlang, module_source(m.erlang, [{"#{m.start}_other", 3}]))
      wait_until(fn -> inserts(":#{m.erlang}.st") == ["#{m.start}_other/3"] end)
    end

    # erlc writes one form (byte lengths up to OTP 27, the compact form from OTP 28): the
    # same file is rewritten in the other one, and both are read.
    test "an atom table in either form, byte lengths or the compact one of newer compilers, is read",
         m do
      {:ok, binary} = File.read(Path.join(m.dir, m.erlang <> ".beam"))
      {:ok, name, exports} = Beam.exports(binary)
      assert name == m.erlang

      assert Enum.sort(exports) == [
               {"module_info", 0},
               {"module_info", 1},
               {m.start, 0},
               {"#{m.start}_link", 1}
             ]

      other = other_atom_form(binary)
      assert atom_form(other) != atom_form(binary)
      assert Beam.exports(other) == {:ok, name, exports}
      assert Beam.exports(binary_part(other, 0, div(byte_size(other), 2))) == :error
    end

    test "a file cut short at a chunk's end is not read as a whole one", m do
      {:ok, binary} = File.read(Path.join(m.dir, m.erlang <> ".beam"))

      # Every cut after the export and atom tables, at a chunk boundary and elsewhere.
      cuts = chunk_ends(binary) ++ [byte_size(binary) - 1, byte_size(binary) - 3]
      assert length(cuts) > 3

      for cut <- cuts,
          cut < byte_size(binary),
          do: assert(Beam.exports(binary_part(binary, 0, cut)) == :error, "cut at #{cut}")
    end
  end

  # The same object file with its atom table written in the other form: a negative
  # count and each length in the compact term encoding (as OTP 28+ compilers write it),
  # or a positive count and each length in a byte (as OTP 27 and older did).
  defp other_atom_form(<<"FOR1", _size::32, "BEAM", chunks::binary>>) do
    body = rewrite_chunks(chunks)
    <<"FOR1", byte_size(body) + 4::32, "BEAM", body::binary>>
  end

  defp atom_form(<<"FOR1", _size::32, "BEAM", chunks::binary>>), do: atom_form(chunks)

  defp atom_form(<<"AtU8", _size::32, count::signed-32, _::binary>>),
    do: if(count < 0, do: :compact, else: :bytes)

  defp atom_form(<<_id::binary-4, size::32, _::binary-size(size), rest::binary>>) do
    padding = rem(4 - rem(size, 4), 4)
    <<_::binary-size(^padding), rest::binary>> = rest
    atom_form(rest)
  end

  # The offset at which each chunk (with its padding) ends.
  defp chunk_ends(<<"FOR1", _size::32, "BEAM", chunks::binary>>), do: chunk_ends(chunks, 12)

  defp chunk_ends(<<_id::binary-4, size::32, _::binary-size(size), rest::binary>>, at) do
    padding = rem(4 - rem(size, 4), 4)
    at = at + 8 + size + padding
    <<_::binary-size(^padding), rest::binary>> = rest
    [at | chunk_ends(rest, at)]
  end

  defp chunk_ends(<<>>, _at), do: []

  defp rewrite_chunks(<<>>), do: <<>>

  defp rewrite_chunks(<<id::binary-4, size::32, data::binary-size(size), rest::binary>>) do
    padding = rem(4 - rem(size, 4), 4)
    <<_::binary-size(^padding), rest::binary>> = rest

    data =
      case {id, data} do
        {"AtU8", <<count::signed-32, table::binary>>} when count > 0 ->
          <<-count::signed-32, compact_table(table)::binary>>

        {"AtU8", <<count::signed-32, table::binary>>} ->
          <<-count::signed-32, byte_table(table, -count)::binary>>

        _ ->
          data
      end

    pad = rem(4 - rem(byte_size(data), 4), 4)

    <<id::binary, byte_size(data)::32, data::binary, 0::size(pad * 8),
      rewrite_chunks(rest)::binary>>
  end

  defp compact_table(<<>>), do: <<>>

  defp compact_table(<<length, name::binary-size(length), rest::binary>>) do
    encoded =
      if length < 16,
        do: <<length::4, 0::1, 0::3>>,
        else: <<length >>> 8::3, 1::2, 0::3, length::8>>

    <<encoded::binary, name::binary, compact_table(rest)::binary>>
  end

  # The compact table's names, each after its length in one byte.
  defp byte_table(_table, 0), do: <<>>

  defp byte_table(table, n) do
    {length, rest} =
      case table do
        <<length::4, 0::1, 0::3, rest::binary>> -> {length, rest}
        <<high::3, 0::1, 1::1, 0::3, low, rest::binary>> -> {high * 256 + low, rest}
      end

    <<name::binary-size(^length), rest::binary>> = rest
    <<length, name::binary, byte_table(rest, n - 1)::binary>>
  end

  describe "typed text never becomes an atom" do
    setup :fresh_modules

    test "10 000 random inputs leave the atom count as it was", m do
      alias_path = String.replace_prefix(m.elixir, "Elixir.", "")

      known = [
        "Enum",
        "Enum.",
        "SampleApp.Cache.",
        ":ets.",
        ":",
        "Kernel.",
        "#{alias_path}.",
        ":#{m.erlang}.",
        m.root,
        "String.valid"
      ]

      # First uses load modules and fill the cache: not part of the count.
      for text <- known,
          suffix <- ["", "f", "(", "/", "zz"],
          do: Complete.complete(text <> suffix)

      inputs = for _ <- 1..10_000, do: random_input(known)
      before = :erlang.system_info(:atom_count)
      results = Enum.map(inputs, &Complete.complete/1)
      assert :erlang.system_info(:atom_count) == before

      # the inputs did reach every kind of completion
      kinds =
        results |> Enum.flat_map(& &1.items) |> Enum.map(& &1.kind) |> Enum.uniq() |> Enum.sort()

      assert kinds == [:function, :module]

      assert Enum.any?(results, fn r ->
               Enum.any?(r.items, &String.starts_with?(&1.label, m.run))
             end)

      for name <- [m.run, m.start, m.erlang, m.elixir], do: assert(Name.existing(name) == nil)
    end
  end

  # Pieces of pattern text, new names among them (fresh each time: an atom made from
  # one shows in the count), glued at random.
  defp random_input(known) do
    pieces = [
      fn -> Enum.random(known) end,
      fn -> "Zq" <> random_word() end,
      fn -> "q" <> random_word() end,
      fn -> ":" <> random_word() end,
      fn ->
        Enum.random([
          ".",
          ".",
          ":",
          "(",
          ")",
          "/",
          "_",
          "?",
          "!",
          "\"",
          " ",
          "\n",
          ",",
          "@",
          "%{",
          "&"
        ])
      end,
      fn -> Enum.random(["é", "Ärger", "日本", "ß", "😀", "\u200b", "İ", "ǅ"]) <> random_word() end,
      fn -> <<Enum.random([0xFF, 0xC3, 0x80, 0])>> end
    ]

    count = :rand.uniform(6)
    for _ <- 1..count, into: "", do: Enum.random(pieces).()
  end

  defp random_word do
    for _ <- 1..:rand.uniform(10), into: "", do: <<Enum.random(~c"abcxyzQRS_019")>>
  end

  describe "5 000 modules on the code path" do
    setup do
      dir = tmp_dir("complete_bench")
      with_code_path(dir)

      # Tiny modules, compiled here and written out, not loaded.
      {micros, _} =
        :timer.tc(fn ->
          for i <- 1..5_000 do
            module = :"Elixir.KtBench.M#{String.pad_leading(Integer.to_string(i), 5, "0")}"

            forms = [
              {:attribute, 1, :module, module},
              {:attribute, 1, :export, [get: 1, put: 2, delete: 1]},
              {:function, 1, :get, 1, [{:clause, 1, [{:var, 1, :_}], [], [{:atom, 1, :ok}]}]},
              {:function, 1, :put, 2,
               [{:clause, 1, [{:var, 1, :_}, {:var, 1, :_}], [], [{:atom, 1, :ok}]}]},
              {:function, 1, :delete, 1, [{:clause, 1, [{:var, 1, :_}], [], [{:atom, 1, :ok}]}]}
            ]

            {:ok, ^module, binary} = :compile.forms(forms, [:binary, :no_line_info])
            File.write!(Path.join(dir, "#{module}.beam"), binary)
          end
        end)

      IO.puts("\n  (5 000 object files written in #{div(micros, 1000)} ms)")
      %{dir: dir}
    end

    test "completion answers fast: the figures are printed", %{dir: dir} do
      # A code path directory changed in the last second is read again each time:
      # measure what a user sees once the files are there (its modification time set
      # in the past, as it is a second later).
      File.touch!(dir, System.os_time(:second) - 2)

      {cold, _} = :timer.tc(fn -> Complete.complete("KtBench.M0") end)

      assert [{_, _stamp, names, _checked}] =
               :ets.lookup(KinoTrace.Complete.Modules, {:dir, dir})

      assert tuple_size(names) == 5_000

      # What the widget does when it starts, in a process of its own: then the first
      # completion finds the directory's listing cached.
      :ets.delete(KinoTrace.Complete.Modules, {:dir, dir})
      {warm, :ok} = :timer.tc(&KinoTrace.Complete.Modules.warm/0)

      assert [{_, _stamp, ^names, _checked}] =
               :ets.lookup(KinoTrace.Complete.Modules, {:dir, dir})

      {after_warm, _} = :timer.tc(fn -> Complete.complete("KtBench.M1") end)

      texts = [
        "KtBench.",
        "KtBench.M049",
        "KtBench.M04321.",
        "KtBench.M04321.ge",
        "Enum.ma",
        "E",
        ":"
      ]

      figures =
        for text <- texts do
          times = for _ <- 1..21, do: elem(:timer.tc(fn -> Complete.complete(text) end), 0)
          {text, Enum.at(Enum.sort(times), 10), Enum.max(times)}
        end

      assert length(Complete.complete("KtBench.").items) == 100
      assert inserts("KtBench.M04321.") == ["delete/1", "get/1", "put/2"]
      refute :erlang.module_loaded(:"Elixir.KtBench.M04321")

      IO.puts(
        "  completion with 5 000 more modules on the code path (#{length(:code.get_path())} directories, #{length(:erlang.loaded())} modules loaded):"
      )

      IO.puts("    a first call, which lists the directory: #{Float.round(cold / 1000, 2)} ms")

      IO.puts(
        "    Modules.warm/0 (as the widget does when it starts): #{Float.round(warm / 1000, 2)} ms, then a first call: #{Float.round(after_warm / 1000, 2)} ms"
      )

      for {text, median, max} <- figures do
        IO.puts(
          "    #{String.pad_trailing(inspect(text), 20)} median #{Float.round(median / 1000, 2)} ms, max #{Float.round(max / 1000, 2)} ms (21 calls)"
        )
      end
    end
  end
end
