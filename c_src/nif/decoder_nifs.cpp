// The native decoder: drains a session's events and decodes them in one NIF call
// (numbered, timed, calls paired with their returns), which is what KinoTrace.Tracer.Decoder
// does in Elixir with the raw tuples of drain/2. Each event is handed over as a tuple of
// Kino.Trace.Event's fields (kEventSpec's order), which KinoTrace.Tracer.NativeDecoder makes
// a struct. The pairing itself is c_src/core/call_pairing.hpp (the call pairing rule,
// whose other implementation is KinoTrace.Tracer.Decoder, which decodes other nodes' events and
// the fallback tracer's; test/kino_trace/tracer/native_decoder_test.exs checks they agree); this
// file sorts a batch by time, reads and builds the terms.
//
// Registered names cannot be read from a NIF: when a batch has processes whose name is
// not known yet, the call returns {names, Pids} and keeps the batch; the caller (see
// KinoTrace.Tracer.NativeDecoder) looks the names up, hands them over with
// decoder_put_names/2, and calls again.
#include <erl_nif.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_set>
#include <vector>

#include "atoms.hpp"
#include "call_pairing.hpp"
#include "decoder.hpp"
#include "drain_loop.hpp"
#include "erts_layout.hpp"
#include "nifs.hpp"
#include "raw_event.hpp"
#include "session.hpp"
#include "structs.hpp"
#include "tags.hpp"
#include "term_codec.hpp"
#include "terms.hpp"

namespace kino_trace::nif {

namespace {

// One raw event, as drain/2 would give it (see KinoTrace.Tracer.raw_event).
struct Raw {
  kt::EventKind kind = kt::EventKind::Other;
  ERL_NIF_TERM tag = 0;
  ERL_NIF_TERM pid = 0;
  std::int64_t time_ns = 0;
  ERL_NIF_TERM scheduler = 0;
  ERL_NIF_TERM module = 0;
  ERL_NIF_TERM function = 0;
  ERL_NIF_TERM arity = 0;
  std::uint64_t arity_value = 0;
  ERL_NIF_TERM first = 0;
  ERL_NIF_TERM second = 0;
  std::uint64_t mark = 0;
};

ERL_NIF_TERM undefined_to_nil(ERL_NIF_TERM t) { return t == atoms.undefined ? atoms.nil : t; }

bool is_integer(ErlNifEnv* env, ERL_NIF_TERM t) { return enif_term_type(env, t) == ERL_NIF_TERM_TYPE_INTEGER; }

bool is_local_pid(ErlNifEnv* env, ERL_NIF_TERM t) { return kt::erts::is_immediate(t) && enif_is_pid(env, t); }

// The value of the first {key, value} in a list (a location the tracer may have cut).
bool location_value(ErlNifEnv* env, ERL_NIF_TERM list, ERL_NIF_TERM key, ERL_NIF_TERM& out) {
  ERL_NIF_TERM head, tail = list;
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    int n = 0;
    const ERL_NIF_TERM* kv = nullptr;
    if (enif_get_tuple(env, head, &n, &kv) && n == 2 && kv[0] == key) {
      out = kv[1];
      return true;
    }
  }
  return false;
}

bool is_cut(ErlNifEnv* env, ERL_NIF_TERM t) {
  ERL_NIF_TERM module;
  return enif_is_map(env, t) && enif_get_map_value(env, t, structs.cut.struct_key, &module) && module == structs.cut.module;
}

void put_utf8(std::vector<unsigned char>& out, std::uint64_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<unsigned char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<unsigned char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<unsigned char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<unsigned char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<unsigned char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<unsigned char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<unsigned char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<unsigned char>(0x80 | (c & 0x3F)));
  }
}

// A file name as a binary: a list of code points, maybe ending in a Cut (then "...").
bool file_name(ErlNifEnv* env, ERL_NIF_TERM chars, ERL_NIF_TERM& out) {
  std::vector<unsigned char> bytes;
  ERL_NIF_TERM head, tail = chars;
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    ErlNifUInt64 c = 0;
    if (enif_get_uint64(env, head, &c)) {
      if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
      put_utf8(bytes, c);
    } else if (is_cut(env, head) && enif_is_empty_list(env, tail)) {
      bytes.insert(bytes.end(), {'.', '.', '.'});
    } else {
      return false;
    }
  }
  if (!enif_is_empty_list(env, tail)) return false;
  unsigned char* data = enif_make_new_binary(env, bytes.size(), &out);
  if (!bytes.empty()) std::memcpy(data, bytes.data(), bytes.size());
  return true;
}

bool is_mfa(ErlNifEnv* env, const ERL_NIF_TERM* t) {
  return enif_is_atom(env, t[0]) && enif_is_atom(env, t[1]) && is_integer(env, t[2]);
}

// `{:caller}` gives {m, f, a}; `caller: :line` a one-frame stack trace (see Session).
ERL_NIF_TERM caller_of(ErlNifEnv* env, ERL_NIF_TERM t) {
  int n = 0;
  const ERL_NIF_TERM* e = nullptr;
  if (enif_get_tuple(env, t, &n, &e)) return n == 3 && is_mfa(env, e) ? t : atoms.nil;
  ERL_NIF_TERM head, tail;
  if (!enif_get_list_cell(env, t, &head, &tail) || !enif_get_tuple(env, head, &n, &e) || n != 4 || !is_mfa(env, e))
    return atoms.nil;
  ERL_NIF_TERM mfa = enif_make_tuple3(env, e[0], e[1], e[2]);
  ERL_NIF_TERM file, line, name;
  if (location_value(env, e[3], atoms.file, file) && location_value(env, e[3], atoms.line, line) &&
      is_integer(env, line) && file_name(env, file, name)) {
    return enif_make_tuple4(env, e[0], e[1], e[2], enif_make_tuple2(env, name, line));
  }
  return mfa;
}

kt::PairKind pair_kind(kt::EventKind kind) {
  switch (kind) {
    case kt::EventKind::Call: return kt::PairKind::Call;
    case kt::EventKind::ReturnFrom:
    case kt::EventKind::ExceptionFrom: return kt::PairKind::Return;
    case kt::EventKind::ReturnTo: return kt::PairKind::ReturnTo;
    case kt::EventKind::Exit: return kt::PairKind::Exit;
    default: return kt::PairKind::Other;
  }
}

ERL_NIF_TERM kind_atom(kt::EventKind kind, ERL_NIF_TERM tag) {
  switch (kind) {
    case kt::EventKind::ReturnFrom: return atoms.return_;
    case kt::EventKind::ExceptionFrom: return atoms.exception;
    case kt::EventKind::SendToNonExisting: return atoms.send_to_non_existing;
    default: return tag;  // the other kinds are named as their tags
  }
}

// The name of a local pid: missing_names() made sure it is known.
ERL_NIF_TERM name_of(const Decoder& d, ERL_NIF_TERM pid) {
  auto it = d.names.find(pid);
  if (it != d.names.end()) return it->second;
  it = d.batch_names.find(pid);
  return it != d.batch_names.end() ? it->second : atoms.nil;
}

// Key positions in kEventSpec (structs.hpp).
enum Field : std::size_t {
  kId, kKind, kNode, kPid, kName, kModule, kFunction, kArity, kArgs, kReturn, kException, kCaller,
  kData, kPeer, kTime, kMonotonic, kScheduler, kDepth, kCallId, kDuration, kLost, kFields
};
static_assert(kFields == kEventSpec.keys.size(), "Field must follow kEventSpec");

// One Kino.Trace.Event's fields, as KinoTrace.Tracer.Decoder.decode_one/2 makes it.
ERL_NIF_TERM build(ErlNifEnv* env, Decoder& d, const Raw& r, std::int64_t time_offset) {
  ERL_NIF_TERM pid = undefined_to_nil(r.pid);
  ERL_NIF_TERM m = undefined_to_nil(r.module);
  ERL_NIF_TERM f = undefined_to_nil(r.function);

  kt::PairInput in;
  in.kind = pair_kind(r.kind);
  in.pid = pid;
  in.is_pid = enif_is_pid(env, pid);
  in.time_ns = r.time_ns;
  in.mfa = kt::MfaKey{m, f, r.arity_value};
  in.mark = r.mark;
  kt::PairResult p = d.pairing.next(in);

  std::array<ERL_NIF_TERM, kFields> v;
  v.fill(atoms.nil);
  v[kId] = enif_make_uint64(env, p.id);
  v[kKind] = kind_atom(r.kind, r.tag);
  v[kNode] = d.node;
  v[kPid] = pid;
  if (is_local_pid(env, pid)) v[kName] = name_of(d, pid);
  v[kTime] = enif_make_int64(env, (r.time_ns + time_offset) / 1000);
  v[kMonotonic] = enif_make_int64(env, r.time_ns);
  v[kScheduler] = r.scheduler;
  v[kDepth] = enif_make_uint64(env, p.depth);
  v[kLost] = p.lost ? atoms.true_ : atoms.false_;

  switch (r.kind) {
    case kt::EventKind::Call:
      v[kModule] = m, v[kFunction] = f, v[kArity] = r.arity;
      v[kArgs] = r.first;
      v[kCaller] = caller_of(env, r.second);
      break;
    case kt::EventKind::ReturnFrom:
    case kt::EventKind::ExceptionFrom:
      v[kModule] = m, v[kFunction] = f, v[kArity] = r.arity;
      v[r.kind == kt::EventKind::ReturnFrom ? kReturn : kException] = r.second;
      if (p.paired) {
        v[kCallId] = enif_make_uint64(env, p.call_id);
        v[kDuration] = enif_make_int64(env, p.duration);
      }
      break;
    case kt::EventKind::ReturnTo: v[kModule] = m, v[kFunction] = f, v[kArity] = r.arity; break;
    case kt::EventKind::Send:
    case kt::EventKind::SendToNonExisting: v[kData] = r.first, v[kPeer] = r.second; break;
    case kt::EventKind::Spawn:
    case kt::EventKind::Spawned: v[kPeer] = r.first, v[kData] = r.second; break;
    case kt::EventKind::Link:
    case kt::EventKind::Unlink:
    case kt::EventKind::GettingLinked:
    case kt::EventKind::GettingUnlinked: v[kPeer] = r.first; break;
    case kt::EventKind::Receive:
      // a receive...after that timed out, marked by the receive match spec (timeouts: true)
      if (enif_is_identical(r.second, atoms.kino_trace_after_timeout)) {
        v[kKind] = atoms.timeout;
        break;
      }
      v[kData] = r.first;
      break;
    case kt::EventKind::Exit:
    case kt::EventKind::Register:
    case kt::EventKind::Unregister: v[kData] = r.first; break;
    case kt::EventKind::Other: v[kData] = r.first, v[kPeer] = undefined_to_nil(r.second); break;
  }
  return enif_make_tuple_from_array(env, v.data(), kFields);
}

// The local pids of a batch whose name is not known yet, as a list; 0 when none.
template <typename PidAt>
ERL_NIF_TERM missing_names(ErlNifEnv* env, const Decoder& d, std::size_t n, PidAt pid_at) {
  std::vector<ERL_NIF_TERM> missing;
  for (std::size_t i = 0; i < n; ++i) {
    ERL_NIF_TERM pid = pid_at(i);
    if (is_local_pid(env, pid) && d.names.count(pid) == 0 && d.batch_names.count(pid) == 0 &&
        std::find(missing.begin(), missing.end(), pid) == missing.end())
      missing.push_back(pid);
  }
  if (missing.empty()) return 0;
  return enif_make_tuple2(env, atoms.names,
                          enif_make_list_from_array(env, missing.data(), static_cast<unsigned>(missing.size())));
}

// Indices 0..n-1 ordered by time, stably (each process's events stay in its order).
// Batches mostly come in time order already: then no sort.
template <typename TimeAt>
std::vector<std::uint32_t> by_time(std::size_t n, TimeAt time_at) {
  std::vector<std::uint32_t> order(n);
  bool sorted = true;
  for (std::size_t i = 0; i < n; ++i) {
    order[i] = static_cast<std::uint32_t>(i);
    if (i > 0 && time_at(order[i]) < time_at(order[i - 1])) sorted = false;
  }
  if (!sorted)
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return time_at(a) < time_at(b); });
  return order;
}

// The end of a batch, however it ends (an exception too: no memory): the names given for
// it go, and so do the drained events waiting in the slots (`slots`: the batch is theirs),
// so that a batch half decoded (its calls half paired) is never decoded again.
struct EndOfBatch {
  Decoder& d;
  bool slots;
  ~EndOfBatch() {
    if (slots) {
      for (std::size_t i = 0; i < d.pending; ++i)
        if (d.slots[i].payload.on_heap()) d.slots[i].payload = kt::PayloadBuffer{};
      d.pending = 0;
    }
    d.batch_names.clear();
  }
};

ERL_NIF_TERM decode_pending(ErlNifEnv* env, Decoder& d) {
  EndOfBatch end{d, true};
  std::vector<kt::Event>& batch = d.slots;
  std::int64_t offset = enif_time_offset(ERL_NIF_NSEC);
  std::vector<std::uint32_t> order = by_time(d.pending, [&](std::uint32_t i) { return batch[i].time_ns; });
  std::vector<ERL_NIF_TERM> events;
  events.reserve(d.pending);
  EnifBuilder builder{env};
  for (std::uint32_t i : order) {
    kt::Event& e = batch[i];
    kt::TermDecoder<EnifBuilder> payload(builder, e.payload.data(), e.payload.size());
    Raw r;
    r.kind = e.kind;
    r.tag = static_cast<ERL_NIF_TERM>(e.tag);
    r.pid = static_cast<ERL_NIF_TERM>(e.pid);
    r.time_ns = e.time_ns;
    r.scheduler = enif_make_uint(env, e.scheduler);
    r.module = e.module ? static_cast<ERL_NIF_TERM>(e.module) : atoms.undefined;
    r.function = e.function ? static_cast<ERL_NIF_TERM>(e.function) : atoms.undefined;
    r.arity = enif_make_uint(env, e.arity);
    r.arity_value = e.arity;
    r.first = payload.decode();
    r.second = payload.at_end() ? atoms.undefined : payload.decode();
    r.mark = e.drops;
    events.push_back(build(env, d, r, offset));
    if (e.payload.on_heap()) e.payload = kt::PayloadBuffer{};  // what the slot holds goes now
  }
  return enif_make_list_from_array(env, events.data(), static_cast<unsigned>(events.size()));
}

// A raw tuple of drain/2 as a Raw (its elements where the record of
// src/kino_trace_raw_event.hrl puts them, raw_event.hpp; without the last, the mark, it
// has mark 0); false when it is not one.
bool read_raw(ErlNifEnv* env, ERL_NIF_TERM t, Raw& r) {
  namespace rf = kt::raw_event;
  static_assert(rf::kSize == 10 && rf::kMark == rf::kSize - 1,
                "the raw event's record changed: read its new fields here and set them in event_tuple");
  int n = 0;
  const ERL_NIF_TERM* e = nullptr;
  if (!enif_get_tuple(env, t, &n, &e) || (n != int{rf::kSize} && n != int{rf::kSize} - 1)) return false;
  ErlNifSInt64 time = 0;
  ErlNifUInt64 arity = 0, mark = 0;
  if (!enif_is_atom(env, e[rf::kTag]) || !enif_get_int64(env, e[rf::kTime], &time) ||
      !enif_get_uint64(env, e[rf::kArity], &arity))
    return false;
  // Words kept by the pairing must be immediates: local pids and ports, atoms.
  if (!kt::erts::is_immediate(e[rf::kPid]) || !enif_is_atom(env, e[rf::kModule]) ||
      !enif_is_atom(env, e[rf::kFunction]))
    return false;
  if (n == int{rf::kSize} && !enif_get_uint64(env, e[rf::kMark], &mark)) return false;
  r.kind = kind_of(e[rf::kTag]);
  r.tag = e[rf::kTag];
  r.pid = e[rf::kPid];
  r.time_ns = time;
  r.scheduler = e[rf::kScheduler];
  r.module = e[rf::kModule];
  r.function = e[rf::kFunction];
  r.arity = e[rf::kArity];
  r.arity_value = arity;
  r.first = e[rf::kFirst];
  r.second = e[rf::kSecond];
  r.mark = mark;
  return true;
}

}  // namespace

// new_decoder(Pairing, Node) -> Decoder
ERL_NIF_TERM new_decoder(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  if ((argv[0] != atoms.true_ && argv[0] != atoms.false_) || !enif_is_atom(env, argv[1])) return enif_make_badarg(env);
  Decoder* d = make_resource<Decoder>(decoder_type, argv[0] == atoms.true_, argv[1]);
  if (!d) return enif_make_badarg(env);
  ERL_NIF_TERM term = enif_make_resource(env, d);
  enif_release_resource(d);
  return term;
}

// decoder_no_returns(Decoder, [{M, F, A}]) -> ok: the functions traced without returns.
ERL_NIF_TERM decoder_no_returns(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Decoder* d = get_decoder(env, argv[0]);
  if (!d) return enif_make_badarg(env);
  std::vector<kt::MfaKey> mfas;
  ERL_NIF_TERM head, tail = argv[1];
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    int n = 0;
    const ERL_NIF_TERM* e = nullptr;
    ErlNifUInt64 a = 0;
    if (!enif_get_tuple(env, head, &n, &e) || n != 3 || !enif_is_atom(env, e[0]) || !enif_is_atom(env, e[1]) ||
        !enif_get_uint64(env, e[2], &a))
      return enif_make_badarg(env);
    mfas.push_back(kt::MfaKey{e[0], e[1], a});
  }
  if (!enif_is_empty_list(env, tail)) return enif_make_badarg(env);
  std::lock_guard<std::mutex> lock(d->mutex);
  d->pairing.set_no_returns(std::move(mfas));
  return atoms.ok;
}

// decoder_unpair(Decoder, Pid) -> ok (see KinoTrace.Tracer.Decoder.unpair/2).
ERL_NIF_TERM decoder_unpair(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Decoder* d = get_decoder(env, argv[0]);
  if (!d || !kt::erts::is_immediate(argv[1])) return enif_make_badarg(env);
  std::lock_guard<std::mutex> lock(d->mutex);
  d->pairing.unpair(argv[1]);
  return atoms.ok;
}

// decoder_take_callers(Decoder) -> [Pid] (see KinoTrace.Tracer.Decoder.take_callers/1).
ERL_NIF_TERM decoder_take_callers(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Decoder* d = get_decoder(env, argv[0]);
  if (!d) return enif_make_badarg(env);
  std::lock_guard<std::mutex> lock(d->mutex);
  std::vector<std::uint64_t> callers = d->pairing.take_callers();
  std::vector<ERL_NIF_TERM> terms(callers.begin(), callers.end());
  return enif_make_list_from_array(env, terms.data(), static_cast<unsigned>(terms.size()));
}

// decoder_put_names(Decoder, [{Pid, Name}]) -> ok: names (atoms or nil) of local pids.
ERL_NIF_TERM decoder_put_names(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Decoder* d = get_decoder(env, argv[0]);
  if (!d) return enif_make_badarg(env);
  std::lock_guard<std::mutex> lock(d->mutex);
  ERL_NIF_TERM head, tail = argv[1];
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    int n = 0;
    const ERL_NIF_TERM* e = nullptr;
    if (!enif_get_tuple(env, head, &n, &e) || n != 2 || !is_local_pid(env, e[0]) || !enif_is_atom(env, e[1]))
      return enif_make_badarg(env);
    if (d->names.size() >= Decoder::kMaxNames && d->names.count(e[0]) == 0) d->names.clear();
    d->names[e[0]] = e[1];
    d->batch_names[e[0]] = e[1];
  }
  return atoms.ok;
}

// drain_events(Resource, Decoder, Max) -> {[EventFields], More} | {names, [Pid]}
// As drain/2, then decoded: tuples of Kino.Trace.Event's fields. {names, Pids}: the batch is kept
// until the names of Pids are given (decoder_put_names/2); call again.
ERL_NIF_TERM drain_events(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  Decoder* d = get_decoder(env, argv[1]);
  unsigned max = 0;
  if (!s || !d || !enif_get_uint(env, argv[2], &max) || max == 0 || max > 10000) return enif_make_badarg(env);
  std::lock_guard<std::mutex> lock(d->mutex);
  std::vector<kt::Event>& batch = d->slots;
  if (d->pending == 0) {
    // The drained events wait in the slots until they are decoded (counted chunk by
    // chunk: should a later chunk find no memory, those drained are decoded next time).
    if (batch.size() < max) batch.resize(max);
    kt::Drained drained = kt::drain_chunks(
        s->core, max, [&](std::size_t n) { return batch.data() + n; },
        [&](kt::Event*, std::size_t got) { d->pending += got; });
    d->pending_more = drained.more;
    d->pending_recheck = drained.recheck;
  }
  ERL_NIF_TERM names = missing_names(env, *d, d->pending, [&](std::size_t i) { return static_cast<ERL_NIF_TERM>(batch[i].pid); });
  if (names) return names;
  std::size_t n = d->pending;
  ERL_NIF_TERM events = decode_pending(env, *d);
  enif_consume_timeslice(env, kt::drain_timeslice_percent(n, kt::DrainCost::Decoded));
  return enif_make_tuple2(env, events, more_term(d->pending_more, d->pending_recheck));
}

// decode_events(Decoder, [RawEvent]) -> [EventFields] | {names, [Pid]}: the raw events of
// drain/2 decoded natively, as KinoTrace.Tracer.Decoder.decode/2 does (its equivalence test).
ERL_NIF_TERM decode_events(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Decoder* d = get_decoder(env, argv[0]);
  if (!d) return enif_make_badarg(env);
  std::vector<Raw> raw;
  ERL_NIF_TERM head, tail = argv[1];
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    Raw r;
    if (!read_raw(env, head, r)) return enif_make_badarg(env);
    raw.push_back(r);
  }
  if (!enif_is_empty_list(env, tail) || raw.size() > 100000) return enif_make_badarg(env);
  std::lock_guard<std::mutex> lock(d->mutex);
  ERL_NIF_TERM names = missing_names(env, *d, raw.size(), [&](std::size_t i) { return raw[i].pid; });
  if (names) return names;
  EndOfBatch end{*d, false};
  std::int64_t offset = enif_time_offset(ERL_NIF_NSEC);
  std::vector<std::uint32_t> order = by_time(raw.size(), [&](std::uint32_t i) { return raw[i].time_ns; });
  std::vector<ERL_NIF_TERM> events;
  events.reserve(raw.size());
  for (std::uint32_t i : order) events.push_back(build(env, *d, raw[i], offset));
  return enif_make_list_from_array(env, events.data(), static_cast<unsigned>(events.size()));
}

}  // namespace kino_trace::nif
