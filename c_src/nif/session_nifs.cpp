// The session NIFs, called by KinoTrace.Session: make a session, drain its events,
// read its counters, close it; and roundtrip/2, the tracer's copy of one term.
#include <erl_nif.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "atoms.hpp"
#include "drain_loop.hpp"
#include "nifs.hpp"
#include "raw_event.hpp"
#include "session.hpp"
#include "structs.hpp"
#include "term_codec.hpp"
#include "terms.hpp"

namespace kino_trace::nif {

namespace {

// Raises an Elixir ArgumentError with `message`: bad input gets an error that names it.
ERL_NIF_TERM raise_argument_error(ErlNifEnv* env, const std::string& message) {
  ERL_NIF_TERM text;
  unsigned char* bytes = enif_make_new_binary(env, message.size(), &text);
  std::memcpy(bytes, message.data(), message.size());
  return enif_raise_exception(env, structs.argument_error.make(env, {atoms.true_, text}));
}

// The limits of a session, keyed and shaped as the options of Kino.Trace are (see
// KinoTrace.Plan.Options): an error names the option and says what it takes, in the
// option's terms; KinoTrace.Plan.Options adds the value the user gave. The defaults and
// bounds are KinoTrace.Limits' (lib/kino_trace/limits.ex, the one definition), through
// the generated c_src/core/limits.hpp; the reasons for each bound are written there.
namespace lim = kt::limits;

enum class Count { Ok, NotCount, TooLarge };

// A non-negative integer at most `max`.
Count read_count(ErlNifEnv* env, ERL_NIF_TERM v, std::uint64_t max, std::uint64_t& out) {
  ErlNifUInt64 x;
  if (enif_get_uint64(env, v, &x)) {
    if (x > max) return Count::TooLarge;
    out = x;
    return Count::Ok;
  }
  // An integer above 2^64 - 1 is too large; a negative one or anything else is no count.
  bool big = enif_term_type(env, v) == ERL_NIF_TERM_TYPE_INTEGER && enif_compare(v, enif_make_int(env, 0)) > 0;
  return big ? Count::TooLarge : Count::NotCount;
}

std::string invalid(const char* option, const std::string& expected) {
  return fmt::format("invalid value for :{}: expected {}", option, expected);
}

// limit: nil | n (nil or 0: none).
std::string read_limit(ErlNifEnv* env, ERL_NIF_TERM v, kt::Limits& limits) {
  if (v == atoms.nil) return {};
  switch (read_count(env, v, lim::kLimitMax, limits.limit)) {
    case Count::Ok: return {};
    case Count::TooLarge: return invalid("limit", fmt::format("at most {}", lim::kLimitMax));
    default: return invalid("limit", "nil or a non-negative integer");
  }
}

// rate: nil | {count, period_ms} (a count or period of 0: none).
std::string read_rate(ErlNifEnv* env, ERL_NIF_TERM v, kt::Limits& limits) {
  if (v == atoms.nil) return {};
  const std::string shape = "nil or {count, period_ms} with non-negative integers";
  int arity = 0;
  const ERL_NIF_TERM* pair = nullptr;
  if (!enif_get_tuple(env, v, &arity, &pair) || arity != 2) return invalid("rate", shape);
  std::uint64_t period_ms = 0;
  switch (read_count(env, pair[0], lim::kRateCountMax, limits.rate_count)) {
    case Count::Ok: break;
    case Count::TooLarge: return invalid("rate", fmt::format("a count of at most {}", lim::kRateCountMax));
    default: return invalid("rate", shape);
  }
  switch (read_count(env, pair[1], lim::kRatePeriodMsMax, period_ms)) {
    case Count::Ok: break;
    case Count::TooLarge: return invalid("rate", fmt::format("a period of at most {} ms", lim::kRatePeriodMsMax));
    default: return invalid("rate", shape);
  }
  limits.rate_period_ns = static_cast<std::int64_t>(period_ms) * 1000000;
  return {};
}

// queue: [events: n, bytes: n], either key optional (the first of a repeated key counts).
std::string read_queue(ErlNifEnv* env, ERL_NIF_TERM v, kt::Limits& limits) {
  const std::string shape = "a keyword list with :events and/or :bytes as non-negative integers";
  bool seen_events = false, seen_bytes = false;
  ERL_NIF_TERM head, tail = v;
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    int arity = 0;
    const ERL_NIF_TERM* kv = nullptr;
    if (!enif_get_tuple(env, head, &arity, &kv) || arity != 2) return invalid("queue", shape);
    bool events = kv[0] == atoms.events;
    if (!events && kv[0] != atoms.bytes) return invalid("queue", shape);
    bool& seen = events ? seen_events : seen_bytes;
    std::uint64_t n = 0;
    const std::uint64_t max = events ? lim::kQueueEventsMax : lim::kQueueBytesMax;
    switch (read_count(env, kv[1], max, n)) {
      case Count::Ok: break;
      case Count::TooLarge: return invalid("queue", fmt::format("{} of at most {}", events ? ":events" : ":bytes", max));
      default: return invalid("queue", shape);
    }
    if (!seen) (events ? limits.queue_events : limits.queue_bytes) = n;
    seen = true;
  }
  if (!enif_is_empty_list(env, tail)) return invalid("queue", shape);
  return {};
}

// max_depth, max_items, max_binary, max_bytes: n.
std::string read_cap(ErlNifEnv* env, ERL_NIF_TERM v, const char* option, std::uint64_t max, std::uint32_t& out) {
  std::uint64_t n = 0;
  switch (read_count(env, v, max, n)) {
    case Count::Ok: out = static_cast<std::uint32_t>(n); return {};
    case Count::TooLarge: return invalid(option, fmt::format("at most {}", max));
    default: return invalid(option, "a non-negative integer");
  }
}

// skip_returns: boolean (exception_trace without return values: returns are not wanted).
std::string read_skip_returns(ErlNifEnv*, ERL_NIF_TERM v, bool& out) {
  if (v != atoms.true_ && v != atoms.false_) return invalid("skip_returns", "a boolean");
  out = v == atoms.true_;
  return {};
}

// Reads the limits of a session (or of roundtrip/2) from `map`: a map or a struct keyed
// by option names; absent keys keep their defaults; other keys are ignored. Returns the
// first error, or "".
std::string read_limits(ErlNifEnv* env, ERL_NIF_TERM map, kt::Limits& limits, bool& skip_returns) {
  auto at = [&](ERL_NIF_TERM key, ERL_NIF_TERM& v) { return enif_get_map_value(env, map, key, &v); };
  ERL_NIF_TERM v;
  std::string e;
  kt::TermCaps& caps = limits.caps;
  if (e.empty() && at(atoms.limit, v)) e = read_limit(env, v, limits);
  if (e.empty() && at(atoms.rate, v)) e = read_rate(env, v, limits);
  if (e.empty() && at(atoms.queue, v)) e = read_queue(env, v, limits);
  if (e.empty() && at(atoms.max_depth, v)) e = read_cap(env, v, "max_depth", lim::kMaxDepthMax, caps.max_depth);
  if (e.empty() && at(atoms.max_items, v)) e = read_cap(env, v, "max_items", lim::kMaxItemsMax, caps.max_items);
  if (e.empty() && at(atoms.max_binary, v)) e = read_cap(env, v, "max_binary", lim::kMaxBinaryMax, caps.max_binary);
  if (e.empty() && at(atoms.max_bytes, v)) e = read_cap(env, v, "max_bytes", lim::kMaxBytesMax, caps.max_bytes);
  if (e.empty() && at(atoms.skip_returns, v)) e = read_skip_returns(env, v, skip_returns);
  return e;
}

}  // namespace

// new_session(OwnerPid, Limits) -> Resource
ERL_NIF_TERM new_session(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  ErlNifPid owner;
  if (!enif_get_local_pid(env, argv[0], &owner)) return raise_argument_error(env, "expected the owner to be a local pid");
  if (!enif_is_map(env, argv[1])) return raise_argument_error(env, "expected the limits to be a map");
  kt::Limits limits;
  bool skip_returns = false;
  std::string error = read_limits(env, argv[1], limits, skip_returns);
  if (!error.empty()) return raise_argument_error(env, error);

  Session* s = make_resource<Session>(session_type, limits, owner, next_session_id.fetch_add(1));
  if (!s) return enif_make_badarg(env);
  s->skip_returns = skip_returns;
  ERL_NIF_TERM term = enif_make_resource(env, s);
  if (enif_monitor_process(env, s, &owner, &s->owner_monitor) != 0) s->core.close();
  enif_release_resource(s);
  return term;
}

ERL_NIF_TERM session_id(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  if (!s) return enif_make_badarg(env);
  return enif_make_uint64(env, s->id);
}

namespace {

// The raw event of `e`, its elements where the record of src/kino_trace_raw_event.hrl puts
// them (raw_event.hpp, generated from it).
ERL_NIF_TERM event_tuple(ErlNifEnv* env, kt::Event& e) {
  namespace rf = kt::raw_event;
  static_assert(rf::kSize == 10, "the raw event's record changed: set its new fields here and in read_raw");
  EnifBuilder builder{env};
  kt::TermDecoder<EnifBuilder> decoder(builder, e.payload.data(), e.payload.size());
  ERL_NIF_TERM items[rf::kSize];
  items[rf::kTag] = static_cast<ERL_NIF_TERM>(e.tag);
  items[rf::kPid] = static_cast<ERL_NIF_TERM>(e.pid);
  items[rf::kTime] = enif_make_int64(env, e.time_ns);
  items[rf::kScheduler] = enif_make_uint(env, e.scheduler);
  items[rf::kModule] = e.module ? static_cast<ERL_NIF_TERM>(e.module) : atoms.undefined;
  items[rf::kFunction] = e.function ? static_cast<ERL_NIF_TERM>(e.function) : atoms.undefined;
  items[rf::kArity] = enif_make_uint(env, e.arity);
  items[rf::kFirst] = decoder.decode();
  items[rf::kSecond] = decoder.at_end() ? atoms.undefined : decoder.decode();
  items[rf::kMark] = enif_make_uint64(env, e.drops);
  return enif_make_tuple_from_array(env, items, rf::kSize);
}

}  // namespace

// drain(Resource, Max) -> {[{Tag, Pid, MonotonicNs, Scheduler, M, F, Arity, Term, Extra, DropMark}], More}
// Events come merged by timestamp, each process's in its own order (see SessionCore); DropMark: Event::drops.
// More: true, false or recheck (see more_term).
ERL_NIF_TERM drain(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  unsigned max = 0;
  if (!s || !enif_get_uint(env, argv[1], &max) || max == 0 || max > 10000) return enif_make_badarg(env);
  // Each chunk's tuples are built at once, from a stack buffer (see drain_loop.hpp).
  kt::Event chunk[kt::kDrainChunk];
  std::vector<ERL_NIF_TERM> terms;
  terms.reserve(max < 256 ? max : 256);
  kt::Drained d = kt::drain_chunks(
      s->core, max, [&](std::size_t) { return chunk; },
      [&](kt::Event* events, std::size_t got) {
        for (std::size_t i = 0; i < got; ++i) terms.push_back(event_tuple(env, events[i]));
      });
  ERL_NIF_TERM list = enif_make_list_from_array(env, terms.data(), static_cast<unsigned>(terms.size()));
  enif_consume_timeslice(env, kt::drain_timeslice_percent(d.count, kt::DrainCost::Raw));
  return enif_make_tuple2(env, list, more_term(d.more, d.recheck));
}

ERL_NIF_TERM more_term(bool more, bool recheck) {
  return more ? atoms.true_ : recheck ? atoms.recheck : atoms.false_;
}

ERL_NIF_TERM counters(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  if (!s) return enif_make_badarg(env);
  kt::Counters c = s->core.counters();
  ERL_NIF_TERM keys[] = {atoms.id, atoms.accepted, atoms.delivered, atoms.queued, atoms.discarded,
                         atoms.bytes_queued, atoms.dropped_closed, atoms.dropped_rate, atoms.dropped_queue_full,
                         atoms.dropped_max_events, atoms.dropped_no_memory, atoms.wakeups, atoms.closed,
                         atoms.limit_reached};
  ERL_NIF_TERM vals[] = {enif_make_uint64(env, s->id),
                         enif_make_uint64(env, c.accepted),
                         enif_make_uint64(env, c.delivered),
                         enif_make_uint64(env, c.queued),
                         enif_make_uint64(env, c.discarded),
                         enif_make_uint64(env, c.bytes_queued),
                         enif_make_uint64(env, c.dropped_closed),
                         enif_make_uint64(env, c.dropped_rate),
                         enif_make_uint64(env, c.dropped_queue_full),
                         enif_make_uint64(env, c.dropped_max_events),
                         enif_make_uint64(env, c.dropped_no_memory),
                         enif_make_uint64(env, c.wakeups),
                         c.closed ? atoms.true_ : atoms.false_,
                         c.limit_reached ? atoms.true_ : atoms.false_};
  ERL_NIF_TERM m;
  enif_make_map_from_arrays(env, keys, vals, sizeof keys / sizeof keys[0], &m);
  return m;
}

// close(Resource): nothing more is admitted at once; then every queued event is freed
// (counted as discarded) in slices of kCloseSlice events, rescheduling itself between
// slices, so a 1 M-event queue never holds a scheduler for long. Returns when all are.
namespace {

constexpr std::size_t kCloseSlice = 20000;

ERL_NIF_TERM close_continue(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  if (!s) return enif_make_badarg(env);
  if (s->core.discard(kCloseSlice)) return atoms.ok;
  enif_consume_timeslice(env, 100);
  return enif_schedule_nif(env, "close", 0, guarded<close_continue>, argc, argv);
}

}  // namespace

ERL_NIF_TERM close_session(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  if (!s) return enif_make_badarg(env);
  s->core.shut();
  return close_continue(env, argc, argv);
}

// Encodes a term with the given caps and decodes it again: what a traced term looks like
// once copied out of its process (for tests and for the display caps of the Elixir side).
// `argv[1]`: the limits of new_session/2, of which the caps count here.
ERL_NIF_TERM roundtrip(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  if (!enif_is_map(env, argv[1])) return raise_argument_error(env, "expected the limits to be a map");
  kt::Limits limits;
  bool skip_returns = false;
  std::string error = read_limits(env, argv[1], limits, skip_returns);
  if (!error.empty()) return raise_argument_error(env, error);
  kt::PayloadBuffer buf;
  kt::TermWriter writer(buf, limits.caps);
  EnifSource source{env};
  kt::TermEncoder<EnifSource> encoder(source, writer);
  encoder.encode(argv[0], 0);
  EnifBuilder builder{env};
  kt::TermDecoder<EnifBuilder> decoder(builder, buf.data(), buf.size());
  return enif_make_tuple2(env, decoder.decode(), enif_make_uint64(env, buf.size()));
}

// limits() -> #{Name => {Default, Max}}: the defaults a session starts with (a Limits
// made with none given) and the bounds read_limits/4 checks, named as KinoTrace.Limits
// names them; test/kino_trace/limits_test.exs checks them against the table.
ERL_NIF_TERM limits(ErlNifEnv* env, int, const ERL_NIF_TERM[]) {
  const kt::Limits d;
  const std::uint64_t period_ms = static_cast<std::uint64_t>(d.rate_period_ns / 1000000);
  const std::pair<const char*, std::pair<std::uint64_t, std::uint64_t>> rows[] = {
      {"limit", {d.limit, lim::kLimitMax}},
      {"rate_count", {d.rate_count, lim::kRateCountMax}},
      {"rate_period_ms", {period_ms, lim::kRatePeriodMsMax}},
      {"queue_events", {d.queue_events, lim::kQueueEventsMax}},
      {"queue_bytes", {d.queue_bytes, lim::kQueueBytesMax}},
      {"max_depth", {d.caps.max_depth, lim::kMaxDepthMax}},
      {"max_items", {d.caps.max_items, lim::kMaxItemsMax}},
      {"max_binary", {d.caps.max_binary, lim::kMaxBinaryMax}},
      {"max_bytes", {d.caps.max_bytes, lim::kMaxBytesMax}},
  };
  ERL_NIF_TERM map = enif_make_new_map(env);
  for (const auto& [name, value] : rows) {
    ERL_NIF_TERM pair = enif_make_tuple2(env, enif_make_uint64(env, value.first), enif_make_uint64(env, value.second));
    enif_make_map_put(env, map, enif_make_atom(env, name), pair, &map);
  }
  return map;
}

// set_loop_modules(Resource, [Module]) -> ok: the modules whose open calls the loop guard
// counts (loop_guard.hpp: at most its kMaxModules, the first ones); [] switches it off.
ERL_NIF_TERM set_loop_modules(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  if (!s) return enif_make_badarg(env);
  std::vector<std::uint64_t> modules;
  ERL_NIF_TERM head, tail = argv[1];
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    if (!enif_is_atom(env, head)) return raise_argument_error(env, "expected the loop guard's modules to be atoms");
    modules.push_back(head);
  }
  if (!enif_is_empty_list(env, tail)) return raise_argument_error(env, "expected the loop guard's modules to be a list");
  s->loop.set_modules(modules.begin(), modules.end());
  return atoms.ok;
}

// loop_release(Resource, Pid, Exempt) -> ok: the loop guard counts Pid's open calls from 0
// again (Exempt false: it did not loop), or never again (true: it was moved to a trace
// without returns).
ERL_NIF_TERM loop_release(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  ErlNifPid pid;
  if (!s || !enif_get_local_pid(env, argv[1], &pid) || (argv[2] != atoms.true_ && argv[2] != atoms.false_))
    return enif_make_badarg(env);
  s->loop.release(argv[1], argv[2] == atoms.true_);
  return atoms.ok;
}

ERL_NIF_TERM nif_loaded(ErlNifEnv*, int, const ERL_NIF_TERM[]) { return atoms.true_; }

// struct_keys() -> [{Module, [Key]}]: the structs the NIF builds (structs.hpp), for the
// test that checks them against their defstruct.
ERL_NIF_TERM struct_keys(ErlNifEnv* env, int, const ERL_NIF_TERM[]) { return structs.table(env); }

}  // namespace kino_trace::nif
