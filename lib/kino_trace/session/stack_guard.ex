defmodule KinoTrace.Session.StackGuard do
  @moduledoc false
  # Turns return tracing off for a process whose stack keeps growing.
  #
  # Return tracing leaves a frame on the traced process's stack at every traced call,
  # removed when the call returns. `KinoTrace.Plan.TailCalls` finds the loops it can see in
  # a module's code and `KinoTrace.Plan.Functions` traces them without returns; loops it
  # cannot see (through a fun, across modules, in a module without object code, such as
  # one defined in a Livebook cell) are this guard's: a session samples the stack size of
  # the processes that made calls with return tracing (every 200 ms, at most 64
  # processes), and a process whose stack grew at 3 samples with no shrink in between
  # and holds at least 8 192 words is moved to a second OTP trace session with
  # the same tracer session (native or fallback), whose match specs have no return actions. Its calls are
  # still traced, without returns; `Kino.Trace.info/1` counts it in `:stack_guarded`.
  #
  # Sampling is too slow for a tight loop, which pushes a frame every microsecond or so
  # (a module compiled in memory reached 344 k words in 300 ms). So the session also
  # hands `loops/2` every batch of events it decodes (and when the plan traces a module
  # with no object file, the guard's session is made at once, so that moving takes two
  # `:trace.process/4` calls): a process with 256 open calls
  # (calls with no return yet) whose last one is of a function that is on its stack only
  # once (`Process.info(pid, :current_stacktrace)`: a tail call replaced every other
  # frame of it) loops through tail calls, and is moved at once. A process deep in a
  # recursion that is not a tail call has that function on its stack more than once, and
  # is left to the sampling.
  #
  # Both are late under load: the session process that decodes and samples competes for
  # a scheduler with the loop it watches (a loop of a module compiled in memory reached
  # 220-236 K words in 2 s beside a CPU hog). So for the modules with no object file the
  # bound is the tracer's own (issue 36.5): `watch/3` names them to the tracer, which
  # counts each process's open calls of them where it sees them (the native tracer in the
  # traced process's own trace callbacks, `c_src/core/loop_guard.hpp`; the pure-Erlang
  # one as its process receives their messages) and holds a process with too many (the
  # native tracer, at 4 096, discards its calls, so the VM pushes no return-trace frame
  # for them; the fallback, at 1 024 counting its mailbox, switches its call flag off)
  # and tells the session. `held/3` then moves it when it loops through tail calls, or
  # lets it go on (its calls traced with their returns again) when it does not (a deep
  # recursion).

  alias KinoTrace.Plan.Functions
  alias KinoTrace.Backend
  alias KinoTrace.Backend.BifWorkaround

  @interval 200
  @rises 3
  @min_words 8_192
  @max_watched 64
  @max_guarded 10_000
  # open calls from which a process may be looping through tail calls
  @loop_depth 256

  defstruct [
    # this node's backend (KinoTrace.Backend.Native or Fallback): its tracer's calls
    :backend,
    :main,
    :session,
    :plan,
    :flags,
    :call_flags,
    watched: %{},
    guarded: %{},
    count: 0
  ]

  @type t :: %__MODULE__{}

  @doc """
  How often a session samples stack sizes, in milliseconds.

  ## Examples

  The decision is a pure function of the samples:

      iex> alias KinoTrace.Session.StackGuard
      iex> pid = self()
      iex> {watched, []} = StackGuard.observe(%{}, [{pid, 10_000}])
      iex> {watched, []} = StackGuard.observe(watched, [{pid, 12_000}])
      iex> {watched, []} = StackGuard.observe(watched, [{pid, 14_000}])
      iex> StackGuard.observe(watched, [{pid, 16_000}])
      {%{}, [pid]}

  A stack that shrinks starts the count again, and a small one is left alone:

      iex> alias KinoTrace.Session.StackGuard
      iex> pid = self()
      iex> samples = [20_000, 21_000, 19_000, 22_000, 23_000]
      iex> Enum.reduce(samples, {%{}, []}, fn n, {w, _} -> StackGuard.observe(w, [{pid, n}]) end)
      {%{pid => {23_000, 2}}, []}
      iex> Enum.reduce([10, 20, 30, 40, 50], {%{}, []}, fn n, {w, _} -> StackGuard.observe(w, [{pid, n}]) end)
      {%{pid => {50, 4}}, []}
  """
  @spec interval() :: pos_integer()
  def interval, do: @interval

  @doc """
  A guard for the OTP trace session of `backend` (the main one), or `nil` when the
  trace has no return actions (`return: false, exceptions: false`) or no calls.
  """
  @spec new(Backend.local(), Kino.Trace.Plan.t()) :: t() | nil
  def new(_backend, %Kino.Trace.Plan{calls: nil}), do: nil

  def new(backend, %Kino.Trace.Plan{calls: calls}) do
    if calls.returns != [] do
      %__MODULE__{
        backend: backend,
        main: backend.session,
        flags: calls.match_flags,
        call_flags: Backend.flags(backend, calls.flags)
      }
    end
  end

  @doc """
  Takes the call flags of the moved processes off the main session again, after the
  fallback tracer's mailbox guard had the main session's flags set again.
  """
  @spec restore(t() | nil) :: :ok
  def restore(nil), do: :ok

  def restore(guard) do
    for pid <- Map.keys(guard.guarded) do
      try do
        :trace.process(guard.main, pid, false, [:call])
      rescue
        ArgumentError -> :ok
      end
    end

    :ok
  end

  @doc "The processes the guard moved off the main session (a map keyed by pid)."
  @spec moved(t() | nil) :: %{pid() => true}
  def moved(nil), do: %{}
  def moved(guard), do: guard.guarded

  @doc "Number of processes whose return tracing the guard turned off."
  @spec count(t() | nil) :: non_neg_integer()
  def count(nil), do: 0
  def count(guard), do: guard.count

  @doc """
  Applies a new plan: the guard's own session, when it has one, gets the plan's match
  specs without return actions.
  """
  @spec set_plan(t() | nil, Functions.t()) :: t() | nil
  def set_plan(nil, _plan), do: nil

  def set_plan(guard, plan) do
    guard = %{guard | plan: Functions.without_returns(plan)}

    cond do
      guard.session != nil -> tap(guard, &apply_plan/1)
      # made now, so that moving a loop of such a module is quick (see loops/2)
      in_memory?(plan) -> ensure_session(guard)
      true -> guard
    end
  end

  # Whether the plan traces a module that has no object file (defined in a script or a
  # Livebook cell): KinoTrace.Plan.TailCalls cannot see its loops.
  defp in_memory?(plan), do: in_memory_modules(plan) != []

  @doc """
  Has the backend's tracer count the open calls of the modules of `plan` that have no object file,
  when the trace has return actions (`returns?`; none are counted otherwise): a process
  with too many is held and the session gets `{:kino_trace, id, {:loop, pid, mfa}}`
  (see `held/3`). Called before the plan's match specs are set, so that the count starts
  with the first traced call.
  """
  @spec watch(Backend.local(), Functions.t(), boolean()) :: :ok
  def watch(backend, plan, returns?) do
    modules = if returns?, do: in_memory_modules(plan), else: []
    Backend.set_loop_modules(backend, modules)
  end

  defp in_memory_modules(plan) do
    for {{m, _f, _a}, spec} <- plan.steps,
        m != :_ and spec != false and no_object_file?(m),
        uniq: true,
        do: m
  end

  defp no_object_file?(module) do
    case :code.which(module) do
      path when is_list(path) -> not File.regular?(path)
      _other -> false
    end
  end

  @doc """
  The tracer holds `pid`, which made too many calls of a watched module with no return
  (`watch/3`; `mfa` is its last): when it loops through tail calls (see above) it is
  moved to the guard's session, without returns; otherwise (a deep recursion) it goes
  on, its calls traced with their returns again. Returns the guard and the moved
  processes.
  """
  @spec held(t() | nil, pid(), mfa()) :: {t() | nil, [pid()]}
  def held(nil, _pid, _mfa), do: {nil, []}

  def held(guard, pid, mfa) do
    cond do
      is_map_key(guard.guarded, pid) ->
        Backend.loop_release(guard.backend, pid, true)
        {guard, []}

      tail_loop?(pid, mfa) ->
        {move(pid, guard), [pid]}

      true ->
        # (the fallback switched its call flag off: on again)
        Backend.loop_resume(guard.backend, guard.main, pid, guard.call_flags)
        {guard, []}
    end
  end

  @doc "Clears the `targets` (as `Functions.targets/1` gives them) from the guard's session."
  @spec clear(t() | nil, list()) :: t() | nil
  def clear(%__MODULE__{session: session} = guard, targets) when session != nil do
    # (a BIF's pattern is not cleared: see KinoTrace.Backend.BifWorkaround.untrace_ops/2)
    ops = BifWorkaround.untrace_ops(targets, guard.flags)
    Enum.each(ops, fn {fun, args} -> apply(:trace, fun, [session | args]) end)
    guard
  end

  def clear(guard, _targets), do: guard

  @doc """
  Moves at once the processes of `events` (decoded events, as a session delivers them)
  that loop through tail calls (see above). Returns the guard and the moved processes.
  """
  @spec loops(t() | nil, [Kino.Trace.Event.t()]) :: {t() | nil, [pid()]}
  def loops(nil, _events), do: {nil, []}

  def loops(guard, events) do
    deep =
      Enum.reduce(events, %{}, fn
        %{kind: :call, depth: depth, pid: pid, module: m, function: f, arity: a}, acc
        when is_integer(depth) and depth >= @loop_depth and node(pid) == node() ->
          if is_map_key(guard.guarded, pid), do: acc, else: Map.put(acc, pid, {m, f, a})

        _event, acc ->
          acc
      end)

    # (a list: enumerating the map would load a protocol implementation at the first loop)
    looping = for {pid, mfa} <- Map.to_list(deep), tail_loop?(pid, mfa), do: pid
    {Enum.reduce(looping, guard, &move/2), looping}
  end

  # `mfa` is on the process's stack once: it runs, or a function it called does, and no
  # other call of it waits below (those were tail calls).
  defp tail_loop?(pid, {m, f, a}) do
    case Process.info(pid, :current_stacktrace) do
      {:current_stacktrace, frames} -> Enum.count(frames, &match?({^m, ^f, ^a, _}, &1)) == 1
      nil -> false
    end
  end

  @doc """
  Samples the stack sizes of the watched processes and of `callers` (processes that made
  calls with return tracing lately), at most #{@max_watched} of them, and moves those
  whose stack keeps growing. Returns the guard and the moved processes.
  """
  @spec check(t() | nil, [pid()]) :: {t() | nil, [pid()]}
  def check(nil, _callers), do: {nil, []}

  def check(guard, callers) do
    candidates =
      callers
      |> Enum.reject(&(is_map_key(guard.watched, &1) or is_map_key(guard.guarded, &1)))
      |> Enum.take(max(@max_watched - map_size(guard.watched), 0))

    sizes =
      for pid <- Map.keys(guard.watched) ++ candidates,
          node(pid) == node(),
          {:stack_size, words} <- [Process.info(pid, :stack_size)],
          do: {pid, words}

    {watched, growing} = observe(guard.watched, sizes)
    guard = Enum.reduce(growing, %{guard | watched: watched}, &move/2)
    {guard, growing}
  end

  @doc """
  One sample of `{pid, stack_words}`: returns the processes to keep watching, with their
  last size and how many samples in a row their stack grew, and those to move. Processes
  not in `sizes` are forgotten.
  """
  @spec observe(%{pid() => {non_neg_integer(), non_neg_integer()}}, [{pid(), non_neg_integer()}]) ::
          {%{pid() => {non_neg_integer(), non_neg_integer()}}, [pid()]}
  def observe(watched, sizes) do
    Enum.reduce(sizes, {%{}, []}, fn {pid, words}, {next, growing} ->
      rises =
        case watched do
          %{^pid => {last, rises}} when words > last -> rises + 1
          %{^pid => {last, _rises}} when words < last -> 0
          %{^pid => {_last, rises}} -> rises
          _ -> 0
        end

      if rises >= @rises and words >= @min_words,
        do: {next, [pid | growing]},
        else: {Map.put(next, pid, {words, rises}), growing}
    end)
    |> then(fn {next, growing} -> {next, Enum.reverse(growing)} end)
  end

  @doc "Destroys the guard's session, if it made one."
  @spec stop(t() | nil) :: t() | nil
  def stop(%__MODULE__{session: session} = guard) when session != nil do
    targets = if guard.plan, do: Enum.map(guard.plan.steps, &elem(&1, 0)), else: []
    BifWorkaround.destroy(session, targets)
    %{guard | session: nil}
  end

  def stop(guard), do: guard

  # Moves `pid` from the main session to the guard's, which has no return actions.
  defp move(pid, guard) do
    guard = ensure_session(guard)

    try do
      :trace.process(guard.main, pid, false, [:call])
      :trace.process(guard.session, pid, true, guard.call_flags)
    rescue
      # The process exited meanwhile.
      ArgumentError -> :ok
    end

    # the tracer's loop guard no longer counts it (its calls now open no frame)
    Backend.loop_release(guard.backend, pid, true)
    guarded = if map_size(guard.guarded) >= @max_guarded, do: %{}, else: guard.guarded
    %{guard | guarded: Map.put(guarded, pid, true), count: guard.count + 1}
  end

  defp ensure_session(%__MODULE__{session: nil} = guard) do
    session = Backend.session_create(guard.backend)
    guard = %{guard | session: session}
    if guard.plan, do: apply_plan(guard)
    guard
  end

  defp ensure_session(guard), do: guard

  defp apply_plan(guard) do
    {ops, after_ops} = Functions.install_ops(guard.plan, guard.flags)
    # with the tracer: the fallback's call match specs go with its call flags
    Backend.run(%{guard.backend | session: guard.session}, ops, after_ops)
  end
end
