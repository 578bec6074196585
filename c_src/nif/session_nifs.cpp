// The session NIFs, called by Kino.Trace.Session: make a session, drain its events,
// read its counters, close it; and roundtrip/2, the tracer's copy of one term.
#include <erl_nif.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "atoms.hpp"
#include "nifs.hpp"
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

// Reads an optional non-negative integer at `key` of `map` into `out`, at most `max`.
// Returns an error message naming the key when the value is not such an integer.
std::string read_limit(ErlNifEnv* env, ERL_NIF_TERM map, ERL_NIF_TERM key, std::uint64_t max, std::uint64_t& out) {
  ERL_NIF_TERM v;
  if (!enif_get_map_value(env, map, key, &v)) return {};  // absent: keep the default
  ErlNifUInt64 x;
  if (enif_get_uint64(env, v, &x) && x <= max) {
    out = x;
    return {};
  }
  char name[64] = "?";
  enif_get_atom(env, key, name, sizeof name, ERL_NIF_LATIN1);
  return fmt::format("invalid limit {}: expected an integer from 0 to {}", name, max);
}

std::string read_cap(ErlNifEnv* env, ERL_NIF_TERM map, ERL_NIF_TERM key, std::uint64_t max, std::uint32_t& out) {
  std::uint64_t v = out;
  std::string error = read_limit(env, map, key, max, v);
  if (error.empty()) out = static_cast<std::uint32_t>(v);
  return error;
}

// Reads every limit and cap of a session (or of roundtrip/2) from `map`.
std::string read_caps(ErlNifEnv* env, ERL_NIF_TERM map, kt::TermCaps& caps) {
  // Bounded: the term walk recurses once per nesting level.
  for (std::string e : {read_cap(env, map, atoms.max_depth, 100, caps.max_depth),
                        read_cap(env, map, atoms.max_items, 0xFFFFFFFFu, caps.max_items),
                        read_cap(env, map, atoms.max_binary, 0xFFFFFFFFu, caps.max_binary),
                        read_cap(env, map, atoms.max_bytes, 0xFFFFFFFFu, caps.max_bytes)}) {
    if (!e.empty()) return e;
  }
  return {};
}

}  // namespace

// new_session(OwnerPid, LimitsMap) -> Resource
ERL_NIF_TERM new_session(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  ErlNifPid owner;
  if (!enif_get_local_pid(env, argv[0], &owner)) return raise_argument_error(env, "expected the owner to be a local pid");
  if (!enif_is_map(env, argv[1])) return raise_argument_error(env, "expected the limits to be a map");
  kt::Limits limits;
  std::uint64_t rate_period_ms = 0;
  constexpr std::uint64_t kAny = ~std::uint64_t{0};
  // Bounds on the rate keep the token bucket's arithmetic in range.
  for (std::string e : {read_limit(env, argv[1], atoms.max_events, kAny, limits.max_events),
                        read_limit(env, argv[1], atoms.rate_count, 1000000000u, limits.rate_count),
                        read_limit(env, argv[1], atoms.rate_period_ms, 86400000u, rate_period_ms),
                        read_limit(env, argv[1], atoms.queue_events, kAny, limits.queue_events),
                        read_limit(env, argv[1], atoms.queue_bytes, kAny, limits.queue_bytes),
                        read_caps(env, argv[1], limits.caps)}) {
    if (!e.empty()) return raise_argument_error(env, e);
  }
  limits.rate_period_ns = static_cast<std::int64_t>(rate_period_ms) * 1000000;

  void* mem = enif_alloc_resource(session_type, sizeof(Session));
  if (!mem) return enif_make_badarg(env);
  Session* s = new (mem) Session(limits, owner, next_session_id.fetch_add(1));
  ERL_NIF_TERM skip;
  s->skip_returns = enif_get_map_value(env, argv[1], atoms.skip_returns, &skip) && skip == atoms.true_;
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

ERL_NIF_TERM event_tuple(ErlNifEnv* env, kt::Event& e) {
  EnifBuilder builder{env};
  kt::TermDecoder<EnifBuilder> decoder(builder, e.payload.data(), e.payload.size());
  ERL_NIF_TERM first = decoder.decode();
  ERL_NIF_TERM second = decoder.at_end() ? atoms.undefined : decoder.decode();
  ERL_NIF_TERM items[] = {
      static_cast<ERL_NIF_TERM>(e.tag),
      static_cast<ERL_NIF_TERM>(e.pid),
      enif_make_int64(env, e.time_ns),
      enif_make_uint(env, e.scheduler),
      e.module ? static_cast<ERL_NIF_TERM>(e.module) : atoms.undefined,
      e.function ? static_cast<ERL_NIF_TERM>(e.function) : atoms.undefined,
      enif_make_uint(env, e.arity),
      first,
      second,
      enif_make_uint64(env, e.drops),
  };
  return enif_make_tuple_from_array(env, items, 10);
}

}  // namespace

// drain(Resource, Max) -> {[{Tag, Pid, MonotonicNs, Scheduler, M, F, Arity, Term, Extra, DropMark}], More}
// Events come in admission order (see SessionCore); DropMark: Event::drops.
ERL_NIF_TERM drain(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  unsigned max = 0;
  if (!s || !enif_get_uint(env, argv[1], &max) || max == 0 || max > 10000) return enif_make_badarg(env);
  // Dequeue in small chunks into a stack buffer and build each event's tuple at once: no
  // `max`-sized array of Events (a 1000-event batch is ~190 KB, which malloc serves with
  // mmap/munmap and fresh pages on every call).
  constexpr std::size_t kChunk = 32;
  kt::Event chunk[kChunk];
  std::vector<ERL_NIF_TERM> terms;
  terms.reserve(max < 256 ? max : 256);
  bool more = false;
  std::size_t n = 0;
  // A short chunk means the queue is empty or the next event in order is not there yet
  // (see SessionCore::drain): a few more tries, then the caller drains again later.
  constexpr int kShortChunks = 16;
  int short_chunks = 0;
  while (n < max) {
    std::size_t want = max - n < kChunk ? max - n : kChunk;
    std::size_t got = s->core.drain(chunk, want, more);
    for (std::size_t i = 0; i < got; ++i) terms.push_back(event_tuple(env, chunk[i]));
    n += got;
    if (!more || (got < want && ++short_chunks > kShortChunks)) break;
  }
  ERL_NIF_TERM list = enif_make_list_from_array(env, terms.data(), static_cast<unsigned>(terms.size()));
  int percent = static_cast<int>(n * 100 / 10000) + 1;
  enif_consume_timeslice(env, percent > 100 ? 100 : percent);
  return enif_make_tuple2(env, list, more ? atoms.true_ : atoms.false_);
}

ERL_NIF_TERM counters(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  if (!s) return enif_make_badarg(env);
  kt::Counters c = s->core.counters();
  ERL_NIF_TERM keys[] = {atoms.id, atoms.accepted, atoms.delivered, atoms.queued, atoms.discarded,
                         atoms.bytes_queued, atoms.dropped_closed, atoms.dropped_rate, atoms.dropped_queue_full,
                         atoms.dropped_max_events, atoms.wakeups, atoms.closed, atoms.limit_reached};
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
  return enif_schedule_nif(env, "close", 0, close_continue, argc, argv);
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
ERL_NIF_TERM roundtrip(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  kt::TermCaps caps;
  if (!enif_is_map(env, argv[1])) return raise_argument_error(env, "expected the caps to be a map");
  std::string error = read_caps(env, argv[1], caps);
  if (!error.empty()) return raise_argument_error(env, error);
  kt::PayloadBuffer buf;
  kt::TermWriter writer(buf, caps);
  EnifSource source{env};
  kt::TermEncoder<EnifSource> encoder(source, writer);
  encoder.encode(argv[0], 0);
  EnifBuilder builder{env};
  kt::TermDecoder<EnifBuilder> decoder(builder, buf.data(), buf.size());
  return enif_make_tuple2(env, decoder.decode(), enif_make_uint64(env, buf.size()));
}

ERL_NIF_TERM nif_loaded(ErlNifEnv*, int, const ERL_NIF_TERM[]) { return atoms.true_; }

// struct_keys() -> [{Module, [Key]}]: the structs the NIF builds (structs.hpp), for the
// test that checks them against their defstruct.
ERL_NIF_TERM struct_keys(ErlNifEnv* env, int, const ERL_NIF_TERM[]) { return structs.table(env); }

}  // namespace kino_trace::nif
