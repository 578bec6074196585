defmodule KinoTrace.Limits do
  @moduledoc false
  # The one definition of kino_trace's limits: each one's default, its upper bound and the
  # code that enforces it. Everything else takes them from here:
  #
  #   * `KinoTrace.Plan.Options` checks the options against these bounds and fills in
  #     these defaults (no tracer session is made to learn them);
  #   * the native tracer includes `c_src/core/limits.hpp` and the fallback tracer
  #     `src/kino_trace_limits.hrl`, both generated from this table by
  #     `mix kino_trace.limits` (mix/kino_trace.limits.ex) and committed, so that a fresh
  #     clone and the standalone C++ tests build without Elixir;
  #   * the table of guides/options_and_limits.md shows them.
  #
  # test/kino_trace/limits_test.exs fails when a generated file differs from what this
  # table gives, and when the native tracer (`KinoTrace.Tracer.limits/0`), the fallback
  # tracer or the guide disagree with it. To change a limit: change it here, run
  # `mix kino_trace.limits`, and commit the regenerated files with it.
  #
  # Each row is one number a tracer reads, named as the tracers name it: `:limit` is
  # `limit` from `Kino.Trace.calls/2` to `c_src/core/session_core.hpp` and
  # `src/kino_trace_fallback_process.erl` (its drops keep their reason's name,
  # `max_events`, which `Kino.Trace.info/1` shows).
  #
  #   * `option`: where the user gives it: an option, or `{option, part}` for a part of
  #     one (`rate: {count, ms}`, `queue: [events: n, bytes: n]`); `{:record, option}`
  #     for an option of `Kino.Trace.record/2` only (`events:`, `bytes:`...,
  #     `KinoTrace.Plan.Record`); nil for a bound of the fallback tracer's own that no
  #     option sets;
  #   * `default`: nil for "none" (the tracers read nil, or 0, as none);
  #   * `capture`: the default of `Kino.Trace.capture/3`, where it differs (a capture
  #     keeps every event of its block, up to a larger limit; its queue holds as many
  #     events as its `:limit`);
  #   * `max`: the largest value accepted; nil for no bound but the positive integers;
  #   * `unit`: what it counts, as the guide and the error messages say it;
  #   * `enforced_by`: where a value is enforced, one entry per tracer or process that does.

  @u64 0xFFFF_FFFF_FFFF_FFFF
  @u32 0xFFFF_FFFF

  @limits [
    %{
      name: :limit,
      option: :limit,
      default: nil,
      max: @u64,
      unit: "events",
      capture: 1_000_000,
      why: "the native tracer's counters are 64-bit",
      enforced_by: [
        "c_src/core/session_core.hpp (BasicSessionCore::admit, use_ticket: tickets)",
        "src/kino_trace_fallback_process.erl (offer/2: dropped_max_events)"
      ]
    },
    %{
      name: :rate_count,
      option: {:rate, :count},
      default: nil,
      max: 1_000_000_000,
      unit: "events",
      why: "keeps the token bucket's arithmetic in range",
      enforced_by: [
        "c_src/core/rate_limiter.hpp (RateLimiter, through BasicSessionCore::admit)",
        "src/kino_trace_fallback_process.erl (admit/5: dropped_rate)"
      ]
    },
    %{
      name: :rate_period_ms,
      option: {:rate, :period},
      default: nil,
      max: 86_400_000,
      unit: "ms",
      why: "keeps the token bucket's arithmetic in range (one day)",
      enforced_by: [
        "c_src/core/rate_limiter.hpp (RateLimiter, through BasicSessionCore::admit)",
        "src/kino_trace_fallback_process.erl (admit/5: dropped_rate)"
      ]
    },
    %{
      name: :queue_events,
      option: {:queue, :events},
      default: 100_000,
      max: @u64,
      unit: "events",
      capture: 1_000_000,
      why: "the native tracer's counters are 64-bit",
      enforced_by: [
        "c_src/core/session_core.hpp (BasicSessionCore::admit: credit)",
        "src/kino_trace_fallback_process.erl (admit/5: dropped_queue_full)"
      ]
    },
    %{
      name: :queue_bytes,
      option: {:queue, :bytes},
      default: 64 * 1024 * 1024,
      max: @u64,
      unit: "bytes",
      capture: 256 * 1024 * 1024,
      why: "the native tracer's counters are 64-bit",
      enforced_by: [
        "c_src/core/session_core.hpp (BasicSessionCore::commit: byte credit)",
        "src/kino_trace_fallback_process.erl (admit/5: dropped_queue_full)"
      ]
    },
    %{
      name: :max_depth,
      option: :max_depth,
      default: 10,
      max: 100,
      unit: "levels",
      why: "the term walk recurses once per level",
      enforced_by: [
        "c_src/core/term_codec.hpp (TermEncoder)",
        "src/kino_trace_fallback_terms.erl"
      ]
    },
    %{
      name: :max_items,
      option: :max_items,
      default: 50,
      max: @u32,
      unit: "items",
      capture: 100,
      why: "TermCaps holds it in 32 bits",
      enforced_by: [
        "c_src/core/term_codec.hpp (TermEncoder)",
        "src/kino_trace_fallback_terms.erl"
      ]
    },
    %{
      name: :max_binary,
      option: :max_binary,
      default: 512,
      max: 1_073_741_824,
      unit: "bytes",
      capture: 4096,
      why:
        "an event's payload holds about max_bytes plus one piece of at most max_binary, twice: " <>
          "with both at most 1 GiB it stays far below the 4 GiB a PayloadBuffer holds",
      enforced_by: [
        "c_src/core/term_codec.hpp (TermEncoder)",
        "src/kino_trace_fallback_terms.erl"
      ]
    },
    %{
      name: :max_bytes,
      option: :max_bytes,
      default: 16_384,
      max: 1_073_741_824,
      unit: "bytes",
      capture: 65_536,
      why: "as max_binary's",
      enforced_by: [
        "c_src/core/term_codec.hpp (TermWriter::over_budget)",
        "src/kino_trace_fallback_terms.erl"
      ]
    },
    %{
      name: :timeout,
      option: :timeout,
      default: nil,
      max: @u32,
      unit: "ms",
      why: "the longest timer the VM takes (about 49.7 days)",
      enforced_by: ["lib/kino_trace/session.ex (handle_continue(:setup): its timer)"]
    },
    %{
      name: :history,
      option: :history,
      default: 10_000,
      max: @u32,
      unit: "events",
      capture: 1,
      why: "a bound on the history kept in memory",
      enforced_by: ["lib/kino_trace/history.ex (KinoTrace.History)"]
    },
    %{
      name: :slowest,
      option: :slowest,
      default: nil,
      max: 100,
      unit: "calls per function",
      why: "a bound on the slow calls kept whole, per function",
      enforced_by: ["lib/kino_trace/latency/slow_calls.ex (KinoTrace.Latency.SlowCalls)"]
    },
    %{
      name: :slower_than_kept,
      option: nil,
      default: 1_000,
      max: nil,
      unit: "calls",
      why: "a bound on the calls over `slower_than:` kept whole (the newest; the others counted)",
      enforced_by: ["lib/kino_trace/latency/slow_calls.ex (put_over/2)"]
    },
    %{
      name: :slow_call_events,
      option: nil,
      default: 200,
      max: nil,
      unit: "events",
      why: "a bound on the events kept with each slow call (its call tree; the rest cut)",
      enforced_by: ["lib/kino_trace/latency/slow_calls.ex (bound_events/1)"]
    },
    %{
      name: :slow_kept_events,
      option: nil,
      default: 100_000,
      max: nil,
      unit: "events",
      why:
        "a bound on the events the kept slow calls hold in all (past it, calls are kept without them)",
      enforced_by: ["lib/kino_trace/latency/slow_calls.ex (within_budget/3)"]
    },
    %{
      name: :slow_open_calls,
      option: nil,
      default: 100_000,
      max: nil,
      unit: "calls",
      why:
        "a bound on the open calls whose arguments are kept for slow calls, all processes together",
      enforced_by: ["lib/kino_trace/latency/slow_calls.ex (add_one/3)"]
    },
    %{
      name: :record_events,
      option: {:record, :events},
      default: 100_000,
      max: @u32,
      unit: "events",
      why: "a bound on a recorder's ring (Kino.Trace.record/2) kept in memory",
      enforced_by: ["lib/kino_trace/history.ex (KinoTrace.History: overwritten)"]
    },
    %{
      name: :record_bytes,
      option: {:record, :bytes},
      default: 64 * 1024 * 1024,
      max: @u64,
      unit: "bytes",
      why: "the ring counts its bytes in 64 bits",
      enforced_by: ["lib/kino_trace/history.ex (KinoTrace.History: overwritten)"]
    },
    %{
      name: :snapshots,
      option: {:record, :snapshots},
      default: 8,
      max: 1_000,
      unit: "snapshots",
      why: "each snapshot is a process holding its events",
      enforced_by: ["lib/kino_trace/session/recorder.ex (KinoTrace.Session.Recorder: dropped)"]
    },
    %{
      name: :snapshot_bytes,
      option: {:record, :snapshot_bytes},
      default: 256 * 1024 * 1024,
      max: @u64,
      unit: "bytes",
      why: "the snapshots' bytes are counted in 64 bits",
      enforced_by: ["lib/kino_trace/session/recorder.ex (KinoTrace.Session.Recorder: dropped)"]
    },
    %{
      name: :telemetry_events,
      option: nil,
      default: 64,
      max: nil,
      unit: "events",
      why: "a bound on the :telemetry events one recorder's trigger attaches a handler to",
      enforced_by: ["lib/kino_trace/plan/record.ex (trigger!: telemetry)"]
    },
    %{
      name: :mailbox,
      option: nil,
      default: 10_000,
      max: nil,
      unit: "messages",
      why: "the fallback tracer's mailbox guard",
      enforced_by: ["src/kino_trace_fallback_process.erl (the mailbox guard)"]
    },
    %{
      name: :mailbox_bytes,
      option: nil,
      default: 64 * 1024 * 1024,
      max: nil,
      unit: "bytes",
      why: "the fallback tracer's mailbox guard",
      enforced_by: ["src/kino_trace_fallback_process.erl (the mailbox guard)"]
    }
  ]

  @type name :: atom()
  @type row :: %{
          required(:name) => name(),
          required(:option) => atom() | {atom(), atom()} | nil,
          required(:default) => non_neg_integer() | nil,
          optional(:capture) => non_neg_integer(),
          required(:max) => pos_integer() | nil,
          required(:unit) => String.t(),
          required(:why) => String.t(),
          required(:enforced_by) => [String.t()]
        }

  @doc """
  Every limit, in the table's order.

      iex> KinoTrace.Limits.table() |> Enum.map(& &1.name) |> Enum.take(3)
      [:limit, :rate_count, :rate_period_ms]
  """
  @spec table() :: [row()]
  def table, do: @limits

  @doc """
  The row of a limit.

      iex> KinoTrace.Limits.row(:max_depth).max
      100
  """
  @spec row(name()) :: row()
  def row(name),
    do:
      Enum.find(@limits, &(&1.name == name)) || raise(ArgumentError, "no limit #{inspect(name)}")

  @doc """
  A limit's default (nil: none).

      iex> KinoTrace.Limits.default(:queue_events)
      100000
  """
  @spec default(name()) :: non_neg_integer() | nil
  def default(name), do: row(name).default

  @doc """
  A limit's default in `Kino.Trace.capture/3`.

      iex> KinoTrace.Limits.capture_default(:limit)
      1000000
      iex> KinoTrace.Limits.capture_default(:max_depth)
      10
  """
  @spec capture_default(name()) :: non_neg_integer() | nil
  def capture_default(name), do: Map.get(row(name), :capture, default(name))

  @doc """
  A limit's upper bound (nil: any positive integer).

      iex> KinoTrace.Limits.max(:rate_period_ms)
      86400000
  """
  @spec max(name()) :: pos_integer() | nil
  def max(name), do: row(name).max

  @doc """
  The limits a tracer reads (`:native`: the rows enforced under `c_src/`, `:fallback`:
  under `src/`) as the tracers report theirs (`KinoTrace.Tracer.limits/0`,
  `:kino_trace_fallback_limits.table/0`): `{default, max}` each, a default of none as 0
  and no bound as nil.

      iex> KinoTrace.Limits.tracer_view(:native)[:max_items]
      {50, 4294967295}
  """
  @spec tracer_view(:native | :fallback) :: %{name() => {non_neg_integer(), pos_integer() | nil}}
  def tracer_view(tracer) do
    prefix = if tracer == :native, do: "c_src/", else: "src/"

    for %{name: name, default: default, max: max, enforced_by: by} <- @limits,
        Enum.any?(by, &String.starts_with?(&1, prefix)),
        into: %{},
        do: {name, {default || 0, max}}
  end
end
