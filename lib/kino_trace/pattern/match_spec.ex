defmodule KinoTrace.Pattern.MatchSpec do
  @moduledoc false
  # Compiles quoted Elixir argument patterns and guards (as written after
  # `Mod.fun(...) when ...`) into the head and guard parts of a match spec.
  #
  # Variables bind `:"$1"`, `:"$2"`, ... in order of first appearance in the
  # arguments; a variable seen again in the arguments reuses its `$N`, so the
  # match spec only matches when both places hold equal terms. Guards may only
  # use variables bound in the arguments.
  #
  # Every function returns `{:ok, ...}` or `{:error, message}`; errors name the
  # construct that is not supported. `a when b` in a guard is one match spec clause
  # per alternative, so a guard that fails (raises) only fails its own clause.
  #
  # Atoms a match spec reads as variables are escaped: `:_` and `:"$1"`, ... in a
  # head become a fresh variable compared with the atom in the clause's guards;
  # `:"$1"`, `:"$_"`, `:"$$"` in a guard are `{:const, atom}`. Others, such as
  # `:"$gen_call"`, are plain atoms.
  #
  # The quoted forms come from `KinoTrace.Pattern.Quoted`: names that are not
  # atoms are `KinoTrace.Base.Name`s. A variable may have such a name; a
  # literal atom may not (no term can contain an atom that does not exist).
  #
  # This module is the entry point and puts a spec together; three compilers do the
  # work: `MatchSpec.Head` (argument patterns), `MatchSpec.Guard` (guards) and
  # `MatchSpec.Literal` (literal terms, the size bound and the shared errors).

  alias KinoTrace.Pattern.MatchSpec.{Guard, Head, Literal}

  @doc false
  # Compiles argument patterns and a guard (`nil` for none; `a when b` is two
  # clauses) into a match spec head and one guard list per clause. `extra` is a
  # guard every clause must also pass (`nil` for none), over the same variables.
  # Any input this cannot compile is `{:error, message}` naming it.
  #
  # Options: `:max_bytes`, the trace's option of that name (its default when not
  # given): the most the literals of the pattern may build, in all (see
  # `Literal.check_sizes/2`).
  @spec compile([Macro.t()], Macro.t() | nil, Macro.t() | nil, keyword) ::
          {:ok, list, [[term]]} | {:error, String.t()}
  def compile(args, guard, extra \\ nil, opts \\ []) when is_list(args) do
    with :ok <- Literal.check_sizes([args, guard], max_bytes(opts)),
         {:ok, head, checks, vars} <- Head.compile(args),
         {:ok, clauses} <- guard_clauses(guard, vars),
         {:ok, extra} <- extra_guard(extra, vars) do
      clauses = Enum.map(clauses, &(checks ++ &1 ++ extra))
      with :ok <- validate(head, clauses), do: {:ok, head, clauses}
    end
  end

  @doc false
  # The bound on what a pattern's literals build: `opts[:max_bytes]`, else the
  # default of the trace option.
  @spec max_bytes(keyword) :: pos_integer
  def max_bytes(opts) do
    case Keyword.get(opts, :max_bytes) do
      bytes when is_integer(bytes) and bytes > 0 -> bytes
      _ -> KinoTrace.Limits.default(:max_bytes)
    end
  end

  @doc false
  # Runs `fun`, turning an exception into `{:error, message}` naming `what`: a
  # pattern the compiler cannot handle must never crash its caller (a running
  # trace's session). Every entry point from text runs in it; the fuzz test
  # checks that no input ends up here.
  @spec safely(String.t(), (-> result)) :: result | {:error, String.t()} when result: term
  def safely(what, fun) do
    fun.()
  rescue
    error ->
      {:error,
       "the pattern compiler failed on #{what} (#{Exception.format_banner(:error, error)}); " <>
         "this is a bug in kino_trace"}
  end

  # The code above only builds valid specs, but never let a bad one reach
  # `:trace.function/4`: the VM compiles it here first.
  defp validate(head, clauses) do
    spec = for guards <- clauses, do: {head, guards, []}

    case :erlang.match_spec_test(Enum.map(head, fn _ -> nil end), spec, :trace) do
      {:ok, _result, _flags, _messages} ->
        :ok

      {:error, errors} ->
        {:error,
         "invalid match spec: " <>
           Enum.map_join(errors, "; ", fn {_kind, text} -> List.to_string(text) end)}
    end
  end

  defp guard_clauses(nil, _vars), do: {:ok, [[]]}

  defp guard_clauses(guard, vars) do
    with {:ok, conditions} <- Guard.exprs(split_whens(guard), vars),
         do: {:ok, Enum.map(conditions, &[&1])}
  end

  # `a when b when c` is quoted as `a when (b when c)`: one clause each.
  @doc false
  @spec split_whens(Macro.t()) :: [Macro.t()]
  def split_whens({:when, _, [left, right]}), do: [left | split_whens(right)]
  def split_whens(guard), do: [guard]

  defp extra_guard(nil, _vars), do: {:ok, []}

  defp extra_guard(guard, vars) do
    with {:ok, condition} <- Guard.expr(guard, vars), do: {:ok, [condition]}
  end
end
