defmodule KinoTrace.Backend.BifWorkaround do
  @moduledoc false
  # The one facade of the OTP 27.3 BIF work-around (erlang/otp#10349, fixed upstream:
  # destroying any trace session, or clearing a BIF's pattern in one, switches off the
  # tracing of every BIF in every other session). `KinoTrace.Backend.Reaper` runs it
  # (its moduledoc tells how); everything else asks here, so what a trace must do about
  # the bug is written in one place:
  #
  #   * a trace of BIFs checks in before it sets its patterns (`check_in/1`) and out
  #     when it ends (`check_out/0`): the session (`KinoTrace.Session.Safeguards`) and the
  #     stats server;
  #   * a running trace of BIFs sets its BIF patterns again, in turn (`reassert_batch/3`);
  #   * a trace session is destroyed only through the reaper (`destroy/2`), and a BIF's
  #     pattern is never cleared (`untrace_ops/2`): the backend's modes of this node
  #     (`KinoTrace.Backend.Local`), the session's setup and its stack guard, and the
  #     capture's trace of sends;
  #   * a trace that must know whether BIF calls went untraced (a capture's: its plan
  #     says so, `Kino.Trace.Plan.watch_bifs/1`) watches the BIFs of `covered/1`, from
  #     before its BIF patterns are set until it ends (`watch/1`, `switch_offs/1`,
  #     `unwatch/1`): the session, which tells them in its info (`untraced_bifs`).
  #
  # On a VM without the bug every part of it is a no-op but `destroy/2`, which destroys.

  alias KinoTrace.Plan.Functions
  alias KinoTrace.Backend.Reaper
  alias KinoTrace.Base.Bifs

  @typedoc "A BIF step: a BIF with the match spec it is traced with (`:trace.function/4`'s)."
  @type bif_step :: {mfa(), list() | boolean()}

  @typedoc "A function pattern, `:_` as wildcards."
  @type target :: {atom(), atom(), atom() | arity()}

  @doc """
  Checks the calling process in as running a trace of BIFs when `what` covers BIFs:
  a plan's functions (a step on every module covers them all) or `{m, f, a}` targets.
  Call it before setting the patterns. Returns the plan's BIF steps, to set again
  (`reassert_batch/3`), or the targets that are or cover BIFs.
  """
  @spec check_in(Functions.t()) :: [bif_step()]
  @spec check_in([target()]) :: [target()]
  def check_in(%Functions{} = functions) do
    bifs = Functions.bif_steps(functions)

    if bifs != [] or Enum.any?(functions.steps, &match?({{:_, _, _}, _}, &1)),
      do: Reaper.bif_trace()

    bifs
  end

  def check_in(targets) when is_list(targets) do
    bifs = for {m, f, a} = target <- targets, Bifs.bif?(m, f, a), do: target
    if bifs != [], do: Reaper.bif_trace()
    bifs
  end

  @doc "The calling process no longer runs a trace of BIFs (call it before its session is destroyed)."
  @spec check_out() :: :ok
  def check_out, do: Reaper.bif_trace_ended()

  @doc """
  The next `count` of a running trace's BIF steps to set again, from `cursor` on, in
  turn, and the cursor after them; `nil` when there is nothing to set again (no BIF
  step, or a VM without the bug).

      iex> KinoTrace.Backend.BifWorkaround.reassert_batch([], 0, 32)
      nil
  """
  @spec reassert_batch([bif_step()], non_neg_integer(), non_neg_integer()) ::
          {[bif_step()], non_neg_integer()} | nil
  def reassert_batch([], _cursor, _count), do: nil

  def reassert_batch(bifs, cursor, count) do
    if Reaper.bif_bug?() do
      n = length(bifs)
      cursor = rem(cursor, n)
      batch = bifs |> Stream.cycle() |> Stream.drop(cursor) |> Enum.take(min(count, n))
      {batch, cursor + length(batch)}
    end
  end

  @doc """
  The `:trace.function/4` calls that stop tracing `targets` without switching BIF
  tracing off elsewhere (see `KinoTrace.Backend.Reaper.untrace_ops/2`).
  """
  @spec untrace_ops([target()], [:local | :global]) :: [{:function, list()}]
  defdelegate untrace_ops(targets, flags), to: Reaper

  @doc """
  Destroys a trace session (a handle from `:trace.session_create/3`) through the reaper:
  now, or once no trace of BIFs runs (see `KinoTrace.Backend.Reaper.destroy/2`).
  """
  @spec destroy(term(), [target()]) :: :ok
  defdelegate destroy(session, functions \\ []), to: Reaper

  @doc """
  The BIFs a plan's functions trace, to watch: the steps on every module (they cover
  every BIF) and each BIF a step covers, but those with a match spec of `false`.

      iex> {:ok, ets} = KinoTrace.Pattern.parse(":ets.insert/2")
      iex> {:ok, enum} = KinoTrace.Pattern.parse("Enum.map/2")
      iex> KinoTrace.Backend.BifWorkaround.covered(KinoTrace.Plan.Functions.build([ets, enum], [], []))
      [{:ets, :insert, 2}]
  """
  @spec covered(Functions.t()) :: [target()]
  def covered(%Functions{} = functions) do
    every = for {{:_, _, _} = target, spec} <- functions.steps, spec != false, do: target
    bifs = for {mfa, spec} <- Functions.bif_steps(functions), spec != false, do: mfa
    Enum.uniq(every ++ bifs)
  end

  @doc """
  Starts watching for BIF tracing being switched off, until `unwatch/1` or `owner`
  exits: the watch and the count of switch-offs so far (see
  `KinoTrace.Backend.Reaper.watch/1`).
  """
  @spec watch(pid()) :: {reference() | nil, non_neg_integer()}
  defdelegate watch(owner), to: Reaper

  @doc "The count of switch-offs so far, checked once more, the watch going on."
  @spec switch_offs(reference() | nil) :: non_neg_integer()
  defdelegate switch_offs(watch), to: Reaper

  @doc "Ends a watch: the count of switch-offs, the same as `watch/1`'s when none happened."
  @spec unwatch(reference() | nil) :: non_neg_integer()
  defdelegate unwatch(watch), to: Reaper
end
