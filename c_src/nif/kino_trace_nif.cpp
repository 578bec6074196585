// kino_trace's native tracer: the NIFs of Kino.Trace.Tracer.
//
// The VM calls enabled*/3 and trace*/5 inside the traced process, on scheduler threads.
// Everything here is lock-free and bounded: enabled*/3 rejects events before the VM builds
// a trace term; trace*/5 copies the term with caps into a self-contained Event and
// enqueues it; the owner (the session process) is woken with one message when the queue
// goes from empty to non-empty, and drains batches with drain/2.
#include <erl_nif.h>
#include <fmt/format.h>

#include <cstring>
#include <ctime>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "erts_layout.hpp"
#include "session_core.hpp"
#include "term_codec.hpp"

namespace kt = kino_trace;

namespace {

// ---------------------------------------------------------------------------------------
// atoms

struct Atoms {
  ERL_NIF_TERM ok, error, nil, trace, discard, remove, trace_status, undefined, true_, false_;
  ERL_NIF_TERM call, return_from, exception_from, return_to, send, send_to_non_existing_process,
      receive, spawn, spawned, exit, link, unlink, getting_linked, getting_unlinked, register_,
      unregister;
  ERL_NIF_TERM extra, match_spec_result, scheduler_id;
  ERL_NIF_TERM kino_trace, ready, limit_reached;
  ERL_NIF_TERM struct_, cut_module, kind, value, size, depth, items, bytes, binary, bitstring, integer, fun, tuple,
      map, malformed, module, index, uniq, arity;
  ERL_NIF_TERM accepted, delivered, queued, discarded, bytes_queued, dropped_closed, dropped_rate,
      dropped_queue_full, dropped_max_events, wakeups, closed, id;
  ERL_NIF_TERM skip_returns, exception_, message, argument_error;
  ERL_NIF_TERM max_events, rate_count, rate_period_ms, queue_events, queue_bytes, max_depth, max_items,
      max_binary, max_bytes;
};

Atoms atoms;

ERL_NIF_TERM atom(ErlNifEnv* env, const char* name) {
  ERL_NIF_TERM a;
  if (enif_make_existing_atom(env, name, &a, ERL_NIF_LATIN1)) return a;
  return enif_make_atom(env, name);
}

void init_atoms(ErlNifEnv* env) {
  atoms.ok = atom(env, "ok");
  atoms.error = atom(env, "error");
  atoms.nil = atom(env, "nil");
  atoms.trace = atom(env, "trace");
  atoms.discard = atom(env, "discard");
  atoms.remove = atom(env, "remove");
  atoms.trace_status = atom(env, "trace_status");
  atoms.undefined = atom(env, "undefined");
  atoms.true_ = atom(env, "true");
  atoms.false_ = atom(env, "false");
  atoms.call = atom(env, "call");
  atoms.return_from = atom(env, "return_from");
  atoms.exception_from = atom(env, "exception_from");
  atoms.return_to = atom(env, "return_to");
  atoms.send = atom(env, "send");
  atoms.send_to_non_existing_process = atom(env, "send_to_non_existing_process");
  atoms.receive = atom(env, "receive");
  atoms.spawn = atom(env, "spawn");
  atoms.spawned = atom(env, "spawned");
  atoms.exit = atom(env, "exit");
  atoms.link = atom(env, "link");
  atoms.unlink = atom(env, "unlink");
  atoms.getting_linked = atom(env, "getting_linked");
  atoms.getting_unlinked = atom(env, "getting_unlinked");
  atoms.register_ = atom(env, "register");
  atoms.unregister = atom(env, "unregister");
  atoms.extra = atom(env, "extra");
  atoms.match_spec_result = atom(env, "match_spec_result");
  atoms.scheduler_id = atom(env, "scheduler_id");
  atoms.kino_trace = atom(env, "kino_trace");
  atoms.ready = atom(env, "ready");
  atoms.limit_reached = atom(env, "limit_reached");
  atoms.struct_ = atom(env, "__struct__");
  atoms.cut_module = atom(env, "Elixir.Kino.Trace.Cut");
  atoms.kind = atom(env, "kind");
  atoms.value = atom(env, "value");
  atoms.size = atom(env, "size");
  atoms.depth = atom(env, "depth");
  atoms.items = atom(env, "items");
  atoms.bytes = atom(env, "bytes");
  atoms.binary = atom(env, "binary");
  atoms.bitstring = atom(env, "bitstring");
  atoms.integer = atom(env, "integer");
  atoms.fun = atom(env, "fun");
  atoms.module = atom(env, "module");
  atoms.index = atom(env, "index");
  atoms.uniq = atom(env, "uniq");
  atoms.arity = atom(env, "arity");
  atoms.tuple = atom(env, "tuple");
  atoms.map = atom(env, "map");
  atoms.malformed = atom(env, "malformed");
  atoms.accepted = atom(env, "accepted");
  atoms.delivered = atom(env, "delivered");
  atoms.queued = atom(env, "queued");
  atoms.discarded = atom(env, "discarded");
  atoms.bytes_queued = atom(env, "bytes_queued");
  atoms.dropped_closed = atom(env, "dropped_closed");
  atoms.dropped_rate = atom(env, "dropped_rate");
  atoms.dropped_queue_full = atom(env, "dropped_queue_full");
  atoms.dropped_max_events = atom(env, "dropped_max_events");
  atoms.wakeups = atom(env, "wakeups");
  atoms.closed = atom(env, "closed");
  atoms.id = atom(env, "id");
  atoms.skip_returns = atom(env, "skip_returns");
  atoms.exception_ = atom(env, "__exception__");
  atoms.message = atom(env, "message");
  atoms.argument_error = atom(env, "Elixir.ArgumentError");
  atoms.max_events = atom(env, "max_events");
  atoms.rate_count = atom(env, "rate_count");
  atoms.rate_period_ms = atom(env, "rate_period_ms");
  atoms.queue_events = atom(env, "queue_events");
  atoms.queue_bytes = atom(env, "queue_bytes");
  atoms.max_depth = atom(env, "max_depth");
  atoms.max_items = atom(env, "max_items");
  atoms.max_binary = atom(env, "max_binary");
  atoms.max_bytes = atom(env, "max_bytes");
}

// ---------------------------------------------------------------------------------------
// the session resource

// CLOCK_MONOTONIC_COARSE costs a few ns (no hardware counter read) at 1-4 ms
// resolution: enough for enabled's rate pre-check, which only spares the VM building a
// term; the authoritative check in trace uses the precise clock. The pre-check reads it
// well ahead (the coarse clock lags by up to a few ticks), so it never refuses what the
// precise check would accept: near a refill it lets a few terms be built for nothing.
std::int64_t coarse_lead_ns() {
  timespec res;
  std::int64_t step = 10000000;
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0) step = static_cast<std::int64_t>(res.tv_sec) * 1000000000 + res.tv_nsec;
  return step * 4 > 50000000 ? step * 4 : 50000000;
}

const std::int64_t coarse_step_ns = coarse_lead_ns();

std::int64_t coarse_clock_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec + coarse_step_ns;
}

std::int64_t precise_clock_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Session {
  Session(const kt::Limits& limits, ErlNifPid owner_pid, std::uint64_t session_id)
      : core(limits, enif_monotonic_time(ERL_NIF_NSEC)),
        owner(owner_pid),
        id(session_id),
        coarse_to_vm_ns(enif_monotonic_time(ERL_NIF_NSEC) - precise_clock_ns()) {}

  kt::SessionCore core;
  ErlNifPid owner;
  std::uint64_t id;
  bool skip_returns = false;  // exception_trace without return values: returns are not wanted
  ErlNifMonitor owner_monitor{};
  const std::int64_t coarse_to_vm_ns;  // the OS monotonic clock -> the VM's monotonic time

  std::int64_t approximate_vm_now() const { return coarse_clock_ns() + coarse_to_vm_ns; }
};

ErlNifResourceType* session_type = nullptr;
std::atomic<std::uint64_t> next_session_id{1};

void session_dtor(ErlNifEnv*, void* obj) { static_cast<Session*>(obj)->~Session(); }

// The owner died: close, so every tracee drops this tracer at its next trace_status.
void session_down(ErlNifEnv*, void* obj, ErlNifPid*, ErlNifMonitor*) { static_cast<Session*>(obj)->core.close(); }

Session* get_session(ErlNifEnv* env, ERL_NIF_TERM term) {
  void* obj = nullptr;
  if (!enif_get_resource(env, term, session_type, &obj)) return nullptr;
  return static_cast<Session*>(obj);
}

// ---------------------------------------------------------------------------------------
// reading Erlang terms for the encoder

// What check_layout (at load) found about ERTS's term layout: whether erts_layout.hpp's
// readers may be used, and where a fun entry keeps its identity.
struct Layout {
  bool ok = false;
  kt::erts::FunEntryLayout fun_entry;
};

Layout layout;

struct EnifSource {
  using Term = ERL_NIF_TERM;
  ErlNifEnv* env;

  kt::TermKind kind(Term t) const {
    switch (t & 0x3) {
      case 0x3: return kt::TermKind::Immediate;  // atom, small integer, local pid/port, []
      case 0x1: return kt::TermKind::List;       // a list cell
      default: break;
    }
    switch (enif_term_type(env, t)) {
      case ERL_NIF_TERM_TYPE_INTEGER: return kt::TermKind::Integer;
      case ERL_NIF_TERM_TYPE_FLOAT: return kt::TermKind::Float;
      case ERL_NIF_TERM_TYPE_BITSTRING:
        return enif_is_binary(env, t) ? kt::TermKind::Binary : kt::TermKind::Bitstring;
      case ERL_NIF_TERM_TYPE_TUPLE: return kt::TermKind::Tuple;
      case ERL_NIF_TERM_TYPE_LIST: return kt::TermKind::List;
      case ERL_NIF_TERM_TYPE_MAP: return kt::TermKind::Map;
      case ERL_NIF_TERM_TYPE_FUN: return kt::TermKind::Fun;
      default: return kt::TermKind::Other;
    }
  }
  std::uint64_t word(Term t) const { return static_cast<std::uint64_t>(t); }
  // From the immediate tags (64-bit ERTS): small integer 0b1111, atom 0b001011, [] 0x3B.
  std::size_t leaf_size(Term t) const {
    if ((t & 0xF) == 0xF) return 11;
    if (t == 0x3B) return 1;
    unsigned len = 0;
    if (kt::is_atom_word(t) && enif_get_atom_length(env, t, &len, ERL_NIF_UTF8)) return 3 + len;
    return kt::kLeafEstimate;
  }
  bool int64(Term t, std::int64_t& v) const {
    ErlNifSInt64 x;
    if (!enif_get_int64(env, t, &x)) return false;
    v = static_cast<std::int64_t>(x);
    return true;
  }
  kt::BigShape bignum(Term t) const {
    if (!layout.ok || !kt::erts::is_boxed(t)) return kt::BigShape{};
    return kt::erts::read_bignum(kt::erts::boxed(t));
  }
  double float64(Term t) const {
    double d = 0;
    enif_get_double(env, t, &d);
    return d;
  }
  bool bit_size(Term t, std::uint64_t& bits) const {
    if (layout.ok && kt::erts::is_boxed(t)) return kt::erts::read_bit_size(kt::erts::boxed(t), bits);
    // Without the layout: a binary's size (an unaligned binary is copied whole here).
    ErlNifBinary bin;
    if (!enif_inspect_binary(env, t, &bin)) return false;
    bits = std::uint64_t{bin.size} * 8;
    return true;
  }
  // The first n whole bytes. A binary of exactly n bytes is inspected as it is; anything
  // longer through a sub-binary of its first n bytes, so that an unaligned one (which
  // enif_inspect_binary copies) costs n bytes, not its whole size.
  bool bytes(Term t, std::size_t n, const std::uint8_t*& data) const {
    std::uint64_t bits = 0;
    bool whole = bit_size(t, bits) && bits == std::uint64_t{n} * 8;
    ErlNifBinary bin;
    if (!enif_inspect_binary(env, whole ? t : enif_make_sub_binary(env, t, 0, n), &bin) || bin.size != n) return false;
    data = bin.data;
    return true;
  }
  const Term* fun(Term t, kt::FunShape& f) const {
    f = kt::FunShape{};
    if (!layout.ok || !kt::erts::is_boxed(t)) return nullptr;
    const std::uint64_t* p = kt::erts::boxed(t);
    f = kt::erts::read_fun(p, layout.fun_entry);
    return reinterpret_cast<const Term*>(p + 2);
  }
  const Term* tuple(Term t, std::uint32_t& arity) const {
    int n = 0;
    const ERL_NIF_TERM* elems = nullptr;
    if (!enif_get_tuple(env, t, &n, &elems)) n = 0;
    arity = static_cast<std::uint32_t>(n);
    return elems;
  }
  bool list_cell(Term t, Term& head, Term& tail) const { return enif_get_list_cell(env, t, &head, &tail); }
  bool is_nil(Term t) const { return enif_is_empty_list(env, t); }
  std::uint32_t map_size(Term t) const {
    size_t n = 0;
    enif_get_map_size(env, t, &n);
    return static_cast<std::uint32_t>(n);
  }
  template <class F>
  void map_each(Term t, std::uint32_t limit, F&& f) const {
    if (limit == 0) return;
    ErlNifMapIterator it;
    if (!enif_map_iterator_create(env, t, &it, ERL_NIF_MAP_ITERATOR_FIRST)) return;
    ERL_NIF_TERM k, v;
    while (enif_map_iterator_get_pair(env, &it, &k, &v)) {
      if (!f(k, v)) break;
      enif_map_iterator_next(env, &it);
    }
    enif_map_iterator_destroy(env, &it);
  }
  template <class F>
  bool external(Term t, F&& sink) const {
    ErlNifBinary bin;
    if (!enif_term_to_binary(env, t, &bin)) return false;
    sink(bin.data, bin.size);
    enif_release_binary(&bin);
    return true;
  }
};

// Checks erts_layout.hpp's readers on terms of known shapes, made here from the external
// term format: bignums, bitstrings (on the heap, off it, a sub-binary), an external fun
// and a local fun of a made-up module. Only when every answer is right are the readers
// used; the fun entry's field offset is found the same way (3 or 4 code addresses
// precede it, JIT or not).
struct ExtBuilder {
  std::vector<unsigned char> b{131};
  ExtBuilder& u8(unsigned v) { b.push_back(static_cast<unsigned char>(v)); return *this; }
  ExtBuilder& u32(std::uint32_t v) {
    for (int i = 3; i >= 0; --i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
    return *this;
  }
  ExtBuilder& atom(const char* name) {
    std::size_t n = std::strlen(name);
    u8(119).u8(static_cast<unsigned>(n));  // SMALL_ATOM_UTF8_EXT
    b.insert(b.end(), name, name + n);
    return *this;
  }
  bool term(ErlNifEnv* env, ERL_NIF_TERM& out) const { return enif_binary_to_term(env, b.data(), b.size(), &out, 0) == b.size(); }
};

bool check_bignum(ErlNifEnv* env, bool negative, unsigned digits_bytes, unsigned top, std::uint64_t bits) {
  ExtBuilder e;
  e.u8(110).u8(digits_bytes).u8(negative ? 1 : 0);  // SMALL_BIG_EXT, least significant byte first
  for (unsigned i = 0; i + 1 < digits_bytes; ++i) e.u8(i == 0 ? 5 : 0);
  e.u8(top);
  ERL_NIF_TERM t;
  ErlNifSInt64 small;
  if (!e.term(env, t) || enif_get_int64(env, t, &small) || !kt::erts::is_boxed(t)) return false;
  kt::BigShape b = kt::erts::read_bignum(kt::erts::boxed(t));
  return b.known && b.negative == negative && b.bits == bits;
}

bool check_bits(ERL_NIF_TERM t, std::uint64_t bits) {
  std::uint64_t read = 0;
  return kt::erts::is_boxed(t) && kt::erts::read_bit_size(kt::erts::boxed(t), read) && read == bits;
}

// The offset of the module in a fun entry, or 0 if none of the known ones is right.
std::size_t find_fun_entry_module(const std::uint64_t* p, ERL_NIF_TERM module) {
  for (std::size_t offset : {std::size_t{32}, std::size_t{24}}) {
    kt::erts::FunEntryLayout l{offset};
    kt::FunShape f = kt::erts::read_fun(p, l);
    std::uint64_t arity = 0;
    std::memcpy(&arity, reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(p[1])) + l.arity(), sizeof arity);
    if (f.identity && f.module == module && f.index == 7 && f.uniq == 123456 && arity == 2) return offset;
  }
  return 0;
}

Layout check_layout(ErlNifEnv* env) {
  Layout result;
  if (sizeof(void*) != 8 || sizeof(ERL_NIF_TERM) != 8) return result;
  // The immediate tags leaf_size reads.
  if (enif_make_list(env, 0) != 0x3B || (enif_make_int(env, -42) & 0xF) != 0xF || !kt::is_atom_word(atoms.ok))
    return result;

  // 2^100 + 5 and -(2^64 + 5)
  if (!check_bignum(env, false, 13, 0x10, 101) || !check_bignum(env, true, 9, 0x01, 65)) return result;

  ERL_NIF_TERM heap_bits, small_bin, refc_bin, sub_bin;
  ExtBuilder bits;
  bits.u8(77).u32(3).u8(5).u8(1).u8(2).u8(0xF8);  // BIT_BINARY_EXT: 2 bytes and 5 bits
  std::memset(enif_make_new_binary(env, 10, &small_bin), 1, 10);
  std::memset(enif_make_new_binary(env, 200, &refc_bin), 2, 200);
  sub_bin = enif_make_sub_binary(env, refc_bin, 3, 100);
  if (!bits.term(env, heap_bits) || !check_bits(heap_bits, 21) || !check_bits(small_bin, 80) ||
      !check_bits(refc_bin, 1600) || !check_bits(sub_bin, 800))
    return result;

  ERL_NIF_TERM external_fun, local_fun, probe_module, probe_free;
  ExtBuilder ext;
  ext.u8(113).atom("erlang").atom("abs").u8(97).u8(1);  // EXPORT_EXT erlang:abs/1
  ExtBuilder local;
  local.u8(112).u32(0).u8(2);  // NEW_FUN_EXT, size (not checked), arity 2
  for (unsigned i = 1; i <= 16; ++i) local.u8(i);  // uniq
  local.u32(7).u32(2).atom("kino_trace_layout_probe");  // index, free variables, module
  local.u8(97).u8(5).u8(98).u32(123456);  // old index, old uniq
  local.u8(88).atom("nonode@nohost").u32(0).u32(0).u32(0);  // creator pid
  local.u8(97).u8(42).atom("probe");  // the free variables: 42, :probe
  if (!ext.term(env, external_fun) || !local.term(env, local_fun) ||
      !enif_make_existing_atom(env, "kino_trace_layout_probe", &probe_module, ERL_NIF_LATIN1) ||
      !enif_make_existing_atom(env, "probe", &probe_free, ERL_NIF_LATIN1) || !kt::erts::is_boxed(external_fun) ||
      !kt::erts::is_boxed(local_fun))
    return result;
  kt::FunShape e = kt::erts::read_fun(kt::erts::boxed(external_fun), {});
  const std::uint64_t* p = kt::erts::boxed(local_fun);
  kt::FunShape l = kt::erts::read_fun(p, {});
  if (!e.known || !e.external || e.arity != 1 || !l.known || l.external || l.arity != 2 || l.num_free != 2 ||
      p[2] != enif_make_int(env, 42) || p[3] != probe_free)
    return result;

  result.ok = true;
  result.fun_entry.module = find_fun_entry_module(p, probe_module);
  return result;
}

// ---------------------------------------------------------------------------------------
// building Erlang terms from the encoded format

struct EnifBuilder {
  using Term = ERL_NIF_TERM;
  ErlNifEnv* env;

  Term cut_struct(ERL_NIF_TERM kind, ERL_NIF_TERM value, ERL_NIF_TERM size) const {
    ERL_NIF_TERM keys[] = {atoms.struct_, atoms.kind, atoms.value, atoms.size};
    ERL_NIF_TERM vals[] = {atoms.cut_module, kind, value, size};
    ERL_NIF_TERM m;
    enif_make_map_from_arrays(env, keys, vals, 4, &m);
    return m;
  }

  Term immediate(std::uint64_t w) const { return static_cast<ERL_NIF_TERM>(w); }
  Term int64(std::int64_t v) const { return enif_make_int64(env, v); }
  Term float64(double v) const { return enif_make_double(env, v); }
  Term binary(const std::uint8_t* data, std::size_t kept, std::uint64_t total) const {
    ERL_NIF_TERM bin;
    unsigned char* dst = enif_make_new_binary(env, kept, &bin);
    if (kept) std::memcpy(dst, data, kept);
    if (kept == total) return bin;
    return cut_struct(atoms.binary, bin, enif_make_uint64(env, total));
  }
  Term tuple(std::vector<Term>& elems, std::uint32_t total) const {
    if (elems.size() == total) {
      return enif_make_tuple_from_array(env, elems.data(), static_cast<unsigned>(elems.size()));
    }
    ERL_NIF_TERM list = enif_make_list_from_array(env, elems.data(), static_cast<unsigned>(elems.size()));
    return cut_struct(atoms.tuple, list, enif_make_uint(env, total));
  }
  Term list(std::vector<Term>& elems, kt::ListEnd end, const Term* tail) const {
    ERL_NIF_TERM acc;
    switch (end) {
      case kt::ListEnd::Improper: acc = *tail; break;
      case kt::ListEnd::Cut:
        acc = enif_make_list1(env, cut_struct(atoms.items, atoms.nil, atoms.nil));
        break;
      default: acc = enif_make_list(env, 0); break;
    }
    for (std::size_t i = elems.size(); i > 0; --i) acc = enif_make_list_cell(env, elems[i - 1], acc);
    return acc;
  }
  Term map(std::vector<Term>& kvs, std::uint32_t total) const {
    std::size_t n = kvs.size() / 2;
    std::vector<ERL_NIF_TERM> keys(n), vals(n);
    for (std::size_t i = 0; i < n; ++i) {
      keys[i] = kvs[2 * i];
      vals[i] = kvs[2 * i + 1];
    }
    ERL_NIF_TERM m;
    if (!enif_make_map_from_arrays(env, keys.data(), vals.data(), n, &m)) {
      // Duplicate keys can only come from cut keys; keep the pairs as a list instead.
      m = enif_make_new_map(env);
      for (std::size_t i = 0; i < n; ++i) enif_make_map_put(env, m, keys[i], vals[i], &m);
    }
    if (n == total) return m;
    return cut_struct(atoms.map, m, enif_make_uint(env, total));
  }
  Term external(const std::uint8_t* data, std::size_t size) const {
    ERL_NIF_TERM t;
    if (enif_binary_to_term(env, data, size, &t, 0) == 0) return malformed();
    return t;
  }
  Term cut(kt::CutReason why) const {
    ERL_NIF_TERM kind = why == kt::CutReason::Depth ? atoms.depth : why == kt::CutReason::Items ? atoms.items : atoms.bytes;
    return cut_struct(kind, atoms.nil, atoms.nil);
  }
  Term bits(const std::uint8_t* data, std::size_t kept, std::uint64_t total_bits) const {
    ERL_NIF_TERM bin;
    unsigned char* dst = enif_make_new_binary(env, kept, &bin);
    if (kept) std::memcpy(dst, data, kept);
    return cut_struct(atoms.bitstring, bin, enif_make_uint64(env, total_bits));
  }
  // value: the leading bits, signed; size: the bit length.
  Term big_cut(const kt::BigShape& b) const {
    auto lead = static_cast<std::int64_t>(b.lead);  // < 2^60
    return cut_struct(atoms.integer, enif_make_int64(env, b.negative ? -lead : lead), enif_make_uint64(env, b.bits));
  }
  // value: the fun's identity; size: how many captured values were left out.
  Term fun_cut(const kt::FunShape& f) const {
    ERL_NIF_TERM keys[] = {atoms.module, atoms.index, atoms.uniq, atoms.arity};
    ERL_NIF_TERM vals[] = {static_cast<ERL_NIF_TERM>(f.module), enif_make_uint(env, f.index),
                           enif_make_uint(env, f.uniq), enif_make_uint(env, f.arity)};
    ERL_NIF_TERM identity;
    enif_make_map_from_arrays(env, keys, vals, 4, &identity);
    return cut_struct(atoms.fun, identity, enif_make_uint(env, f.num_free));
  }
  Term malformed() const { return cut_struct(atoms.malformed, atoms.nil, atoms.nil); }
};

// ---------------------------------------------------------------------------------------
// classifying trace tags

kt::EventKind kind_of(ERL_NIF_TERM tag) {
  if (tag == atoms.call) return kt::EventKind::Call;
  if (tag == atoms.return_from) return kt::EventKind::ReturnFrom;
  if (tag == atoms.exception_from) return kt::EventKind::ExceptionFrom;
  if (tag == atoms.return_to) return kt::EventKind::ReturnTo;
  if (tag == atoms.send) return kt::EventKind::Send;
  if (tag == atoms.send_to_non_existing_process) return kt::EventKind::SendToNonExisting;
  if (tag == atoms.receive) return kt::EventKind::Receive;
  if (tag == atoms.spawn) return kt::EventKind::Spawn;
  if (tag == atoms.spawned) return kt::EventKind::Spawned;
  if (tag == atoms.exit) return kt::EventKind::Exit;
  if (tag == atoms.link) return kt::EventKind::Link;
  if (tag == atoms.unlink) return kt::EventKind::Unlink;
  if (tag == atoms.getting_linked) return kt::EventKind::GettingLinked;
  if (tag == atoms.getting_unlinked) return kt::EventKind::GettingUnlinked;
  if (tag == atoms.register_) return kt::EventKind::Register;
  if (tag == atoms.unregister) return kt::EventKind::Unregister;
  return kt::EventKind::Other;
}

bool is_immediate(ERL_NIF_TERM t) { return (t & 0x3) == 0x3; }

// ---------------------------------------------------------------------------------------
// erl_tracer callbacks

// enabled(TraceTag, TracerState, Tracee) and its enabled_* variants.
ERL_NIF_TERM enabled(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[1]);
  if (!s) return atoms.remove;
  kt::SessionCore& core = s->core;
  if (argv[0] == atoms.trace_status) {
    return core.closed() ? atoms.remove : atoms.trace;
  }

  std::int64_t now = core.rate_limited() ? s->approximate_vm_now() : 0;
  return core.precheck(now) == kt::Verdict::Accept ? atoms.trace : atoms.discard;
}

// trace(TraceTag, TracerState, Tracee, TraceTerm, Opts) and its trace_* variants.
ERL_NIF_TERM trace(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[1]);
  if (!s) return atoms.ok;
  // Returns the user did not ask for (exception_trace reports them too) are not offered.
  // The VM reports returns without asking enabled*/3 first, so this is the place.
  if (s->skip_returns && argv[0] == atoms.return_from) return atoms.ok;
  kt::SessionCore& core = s->core;
  std::int64_t now = enif_monotonic_time(ERL_NIF_NSEC);
  if (core.admit(now, argv[2]) != kt::Verdict::Accept) return atoms.ok;

  const ERL_NIF_TERM tag = argv[0];
  const ERL_NIF_TERM term = argv[3];
  const ERL_NIF_TERM opts = argv[4];

  kt::Event event;
  event.kind = kind_of(tag);
  event.tag = tag;
  event.time_ns = now;
  event.pid = is_immediate(argv[2]) ? argv[2] : atoms.undefined;

  ERL_NIF_TERM sched;
  int sched_id = 0;
  if (enif_get_map_value(env, opts, atoms.scheduler_id, &sched)) enif_get_int(env, sched, &sched_id);
  event.scheduler = static_cast<std::uint32_t>(sched_id);

  EnifSource source{env};
  kt::TermWriter writer(event.payload, core.limits().caps);
  kt::TermEncoder<EnifSource> encoder(source, writer);

  int arity = 0;
  const ERL_NIF_TERM* mfa = nullptr;
  bool has_mfa = (event.kind == kt::EventKind::Call || event.kind == kt::EventKind::ReturnFrom ||
                  event.kind == kt::EventKind::ExceptionFrom || event.kind == kt::EventKind::ReturnTo) &&
                 enif_get_tuple(env, term, &arity, &mfa) && arity == 3;
  if (has_mfa) {
    event.module = mfa[0];
    event.function = mfa[1];
    unsigned len = 0;
    if (enif_get_list_length(env, mfa[2], &len) && event.kind == kt::EventKind::Call) {
      // Args: the list's length is the arity (enif_get_list_length is O(arity), bounded by 255).
      event.arity = len;
      encoder.encode_list(mfa[2], 0);
    } else {
      int a = 0;
      enif_get_int(env, mfa[2], &a);
      event.arity = static_cast<std::uint32_t>(a);
      writer.immediate(atoms.undefined);
    }
  } else {
    encoder.encode(term, 0);
  }

  // Second payload term: extra (return value, exception, receiver, spawn MFA...) or,
  // for calls, the match spec's message (the caller when asked for).
  // A call carries only the match spec's message; the other events only `extra` (one
  // lookup in the opts map per event, not two).
  ERL_NIF_TERM extra;
  ERL_NIF_TERM extra_key = event.kind == kt::EventKind::Call ? atoms.match_spec_result : atoms.extra;
  if (enif_get_map_value(env, opts, extra_key, &extra)) {
    encoder.encode(extra, 0);
  } else {
    writer.immediate(atoms.undefined);
  }

  event.payload.shrink_to_fit();  // its footprint in the queue is what it holds
  kt::CommitResult r = core.commit(std::move(event));
  if (r.limit_reached) {
    enif_send(env, &s->owner, nullptr,
              enif_make_tuple3(env, atoms.kino_trace, enif_make_uint64(env, s->id), atoms.limit_reached));
  }
  if (r.wake_consumer) {
    enif_send(env, &s->owner, nullptr,
              enif_make_tuple3(env, atoms.kino_trace, enif_make_uint64(env, s->id), atoms.ready));
  }
  return atoms.ok;
}

// ---------------------------------------------------------------------------------------
// session management, called by Kino.Trace.Session

// Raises an Elixir ArgumentError with `message`: bad input gets an error that names it.
ERL_NIF_TERM raise_argument_error(ErlNifEnv* env, const std::string& message) {
  ERL_NIF_TERM text;
  unsigned char* bytes = enif_make_new_binary(env, message.size(), &text);
  std::memcpy(bytes, message.data(), message.size());
  ERL_NIF_TERM keys[] = {atoms.struct_, atoms.exception_, atoms.message};
  ERL_NIF_TERM vals[] = {atoms.argument_error, atoms.true_, text};
  ERL_NIF_TERM exception;
  enif_make_map_from_arrays(env, keys, vals, 3, &exception);
  return enif_raise_exception(env, exception);
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
constexpr std::size_t kCloseSlice = 20000;

ERL_NIF_TERM close_continue(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) {
  Session* s = get_session(env, argv[0]);
  if (!s) return enif_make_badarg(env);
  if (s->core.discard(kCloseSlice)) return atoms.ok;
  enif_consume_timeslice(env, 100);
  return enif_schedule_nif(env, "close", 0, close_continue, argc, argv);
}

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

// ---------------------------------------------------------------------------------------

int load(ErlNifEnv* env, void**, ERL_NIF_TERM) {
  init_atoms(env);
  layout = check_layout(env);
  ErlNifResourceTypeInit init{};
  init.dtor = session_dtor;
  init.down = session_down;
  init.members = 3;
  session_type = enif_init_resource_type(env, "kino_trace_session", &init, ERL_NIF_RT_CREATE, nullptr);
  return session_type ? 0 : 1;
}

int upgrade(ErlNifEnv* env, void** priv, void**, ERL_NIF_TERM info) {
  init_atoms(env);
  layout = check_layout(env);
  ErlNifResourceTypeInit init{};
  init.dtor = session_dtor;
  init.down = session_down;
  init.members = 3;
  session_type = enif_init_resource_type(env, "kino_trace_session", &init,
                                         static_cast<ErlNifResourceFlags>(ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER),
                                         nullptr);
  (void)priv;
  (void)info;
  return session_type ? 0 : 1;
}

ErlNifFunc nif_funcs[] = {
    {"enabled", 3, enabled, 0},
    {"enabled_call", 3, enabled, 0},
    {"enabled_send", 3, enabled, 0},
    {"enabled_receive", 3, enabled, 0},
    {"enabled_procs", 3, enabled, 0},
    {"trace", 5, trace, 0},
    {"trace_call", 5, trace, 0},
    {"trace_send", 5, trace, 0},
    {"trace_receive", 5, trace, 0},
    {"trace_procs", 5, trace, 0},
    {"new_session", 2, new_session, 0},
    {"session_id", 1, session_id, 0},
    {"drain", 2, drain, 0},
    {"counters", 1, counters, 0},
    {"close", 1, close_session, 0},
    {"roundtrip", 2, roundtrip, 0},
    {"nif_loaded", 0, nif_loaded, 0},
};

}  // namespace

ERL_NIF_INIT(Elixir.Kino.Trace.Tracer, nif_funcs, load, nullptr, upgrade, nullptr)
