defmodule KinoTrace.Tracer.NifTableTest do
  # Each NIF is declared once, one line of KINO_TRACE_NIFS in c_src/nif/nifs.hpp, from
  # which the C++ declarations and the function table are made. The Erlang side of the
  # table is kino_trace_tracer's -nifs attribute and stubs: this checks they match it.
  use ExUnit.Case, async: true

  @header Path.expand("../../../c_src/nif/nifs.hpp", __DIR__)
  @flags ["0", "ERL_NIF_DIRTY_JOB_CPU_BOUND", "ERL_NIF_DIRTY_JOB_IO_BOUND"]

  # [{name, arity, cpp_function, flags, noexcept?}] as the header lists them.
  defp declared do
    text = File.read!(@header)
    [_, list] = Regex.run(~r/#define KINO_TRACE_NIFS\(X\)(.*?)\n\n/s, text)

    for [_, name, arity, function, flags, spec] <-
          Regex.scan(~r/^\s*X\((\w+),\s*(\d+),\s*(\w+),\s*([\w |]+?),\s*(noexcept|)\s*\)/m, list) do
      {String.to_atom(name), String.to_integer(arity), function, String.trim(flags),
       spec == "noexcept"}
    end
  end

  defp beam_chunk(chunk) do
    {:ok, {:kino_trace_tracer, [{^chunk, value}]}} =
      :beam_lib.chunks(:code.which(:kino_trace_tracer), [chunk])

    value
  end

  test "the header declares each NIF once, one line each" do
    list = declared()
    assert length(list) > 20
    lines = File.read!(@header) |> String.split("\n") |> Enum.filter(&(&1 =~ ~r/^\s*X\(/))
    assert length(lines) == length(list), "one X(...) per line: #{inspect(lines)}"
    pairs = for {name, arity, _, _, _} <- list, do: {name, arity}
    assert pairs == Enum.uniq(pairs)
  end

  test "kino_trace_tracer's -nifs, exports and stubs are the header's NIFs" do
    pairs = for {name, arity, _, _, _} <- declared(), do: {name, arity}
    {:raw_abstract_v1, forms} = beam_chunk(:abstract_code)
    nifs = for {:attribute, _, :nifs, list} <- forms, nif <- list, do: nif
    assert Enum.sort(nifs) == Enum.sort(pairs)

    exports = :kino_trace_tracer.module_info(:exports)
    assert pairs -- exports == []

    # each stub raises through not_loaded/0 (what a NIF whose library did not load does)

    for {name, arity} <- pairs do
      assert [{:function, _, ^name, ^arity, [{:clause, _, _, [], [body]}]}] =
               for({:function, _, ^name, ^arity, _} = f <- forms, do: f),
             "#{name}/#{arity} has no stub in src/kino_trace_tracer.erl"

      assert {:call, _, {:atom, _, :not_loaded}, []} = body,
             "#{name}/#{arity}'s stub must call not_loaded()"
    end
  end

  test "flags: none dirty on the hot path, which is not wrapped (noexcept); every other NIF is" do
    for {name, arity, function, flags, noexcept?} <- declared() do
      assert flags in @flags, "#{name}/#{arity}: flags #{flags}"
      callback? = String.starts_with?(Atom.to_string(name), ["enabled", "trace"])

      if callback? do
        assert flags == "0" and noexcept? and function in ["enabled", "trace"],
               "the erl_tracer callback #{name}/#{arity} runs on the traced process's scheduler, unwrapped"
      else
        refute noexcept?,
               "#{name}/#{arity} is entered through guarded<> (its failures are contained)"
      end
    end
  end

  test "the library loaded with that table: every NIF replaced its stub" do
    if KinoTrace.Tracer.loaded?() do
      # A stub left in place raises "not available"; these NIFs take no state.
      assert :kino_trace_tracer.nif_loaded() == true
      assert is_map(:kino_trace_tracer.term_layout())
      assert is_list(:kino_trace_tracer.struct_keys())
      assert :kino_trace_tracer.alloc_faults(0, :nif_loaded, []) in [{true, 0}, :unsupported]
    end
  end
end
