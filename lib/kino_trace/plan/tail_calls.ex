defmodule KinoTrace.Plan.TailCalls do
  @moduledoc false
  # Finds the functions of a module that loop through tail calls.
  #
  # Return tracing (`{:return_trace}` or `{:exception_trace}` in a match spec) puts a
  # frame on the traced process's stack at every call, removed only when the call
  # returns. A function that calls itself in tail position, directly or through other
  # functions of its module, would otherwise run in constant stack: traced with returns,
  # every iteration leaves a frame, so a server loop's stack grows without bound and keeps
  # the frames after the trace ends. kino_trace therefore traces such functions without
  # their returns unless asked otherwise (see `KinoTrace.Plan.Functions`).
  #
  # `cycles/1` reads the module's loaded object code with `:beam_disasm` (no debug info
  # needed) and returns the `{function, arity}` of every function on a cycle of tail calls
  # within the module: `call_only`/`call_last` to a local function and
  # `call_ext_only`/`call_ext_last` to the module itself (`?MODULE:loop(...)`,
  # `__MODULE__.loop(...)`). A function on such a cycle is found whichever of its
  # functions is traced: with `loop -> helper -> loop`, both are.

  alias KinoTrace.Base.Lookup

  @table __MODULE__
  @max_cached 1_024
  # (a module another process is analysing: see claim/2)
  @poll_ms 5
  @wait_ms 10_000

  @type cycles :: MapSet.t({atom(), arity()}) | :unknown
  @type scope :: :local | :global

  @doc """
  The functions of `module` on a cycle of tail calls within it, or `:unknown` when its
  loaded object code cannot be read. `scope` is `:local` (every call traced, the
  default) or `:global` (only calls through the module's name).

  ## Examples

      iex> cycles = KinoTrace.Plan.TailCalls.cycles(:lists)
      iex> # sum/1 calls sum/2 once; sum/2 is the loop
      iex> {MapSet.member?(cycles, {:sum, 1}), MapSet.member?(cycles, {:sum, 2})}
      {false, true}
      iex> # foldl/3 calls its private loop foldl_1/3 once
      iex> {MapSet.member?(cycles, {:foldl, 3}), MapSet.member?(cycles, {:foldl_1, 3})}
      {false, true}

  With `:global` as the scope (patterns traced with `local: false`, where only calls
  through the module's name are traced), a function counts when a call through the
  module's name enters it on such a cycle: a loop of plain local calls is not traced
  past its first call.

      iex> KinoTrace.Plan.TailCalls.cycles(:lists, :global) |> MapSet.member?({:sum, 2})
      false

  A module whose object code cannot be read (preloaded modules, modules compiled in
  memory, such as those defined in a Livebook cell or an `.exs` file, or an object file
  that is not the loaded version) gives `:unknown`; the stack guard
  (`KinoTrace.Session.StackGuard`) covers those.

      iex> KinoTrace.Plan.TailCalls.cycles(:erlang)
      :unknown

  The module may be on another node, one without kino_trace: `cycles_all/3` reads it
  there through a `KinoTrace.Base.Lookup` (a module loaded there with
  `:code.load_binary/3` and no object file on its code path gives `:unknown` too).

  Results are cached per module version (the module's MD5), in a bounded table.
  """
  @spec cycles(module(), scope()) :: cycles()
  def cycles(module, scope \\ :local) when is_atom(module) and scope in [:local, :global] do
    module |> List.wrap() |> cycles_all(scope) |> Map.fetch!(module)
  end

  @doc """
  `cycles/2` of each module, read where `lookup` looks (`KinoTrace.Base.Lookup`: this
  node by default, or another node, which needs no kino_trace): the modules are loaded
  there, and their object code is read from that node's code path when it is the
  loaded version. All modules are looked up at once.

      iex> KinoTrace.Plan.TailCalls.cycles_all([:lists, :erlang], :local, KinoTrace.Base.Lookup.local())[:erlang]
      :unknown
  """
  @spec cycles_all([module()], scope(), KinoTrace.Base.Lookup.t()) :: %{module() => cycles()}
  def cycles_all(modules, scope \\ :local, lookup \\ Lookup.local())
      when scope in [:local, :global] do
    modules = Enum.uniq(modules)
    md5s = loaded_md5s(lookup, modules)

    known =
      Map.new(modules, fn module ->
        case md5s[module] do
          nil -> {module, :unknown}
          md5 -> {module, with(:miss <- cached(module, md5), do: {:miss, md5})}
        end
      end)

    # (a module another process is analysing already: its result is waited for)
    {mine, theirs} =
      known
      |> Enum.filter(&match?({_, {:miss, _}}, &1))
      |> Enum.split_with(fn {module, {:miss, md5}} -> claim(module, md5) end)

    missing = for {module, _} <- mine, do: module
    beams = if missing == [], do: %{}, else: Lookup.object_code(lookup, missing)

    analysed =
      try do
        Map.new(mine, fn {module, {:miss, md5}} ->
          found = analyze(module, md5, beams[module])
          store(module, md5, found)
          {module, found}
        end)
      after
        Enum.each(mine, fn {module, {:miss, md5}} -> unclaim(module, md5) end)
      end

    waited =
      Map.new(theirs, fn {module, {:miss, md5}} ->
        {module, waited(module, md5, lookup, System.monotonic_time(:millisecond) + @wait_ms)}
      end)

    Map.new(known, fn
      {module, {:ok, found}} -> {module, pick(found, scope)}
      {module, :unknown} -> {module, :unknown}
      {module, {:miss, _md5}} -> {module, pick(analysed[module] || waited[module], scope)}
    end)
  end

  # Analysing a large module takes a while (tens of ms for :ets alone, which became
  # seconds with 8 traces of :ets.insert/2 starting at once on a loaded machine, each
  # reading and disassembling the same object code, issue 36 item 2): the first process
  # to miss a module version claims it; the others wait for its result, polling the
  # cache every @poll_ms, and analyse it themselves once the claim is gone without one
  # (its process died) or after @wait_ms.
  defp claim(module, md5) do
    :ets.whereis(@table) == :undefined or
      :ets.insert_new(@table, {{:claim, module, md5}, self()})
  rescue
    ArgumentError -> true
  end

  defp unclaim(module, md5) do
    :ets.delete(@table, {:claim, module, md5})
    :ok
  rescue
    ArgumentError -> :ok
  end

  defp waited(module, md5, lookup, deadline) do
    claimer =
      case :ets.lookup(@table, {:claim, module, md5}) do
        [{_, pid}] -> pid
        [] -> nil
      end

    alive? = claimer != nil and Process.alive?(claimer)
    wait? = alive? and System.monotonic_time(:millisecond) < deadline

    case cached(module, md5) do
      {:ok, found} ->
        found

      :miss when wait? ->
        receive after: (@poll_ms -> :ok)
        waited(module, md5, lookup, deadline)

      :miss ->
        if claimer != nil and not alive?, do: unclaim(module, md5)
        analyze_here(module, md5, lookup)
    end
  rescue
    # the table went away with the application
    ArgumentError -> analyze_here(module, md5, lookup)
  end

  # Without the claimer's result: read and analysed by this process (and cached).
  defp analyze_here(module, md5, lookup) do
    found = analyze(module, md5, Lookup.object_code(lookup, [module])[module])
    store(module, md5, found)
    found
  end

  @doc """
  The functions on a cycle of tail calls in the module whose object code is `beam` (a
  `.beam` binary), for both scopes, or `:unknown` when it cannot be disassembled.
  """
  @spec from_beam(binary()) :: %{local: MapSet.t(), global: MapSet.t()} | :unknown
  def from_beam(beam) when is_binary(beam) do
    case :beam_disasm.file(beam) do
      {:beam_file, module, _exports, _attributes, _compile_info, code} ->
        edges = tail_edges(code, module)
        local = edges |> Enum.map(fn {from, to, _kind} -> {from, to} end) |> on_cycles()

        # Entered through the module's name from a function on a cycle.
        global =
          for {from, to, :external} <- edges,
              MapSet.member?(local, from) and MapSet.member?(local, to),
              into: MapSet.new(),
              do: to

        %{local: local, global: global}

      _error ->
        :unknown
    end
  end

  defp pick(:unknown, _scope), do: :unknown
  defp pick(found, scope), do: Map.fetch!(found, scope)

  @doc """
  The functions on a cycle of a graph given as `{from, to}` edges (a function on a
  cycle with itself included).

      iex> KinoTrace.Plan.TailCalls.on_cycles([{:a, :b}, {:b, :a}, {:b, :c}, {:d, :d}, {:e, :a}])
      MapSet.new([:a, :b, :d])
  """
  @spec on_cycles([{term(), term()}]) :: MapSet.t()
  def on_cycles(edges) do
    graph = :digraph.new()

    try do
      for {from, to} <- edges do
        :digraph.add_vertex(graph, from)
        :digraph.add_vertex(graph, to)
        :digraph.add_edge(graph, from, to)
      end

      graph |> :digraph_utils.cyclic_strong_components() |> List.flatten() |> MapSet.new()
    after
      :digraph.delete(graph)
    end
  end

  # {caller, callee, :local | :external} for every tail call between functions of `module`.
  defp tail_edges(code, module) do
    for {:function, name, arity, _entry, instructions} <- code,
        instruction <- instructions,
        {callee, kind} <- tail_callee(instruction, module),
        do: {{name, arity}, callee, kind}
  end

  defp tail_callee({:call_only, _, {module, f, a}}, module), do: [{{f, a}, :local}]
  defp tail_callee({:call_last, _, {module, f, a}, _}, module), do: [{{f, a}, :local}]

  defp tail_callee({:call_ext_only, _, {:extfunc, module, f, a}}, module),
    do: [{{f, a}, :external}]

  defp tail_callee({:call_ext_last, _, {:extfunc, module, f, a}, _}, module),
    do: [{{f, a}, :external}]

  defp tail_callee(_instruction, _module), do: []

  # The MD5 of each module loaded where the lookup looks (loading it), or nil.
  defp loaded_md5s(lookup, modules) do
    loaded = for {m, {:module, m}} <- Lookup.ensure_loaded(lookup, modules), do: m
    for {m, %{md5: md5}} <- Lookup.module_info(lookup, loaded, [:md5]), into: %{}, do: {m, md5}
  end

  # Only the loaded version's code counts.
  defp analyze(module, md5, beam) when is_binary(beam) do
    case :beam_lib.md5(beam) do
      {:ok, {^module, ^md5}} -> from_beam(beam)
      _ -> :unknown
    end
  end

  defp analyze(_module, _md5, nil), do: :unknown

  defp cached(module, md5) do
    case :ets.whereis(@table) != :undefined and :ets.lookup(@table, module) do
      [{^module, ^md5, cycles}] -> {:ok, cycles}
      _ -> :miss
    end
  end

  defp store(module, md5, cycles) do
    if :ets.whereis(@table) != :undefined do
      if :ets.info(@table, :size) >= @max_cached, do: :ets.delete_all_objects(@table)
      :ets.insert(@table, {module, md5, cycles})
    end

    :ok
  rescue
    # The table went away with the application: nothing to cache in.
    ArgumentError -> :ok
  end
end
