defmodule KinoTrace.Plan.Functions do
  @moduledoc false
  # What a list of patterns sets with `:trace.function/4`: one match spec per target, in
  # the order to set them.
  #
  # `:trace.function/4` keeps one match spec per function, so a later pattern replaces an
  # earlier one on the functions they share. The plan sets the broadest targets first,
  # each with the clauses of every pattern that covers it, so a call is traced when any
  # pattern matches it. A target `{m, f, a}` is covered by at most four shapes
  # (`{:_, :_, :_}`, `{m, :_, :_}`, `{m, f, :_}` and itself), so building the plan is one
  # map lookup per shape: linear in the number of patterns.
  #
  # Functions on a cycle of tail calls (`KinoTrace.Plan.TailCalls`) get no return actions:
  # return tracing would leave a stack frame at every iteration. A module-wide or
  # function-wide pattern is set as usual and each such function is then set again
  # without returns. Their returns are traced only when a pattern names the function
  # (`"M.loop/1"`, or `"M.loop"` for every arity) and `force: true` is given.

  alias KinoTrace.Pattern
  alias KinoTrace.Pattern.Generated
  alias KinoTrace.Base.Lookup
  alias KinoTrace.Plan.TailCalls

  defstruct steps: [], no_returns: MapSet.new(), transient_returns: false

  @typedoc """
    * `:steps` - `{mfa, match_spec}` in the order to set them (`false` for a function
      set untraced)
    * `:no_returns` - the functions (`{m, f, a}`) set without return actions although
      the trace asked for returns
    * `:transient_returns` - whether setting the steps in order gives some of those
      functions return actions for a moment (a broader step covers them), so `install/3`
      silences the session's processes meanwhile
  """
  @type t :: %__MODULE__{
          steps: [{mfa_pattern(), list() | false}],
          no_returns: MapSet.t(mfa()),
          transient_returns: boolean()
        }
  @type mfa_pattern :: {module() | :_, atom() | :_, arity() | :_}

  @doc """
  Builds the plan of `patterns`, with `returns` (`[{:return_trace}]`,
  `[{:exception_trace}]` or `[]`) and `actions` (the other actions of every clause).

  Options: `:force` (trace returns of tail-recursive functions a pattern names),
  `:local` (whether local calls are traced, default `true`), `:lookup`, where the
  modules are read (`KinoTrace.Base.Lookup`: this node by default, or the node the
  plan is for) and `:cycles`, the function that gives a module's tail-call cycles
  (default: `KinoTrace.Plan.TailCalls.cycles_all/3` with the scope `:local` says, every
  module at once).

  ## Examples

      iex> {:ok, lists} = KinoTrace.Pattern.parse(:lists)
      iex> {:ok, sum} = KinoTrace.Pattern.parse({:lists, :sum, 2})
      iex> plan = KinoTrace.Plan.Functions.build([lists, sum], [{:return_trace}], [])
      iex> hd(plan.steps)
      {{:lists, :_, :_}, [{:_, [], [{:return_trace}]}]}
      iex> List.keyfind(plan.steps, {:lists, :sum, 2}, 0)
      {{:lists, :sum, 2}, [{:_, [], []}]}
      iex> Enum.map([{:lists, :foldl_1, 3}, {:lists, :foldl, 3}], &MapSet.member?(plan.no_returns, &1))
      [true, false]
      iex> forced = KinoTrace.Plan.Functions.build([lists, sum], [{:return_trace}], [], force: true)
      iex> List.keyfind(forced.steps, {:lists, :sum, 2}, 0)
      {{:lists, :sum, 2}, [{:_, [], [{:return_trace}]}, {:_, [], []}]}

  (`:lists.foldl_1/3`, the loop behind `:lists.foldl/3`, is set again without returns
  because the module-wide pattern covers it; `:lists.sum/2` keeps its returns with
  `force: true` because a pattern names it.)

  The functions the compiler adds (`KinoTrace.Pattern.Generated`: `__info__/1`,
  `module_info/0,1`...) are set untraced after a module-wide step, unless a pattern
  names them:

      iex> {:ok, lists} = KinoTrace.Pattern.parse(:lists)
      iex> plan = KinoTrace.Plan.Functions.build([lists], [], [])
      iex> Enum.filter(plan.steps, &(elem(&1, 1) == false))
      [{{:lists, :module_info, 0}, false}, {{:lists, :module_info, 1}, false}]
      iex> {:ok, info} = KinoTrace.Pattern.parse(":lists.module_info/1")
      iex> KinoTrace.Plan.Functions.build([lists, info], [], []).steps |> Enum.filter(&(elem(&1, 1) == false))
      [{{:lists, :module_info, 0}, false}]
  """
  @spec build([Pattern.t()], list(), list(), keyword()) :: t()
  def build(patterns, returns, actions, opts \\ []) do
    force? = Keyword.get(opts, :force, false)
    scope = if Keyword.get(opts, :local, true), do: :local, else: :global
    lookup = Keyword.get(opts, :lookup) || Lookup.local()
    by_target = Enum.group_by(patterns, &Pattern.mfa/1)

    # A module's cycles, looked up once per module.
    cycles =
      if returns == [] do
        %{}
      else
        modules = for {m, _, _} <- Map.keys(by_target), m != :_, uniq: true, do: m

        case Keyword.fetch(opts, :cycles) do
          {:ok, cycles_of} -> Map.new(modules, &{&1, cycles_of.(&1)})
          :error -> TailCalls.cycles_all(modules, scope, lookup)
        end
      end

    in_cycle? = fn
      {m, f, a} when f != :_ and a != :_ ->
        match?(%MapSet{}, cycles[m]) and MapSet.member?(cycles[m], {f, a})

      _ ->
        false
    end

    targets = Map.keys(by_target) ++ overrides(by_target, cycles)

    steps =
      for target <- targets |> Enum.uniq() |> sort_broad_first() do
        {returning, plain} =
          for key <- coverers(target), pattern <- Map.get(by_target, key, []), reduce: {[], []} do
            {returning, plain} ->
              if returns != [] and (not in_cycle?.(target) or (force? and pattern.function != :_)) do
                {[Pattern.match_spec(pattern, returns ++ actions) | returning], plain}
              else
                {returning, [Pattern.match_spec(pattern, actions) | plain]}
              end
          end

        # The first clause that matches a call runs: returning clauses go first, so a
        # forced pattern's returns win over a broad pattern's plain clause.
        spec = (Enum.reverse(returning) ++ Enum.reverse(plain)) |> Enum.concat() |> Enum.uniq()
        {target, spec, returning == []}
      end

    no_returns =
      if returns == [],
        do: MapSet.new(),
        else:
          for(
            {{_, f, a} = mfa, _, true} <- steps,
            f != :_ and a != :_,
            into: MapSet.new(),
            do: mfa
          )

    transient? =
      Enum.any?(no_returns, fn {m, f, _a} ->
        Enum.any?([{:_, :_, :_}, {m, :_, :_}, {m, f, :_}], &is_map_key(by_target, &1))
      end)

    %__MODULE__{
      steps:
        for({target, spec, _} <- steps, do: {target, spec}) ++ generated_off(by_target, lookup),
      no_returns: no_returns,
      transient_returns: transient?
    }
  end

  @doc """
  The `:trace` calls that set the plan's steps with `flags` (`[:local]` or `[:global]`),
  as `{ops, after}`: `{fun, args}` for `:trace.fun(session, args...)`, the `after` ones to
  run whether the others succeeded or not (`KinoTrace.Backend.run/3`).

  A process that loops through a tail call must never see a return action on it, even
  for the moment between a module-wide step and the step that takes the returns off
  that function again: one return frame per iteration stays on its stack for good, and
  a `:trace.function/4` call can take a long time on a busy system. While such steps are
  set, the session's existing processes are `:silent` (the VM then neither reports
  their calls nor pushes return frames).

      iex> plan = %KinoTrace.Plan.Functions{steps: [{{M, :_, :_}, true}], transient_returns: true}
      iex> KinoTrace.Plan.Functions.install_ops(plan, [:local])
      {[{:process, [:existing, true, [:silent]]}, {:function, [{M, :_, :_}, true, [:local]]}],
       [{:process, [:existing, false, [:silent]]}]}

  A match spec that accepts every call and does nothing else is set as `true`: the same
  trace, but the VM runs no match spec on each call (about 150 ns a call, row 3 of
  bench/RESULTS.md).

      iex> plan = %KinoTrace.Plan.Functions{steps: [{{M, :f, 1}, [{:_, [], []}]}, {{M, :g, 1}, [{:_, [], [{:return_trace}]}]}]}
      iex> KinoTrace.Plan.Functions.install_ops(plan, [:local])
      {[{:function, [{M, :f, 1}, true, [:local]]}, {:function, [{M, :g, 1}, [{:_, [], [{:return_trace}]}], [:local]]}], []}
  """
  @spec install_ops(t(), [:local | :global]) :: {[{atom(), list()}], [{atom(), list()}]}
  def install_ops(%__MODULE__{} = plan, flags) do
    steps = for {target, spec} <- plan.steps, do: {:function, [target, vm_spec(spec), flags]}

    # :existing, not :all: turning a flag off for :all also clears what new processes get.
    if plan.transient_returns,
      do:
        {[{:process, [:existing, true, [:silent]]} | steps],
         [{:process, [:existing, false, [:silent]]}]},
      else: {steps, []}
  end

  defp vm_spec([{:_, [], []}]), do: true
  defp vm_spec(spec), do: spec

  @doc """
  The same plan with every return action removed: the match specs of a process whose
  returns are no longer traced.

      iex> plan = %KinoTrace.Plan.Functions{steps: [{{M, :f, 1}, [{:_, [], [{:exception_trace}, {:message, {:caller}}]}]}]}
      iex> KinoTrace.Plan.Functions.without_returns(plan).steps
      [{{M, :f, 1}, [{:_, [], [{:message, {:caller}}]}]}]
  """
  @spec without_returns(t()) :: t()
  def without_returns(%__MODULE__{steps: steps} = plan) do
    steps =
      for {target, spec} <- steps do
        {target, if(spec == false, do: false, else: remove_returns(spec))}
      end

    %{plan | steps: steps, transient_returns: false}
  end

  defp remove_returns(spec) do
    spec
    |> Enum.map(fn {head, guards, body} ->
      {head, guards, body -- [{:return_trace}, {:exception_trace}]}
    end)
    |> Enum.uniq()
  end

  @doc """
  The BIFs the plan traces, each with the match spec it ends up with, in the form
  `:trace.function/4` takes. Setting them again switches their tracing back on after
  OTP 27.3 switched it off (erlang/otp#10349, see `KinoTrace.Backend.BifWorkaround`). A step on every
  module (`{:_, :_, :_}`) is left out.

      iex> {:ok, ets} = KinoTrace.Pattern.parse(":ets.insert/2")
      iex> {:ok, enum} = KinoTrace.Pattern.parse("Enum.map/2")
      iex> plan = KinoTrace.Plan.Functions.build([ets, enum], [], [])
      iex> KinoTrace.Plan.Functions.bif_steps(plan)
      [{{:ets, :insert, 2}, true}]
  """
  @spec bif_steps(t()) :: [{mfa(), list() | boolean()}]
  def bif_steps(%__MODULE__{steps: steps}) do
    steps
    |> Enum.reduce(%{}, fn {target, spec}, acc ->
      Enum.reduce(KinoTrace.Base.Bifs.bifs(target), acc, &Map.put(&2, &1, vm_spec(spec)))
    end)
    |> Enum.sort()
  end

  @doc """
  The distinct targets of `patterns`, to clear them with `:trace.function/4`.
  Clearing these clears every step of their plan (each step is covered by one).
  """
  @spec targets([Pattern.t()]) :: [mfa_pattern()]
  def targets(patterns), do: patterns |> Enum.map(&Pattern.mfa/1) |> Enum.uniq()

  # The compiler's functions (KinoTrace.Pattern.Generated) a module-wide pattern covers
  # and no pattern names: set after the module's step, untraced. Not on a tail-call
  # cycle nor in `no_returns`, so they never make `install/3` silence anything.
  defp generated_off(by_target, lookup) do
    wide = for {m, :_, :_} <- Map.keys(by_target), m != :_, do: m
    exports = if wide == [], do: %{}, else: Lookup.module_info(lookup, wide, [:exports])

    for m <- wide,
        {^m, f, _a} = mfa <- Generated.of(m, Map.get(exports[m], :exports, [])),
        not is_map_key(by_target, {m, f, :_}) and not is_map_key(by_target, mfa),
        do: {mfa, false}
  end

  # The functions on a tail-call cycle covered by a pattern with a wildcard.
  defp overrides(by_target, cycles) do
    wide =
      for {m, _f, :_} = target <- Map.keys(by_target), m != :_, into: MapSet.new(), do: target

    for {m, %MapSet{} = set} <- cycles,
        {f, a} <- set,
        MapSet.member?(wide, {m, :_, :_}) or MapSet.member?(wide, {m, f, :_}),
        do: {m, f, a}
  end

  # Everything, then modules, then functions, then functions with an arity.
  defp sort_broad_first(targets) do
    groups = Enum.group_by(targets, &specificity/1)
    Enum.flat_map(0..3, &Map.get(groups, &1, []))
  end

  defp specificity({:_, _, _}), do: 0
  defp specificity({_, :_, _}), do: 1
  defp specificity({_, _, :_}), do: 2
  defp specificity(_), do: 3

  defp coverers({:_, _, _}), do: [{:_, :_, :_}]
  defp coverers({m, :_, _}), do: [{:_, :_, :_}, {m, :_, :_}]
  defp coverers({m, f, :_}), do: [{:_, :_, :_}, {m, :_, :_}, {m, f, :_}]
  defp coverers({m, f, a}), do: [{:_, :_, :_}, {m, :_, :_}, {m, f, :_}, {m, f, a}]
end
