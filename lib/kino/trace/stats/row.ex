defmodule Kino.Trace.Stats.Row do
  @moduledoc """
  The statistics of one function in a `Kino.Trace.Stats.Snapshot`.

  Time is the time the function ran while its process was scheduled in, in
  microseconds: time spent waiting (in `receive`, `Process.sleep/1`, or for a
  scheduler) is not counted, nor is time spent in other functions measured by the
  same session (those have their own rows). Memory is the number of words the function
  allocated on its process heap, likewise without other measured functions.

  Per-process figures are in `:processes`, sorted by time (by calls when time is not
  measured), highest first.
  """

  defstruct [
    :mfa,
    calls: 0,
    time_us: nil,
    per_call_us: nil,
    time_share: nil,
    memory_words: nil,
    per_call_words: nil,
    memory_share: nil,
    latency: nil,
    processes: []
  ]

  @typedoc """
  One process's part of a function's figures; with `latency: true`, `:latency` is its
  calls' distribution (as the row's, `nil` before one of them returned).
  """
  @type process :: %{
          required(:pid) => pid(),
          required(:name) => atom() | nil,
          required(:calls) => non_neg_integer(),
          required(:time_us) => non_neg_integer() | nil,
          required(:memory_words) => non_neg_integer() | nil,
          optional(:latency) => map() | nil
        }

  @typedoc """
    * `:mfa` - the function
    * `:calls` - completed and running calls counted
    * `:time_us`, `:per_call_us` - total and mean time, in microseconds (`nil` when not
      measured)
    * `:time_share` - the share (0.0 to 1.0) of the snapshot's total time
    * `:memory_words`, `:per_call_words`, `:memory_share` - likewise for memory, in words
    * `:latency` - with `latency: true`, the function's latency distribution as
      `Kino.Trace.latency/2` gives it (`:count`, `:min`, `:p50`, `:p90`, `:p99`,
      `:p999`, `:max` in microseconds of wall time, `:histogram`, `:exceptions`,
      `:unknown`), `nil` without it or before a call of it returned
    * `:processes` - per-process breakdown
  """
  @type t :: %__MODULE__{
          mfa: mfa(),
          calls: non_neg_integer(),
          time_us: non_neg_integer() | nil,
          per_call_us: float() | nil,
          time_share: float() | nil,
          memory_words: non_neg_integer() | nil,
          per_call_words: float() | nil,
          memory_share: float() | nil,
          latency: map() | nil,
          processes: [process()]
        }

  @doc false
  @spec build(mfa(), map(), boolean(), boolean()) :: t()
  def build(mfa, counters, time?, memory?) do
    times =
      for {pid, count, s, us} <- list(counters[:call_time]), do: {pid, count, s * 1_000_000 + us}

    memory = for {pid, count, words} <- list(counters[:call_memory]), do: {pid, count, words}

    processes = merge(times, memory, time?, memory?)

    calls =
      cond do
        processes != [] -> Enum.reduce(processes, 0, &(&1.calls + &2))
        is_integer(counters[:call_count]) -> counters[:call_count]
        true -> 0
      end

    time_us = if time?, do: Enum.reduce(processes, 0, &(&1.time_us + &2))
    memory_words = if memory?, do: Enum.reduce(processes, 0, &(&1.memory_words + &2))

    %__MODULE__{
      mfa: mfa,
      calls: calls,
      time_us: time_us,
      per_call_us: per_call(time_us, calls),
      memory_words: memory_words,
      per_call_words: per_call(memory_words, calls),
      processes: Enum.sort_by(processes, &{-(&1.time_us || 0), -&1.calls})
    }
  end

  defp list(value) when is_list(value), do: value
  defp list(_false_or_undefined), do: []

  # Calls come from call_time when it runs (it may run only to count), else call_memory.
  defp merge(times, memory, time?, memory?) do
    by_pid =
      Enum.reduce(times, %{}, fn {pid, count, us}, acc ->
        Map.put(acc, pid, %{pid: pid, calls: count, time_us: us, memory_words: nil})
      end)

    by_pid =
      Enum.reduce(memory, by_pid, fn {pid, count, words}, acc ->
        Map.update(
          acc,
          pid,
          %{pid: pid, calls: count, time_us: 0, memory_words: words},
          &%{&1 | memory_words: words}
        )
      end)

    for {pid, p} <- by_pid do
      %{
        pid: pid,
        name: registered_name(pid),
        calls: p.calls,
        time_us: if(time?, do: p.time_us || 0),
        memory_words: if(memory?, do: p.memory_words || 0)
      }
    end
  end

  defp registered_name(pid) when is_pid(pid) and node(pid) == node() do
    case Process.info(pid, :registered_name) do
      {:registered_name, name} when is_atom(name) -> name
      _ -> nil
    end
  end

  defp registered_name(_pid), do: nil

  defp per_call(nil, _calls), do: nil
  defp per_call(_total, 0), do: nil
  defp per_call(total, calls), do: total / calls

  @doc false
  @spec put_shares(t(), non_neg_integer() | nil, non_neg_integer() | nil) :: t()
  def put_shares(row, total_time, total_memory) do
    %{
      row
      | time_share: share(row.time_us, total_time),
        memory_share: share(row.memory_words, total_memory)
    }
  end

  defp share(nil, _total), do: nil
  defp share(_part, 0), do: 0.0
  defp share(part, total), do: part / total

  @doc """
  The function as people read it, `Module.function/arity` (an anonymous function's
  body reads as `anonymous fn/1 in Module.function/2`).

      iex> Kino.Trace.Stats.Row.name({Enum, :map, 2})
      "Enum.map/2"
      iex> Kino.Trace.Stats.Row.name({:ets, :insert, 2})
      ":ets.insert/2"
      iex> Kino.Trace.Stats.Row.name({MyApp, :"-run/2-fun-0-", 1})
      "anonymous fn/1 in MyApp.run/2"
      iex> Kino.Trace.Stats.Row.name({Enum, :"-sum/1-lists^foldl/2-0-", 2})
      "anonymous fn/2 in Enum.sum/1"
  """
  @spec name(t() | mfa()) :: String.t()
  def name(%__MODULE__{mfa: mfa}), do: name(mfa)
  def name({m, f, a}), do: KinoTrace.Base.MFA.label({m, f, a})

  @doc """
  The function as unique text (two anonymous functions of one function differ).

      iex> Kino.Trace.Stats.Row.key({MyApp, :"-run/2-fun-0-", 1})
      ~s(MyApp."-run/2-fun-0-"/1)
      iex> Kino.Trace.Stats.Row.key({Enum, :map, 2})
      "Enum.map/2"
  """
  @spec key(t() | mfa()) :: String.t()
  def key(%__MODULE__{mfa: mfa}), do: key(mfa)
  def key({m, f, a}), do: KinoTrace.Base.MFA.to_string({m, f, a})
end
