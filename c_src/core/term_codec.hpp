// Bounded term encoding, free of erl_nif.
//
// `TermEncoder<Source>` walks a term through a *Source* adapter (the NIF's adapter reads
// real Erlang terms with enif_*, the tests' adapter reads a small C++ term type) and writes
// a compact format into a byte buffer, honouring `TermCaps`: nesting depth, items per
// list/tuple/map, bytes per binary and bytes per event. Whatever is cut is recorded in
// the format, so the decoder can show `...` exactly where something was left out.
// The walk never looks past the caps, whatever the term: a 10 MB list costs what its
// first `max_items` elements cost, a 10 MB binary or bitstring what its first
// `max_binary` bytes cost; a bignum or a fun's environment is copied whole only when it
// is at most `max_binary` bytes (checked before any copying), else it is described (a
// bignum's sign, bit length and leading bits; a fun's module, index and arity).
//
// `TermDecoder<Builder>` reads the format back and hands each piece to a *Builder*
// (the NIF builds Erlang terms, the tests build C++ terms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "erts_layout.hpp"
#include "limits.hpp"
#include "small_buffer.hpp"
#include "term_shapes.hpp"

namespace kino_trace {

// Per-event limits on what is copied out of the traced process; the defaults (and the
// bounds the NIF checks) are KinoTrace.Limits' (limits.hpp, generated), each at most 2^32 - 1.
struct TermCaps {
  // nesting levels below the payload's root
  std::uint32_t max_depth = static_cast<std::uint32_t>(limits::kMaxDepthDefault);
  // elements per list, tuple or map
  std::uint32_t max_items = static_cast<std::uint32_t>(limits::kMaxItemsDefault);
  // bytes kept per binary or bitstring; the largest bignum or fun environment copied whole
  std::uint32_t max_binary = static_cast<std::uint32_t>(limits::kMaxBinaryDefault);
  // encoded bytes per event (soft: checked between items)
  std::uint32_t max_bytes = static_cast<std::uint32_t>(limits::kMaxBytesDefault);
};
static_assert(limits::kMaxDepthMax <= UINT32_MAX && limits::kMaxItemsMax <= UINT32_MAX &&
                  limits::kMaxBinaryMax <= UINT32_MAX && limits::kMaxBytesMax <= UINT32_MAX,
              "TermCaps holds each cap in 32 bits");

enum class Tag : std::uint8_t {
  Immediate = 1,  // raw 8-byte immediate word (atom, small int, local pid/port, [])
  Int64 = 2,
  Float = 3,
  Binary = 4,     // u64 total size, u32 kept, bytes
  Tuple = 5,      // u32 total arity, u32 kept, elements
  List = 6,       // u32 kept, u8 ListEnd, elements, [tail term when Improper]
  Map = 7,        // u32 total size, u32 kept, key/value pairs
  External = 8,   // u32 length, external term format bytes
  Cut = 9,        // u8 CutReason: a whole subterm left out
  Bits = 10,      // a bitstring cut short: u64 total bits, u32 kept whole bytes, bytes
  BigCut = 11,    // a bignum too large to copy: u8 negative, u64 bits, u64 lead, u8 lead_bits
  FunCut = 12,    // a fun whose environment is too large to copy:
                  //   u64 module atom word, u32 arity, u32 index, u32 uniq, u32 free variables
};

enum class ListEnd : std::uint8_t { Proper = 0, Improper = 1, Cut = 2 };
enum class CutReason : std::uint8_t { Depth = 1, Items = 2, Bytes = 3 };

// What a Source says a term is.
enum class TermKind {
  Immediate,  // can be kept as its raw word: valid in any environment, never freed
  Integer,    // boxed integer: int64 if it fits, else a bignum (External or BigCut)
  Float,
  Binary,     // a bitstring of whole bytes
  Bitstring,  // a bitstring with a tail of 1..7 bits (External or Bits)
  Tuple,
  List,       // a non-empty list cell
  Map,
  Fun,        // External, or FunCut when its environment is large
  Other,      // anything else (refs, remote pids and ports): small, External
};

// Estimated external size of a leaf the source cannot measure cheaply (a pid, port,
// reference or external fun: a node name and a few words).
constexpr std::size_t kLeafEstimate = 64;


using PayloadBuffer = SmallBuffer<64>;  // Event's inline payload (session_event.hpp)

// Low-level writer of the format. Tracks the event's byte budget.
class TermWriter {
 public:
  TermWriter(PayloadBuffer& out, const TermCaps& caps) : out_(out), caps_(caps) {}

  const TermCaps& caps() const { return caps_; }
  std::size_t size() const { return out_.size(); }
  bool over_budget() const { return out_.size() >= caps_.max_bytes; }
  // Makes room for `n` more bytes at once (never beyond the event's budget).
  void reserve(std::size_t n) { out_.reserve(out_.size() + (n < room() ? n : room())); }
  std::size_t room() const { return over_budget() ? 0 : caps_.max_bytes - out_.size(); }

  void immediate(std::uint64_t word) { tag(Tag::Immediate); put(word); }
  void int64(std::int64_t v) { tag(Tag::Int64); put(v); }
  void float64(double v) { tag(Tag::Float); put(v); }

  // Room for `n` more bytes. The first time a payload leaves its inline buffer for a
  // large piece, it gets room for the rest of the event's budget (at most kUpfront) in
  // one allocation, not a chain of doublings; the caller trims it (shrink_to_fit) once
  // the event is complete. Untouched capacity costs no memory pages.
  void make_room(std::size_t n) {
    std::size_t wanted = out_.size() + n;
    if (wanted <= out_.capacity() || out_.on_heap()) return;
    std::size_t upfront = static_cast<std::size_t>(caps_.max_bytes) + kSlack;
    if (upfront > kUpfront) upfront = kUpfront;
    out_.reserve_exact(wanted > upfront ? wanted : upfront);
  }
  static constexpr std::size_t kUpfront = std::size_t{64} << 10;
  static constexpr std::size_t kSlack = 64;  // a piece that starts just under the budget

  // How many of a binary's `size` bytes are kept: max_binary, and what the budget allows.
  std::size_t binary_keep(std::uint64_t size) const {
    std::uint64_t keep = size;
    if (keep > caps_.max_binary) keep = caps_.max_binary;
    if (keep > room()) keep = room();
    return static_cast<std::size_t>(keep);
  }
  // The first `keep` bytes (binary_keep) of a binary of `size` bytes.
  void binary(const std::uint8_t* data, std::size_t keep, std::uint64_t size) {
    make_room(13 + keep);
    tag(Tag::Binary);
    put(static_cast<std::uint64_t>(size));
    put(static_cast<std::uint32_t>(keep));
    out_.append(data, keep);
  }
  // The first `keep` whole bytes of a bitstring of `bits` bits.
  void bits(const std::uint8_t* data, std::size_t keep, std::uint64_t bits) {
    make_room(13 + keep);
    tag(Tag::Bits);
    put(bits);
    put(static_cast<std::uint32_t>(keep));
    out_.append(data, keep);
  }
  void big_cut(const BigShape& b) {
    tag(Tag::BigCut);
    put(static_cast<std::uint8_t>(b.negative ? 1 : 0));
    put(b.bits);
    put(b.lead);
    put(b.lead_bits);
  }
  void fun_cut(const FunShape& f) {
    tag(Tag::FunCut);
    put(f.module);
    put(f.arity);
    put(f.index);
    put(f.uniq);
    put(f.num_free);
  }

  std::size_t begin_tuple(std::uint32_t arity) {
    tag(Tag::Tuple);
    put(arity);
    return placeholder();
  }
  std::size_t begin_map(std::uint32_t total) {
    tag(Tag::Map);
    put(total);
    return placeholder();
  }
  std::size_t begin_list() {
    tag(Tag::List);
    std::size_t at = placeholder();
    put(static_cast<std::uint8_t>(ListEnd::Proper));
    return at;
  }
  // Writes the number of kept items into a container's placeholder.
  void end_container(std::size_t at, std::uint32_t kept) {
    std::memcpy(out_.data() + at, &kept, sizeof kept);
  }
  void end_list(std::size_t at, std::uint32_t kept, ListEnd end) {
    end_container(at, kept);
    out_.data()[at + sizeof(std::uint32_t)] = static_cast<std::uint8_t>(end);
  }

  void external(const std::uint8_t* data, std::size_t size) {
    make_room(5 + size);
    tag(Tag::External);
    put(static_cast<std::uint32_t>(size));
    out_.append(data, size);
  }

  void cut(CutReason why) {
    tag(Tag::Cut);
    put(static_cast<std::uint8_t>(why));
  }

 private:
  void tag(Tag t) { put(static_cast<std::uint8_t>(t)); }
  template <class T>
  void put(T v) { out_.append(&v, sizeof v); }
  std::size_t placeholder() {
    std::size_t at = out_.size();
    put(std::uint32_t{0});
    return at;
  }

  PayloadBuffer& out_;
  const TermCaps& caps_;
};

// Walks a term through a Source and writes it with a TermWriter, within the caps.
//
// Source must provide, for its `Term` type:
//   TermKind kind(Term)
//   std::uint64_t word(Term)                          // Immediate
//   std::size_t leaf_size(Term)                       // Immediate, Other: estimated external size
//   bool int64(Term, std::int64_t&)                   // Integer
//   BigShape bignum(Term)                             // Integer that int64 refused
//   double float64(Term)                              // Float
//   bool bit_size(Term, std::uint64_t& bits)          // Binary, Bitstring; false if unknown
//   bool bytes(Term, std::size_t n, const std::uint8_t*& data)
//                                                     // Binary, Bitstring: its first n whole
//                                                     // bytes; reads only those n bytes
//   const Term* fun(Term, FunShape&)                  // Fun: its shape and environment
//                                                     // (num_free terms)
//   const Term* tuple(Term, std::uint32_t& arity)
//   bool list_cell(Term, Term& head, Term& tail)       // false when Term is not a cell
//   bool is_nil(Term)                                 // the empty list, a proper tail
//   std::uint32_t map_size(Term)
//   template <class F> void map_each(Term, std::uint32_t limit, F&& f)  // f(key, value) -> bool (continue)
//   bool struct_entry(Term map, Term& key, Term& value)  // its __struct__ key and value, if any
//   bool is_struct_key(Term key)                      // key is the atom __struct__
//   template <class F> bool external(Term, F&& sink)  // sink(data, size); false if impossible.
//                                                     // Called only for terms the encoder
//                                                     // has sized first (at most max_binary
//                                                     // bytes, or a small leaf).
template <class Source>
class TermEncoder {
 public:
  using Term = typename Source::Term;

  TermEncoder(Source& source, TermWriter& writer) : src_(source), w_(writer), caps_(writer.caps()) {}

  void encode(Term t, std::uint32_t depth = 0) {
    if (w_.over_budget()) {
      w_.cut(CutReason::Bytes);
      return;
    }
    switch (src_.kind(t)) {
      case TermKind::Immediate:
        w_.immediate(src_.word(t));
        return;
      case TermKind::Integer: {
        std::int64_t v;
        if (src_.int64(t, v)) {
          w_.int64(v);
        } else {
          encode_bignum(t);
        }
        return;
      }
      case TermKind::Float:
        w_.float64(src_.float64(t));
        return;
      case TermKind::Binary:
      case TermKind::Bitstring:
        encode_bits(t);
        return;
      case TermKind::Tuple:
        if (depth >= caps_.max_depth) return w_.cut(CutReason::Depth);
        return encode_tuple(t, depth);
      case TermKind::List:
        if (depth >= caps_.max_depth) return w_.cut(CutReason::Depth);
        return encode_list(t, depth);
      case TermKind::Map:
        if (depth >= caps_.max_depth) return w_.cut(CutReason::Depth);
        return encode_map(t, depth);
      case TermKind::Fun:
        if (depth >= caps_.max_depth) return w_.cut(CutReason::Depth);
        encode_fun(t);
        return;
      case TermKind::Other:
        if (depth >= caps_.max_depth) return w_.cut(CutReason::Depth);
        encode_external(t, src_.leaf_size(t));
        return;
    }
  }

  // Encodes a list whose elements are at `depth + 1` (e.g. a call's arguments at depth 0).
  void encode_list(Term t, std::uint32_t depth) {
    std::size_t at = w_.begin_list();
    std::uint32_t kept = 0;
    Term head, tail;
    Term cell = t;
    while (src_.list_cell(cell, head, tail)) {
      if (kept >= caps_.max_items || w_.over_budget()) {
        w_.end_list(at, kept, ListEnd::Cut);
        return;
      }
      // A long list: room for the rest of its kept items in one step (9 bytes each when
      // they are immediates), rather than growing the buffer item by item.
      if (kept == 8) w_.reserve(std::size_t{9} * (caps_.max_items - kept));
      encode(head, depth + 1);
      ++kept;
      cell = tail;
    }
    if (src_.kind(cell) == TermKind::Immediate && src_.is_nil(cell)) {
      w_.end_list(at, kept, ListEnd::Proper);
    } else {
      w_.end_list(at, kept, ListEnd::Improper);
      encode(cell, depth + 1);
    }
  }

 private:
  void encode_tuple(Term t, std::uint32_t depth) {
    std::uint32_t arity = 0;
    const Term* elems = src_.tuple(t, arity);
    std::size_t at = w_.begin_tuple(arity);
    std::uint32_t kept = 0;
    while (kept < arity && kept < caps_.max_items && !w_.over_budget()) {
      encode(elems[kept], depth + 1);
      ++kept;
    }
    w_.end_container(at, kept);
  }

  // A map cut short keeps its first pairs in the VM's order; a struct (a map with a
  // __struct__ key) keeps that pair first, so that it still reads as the struct.
  void encode_map(Term t, std::uint32_t depth) {
    std::uint32_t total = src_.map_size(t);
    std::size_t at = w_.begin_map(total);
    std::uint32_t kept = 0;
    std::uint32_t limit = total < caps_.max_items ? total : caps_.max_items;
    Term struct_key{}, module{};
    bool struct_first = limit > 0 && limit < total && src_.struct_entry(t, struct_key, module);
    if (struct_first && !w_.over_budget()) {
      encode(struct_key, depth + 1);
      encode(module, depth + 1);
      ++kept;
    }
    if (kept < limit) {
      src_.map_each(t, struct_first ? total : limit, [&](Term k, Term v) {
        if (struct_first && src_.is_struct_key(k)) return true;
        if (w_.over_budget()) return false;
        encode(k, depth + 1);
        encode(v, depth + 1);
        ++kept;
        return kept < limit;
      });
    }
    w_.end_container(at, kept);
  }

  // A binary keeps its first bytes; a bitstring is copied whole (with its tail bits)
  // when it is at most max_binary bytes and fits the budget, else it keeps its first
  // whole bytes, as a binary would.
  void encode_bits(Term t) {
    std::uint64_t bits = 0;
    if (!src_.bit_size(t, bits)) return w_.cut(CutReason::Bytes);
    std::uint64_t whole = bits / 8;
    bool tail = bits % 8 != 0;
    if (tail && whole + 1 <= caps_.max_binary && 6 + whole + 1 <= w_.room()) return encode_external(t, 6 + whole + 1);
    std::size_t keep = w_.binary_keep(whole);
    const std::uint8_t* data = nullptr;
    if (keep > 0 && !src_.bytes(t, keep, data)) return w_.cut(CutReason::Bytes);
    if (tail) {
      w_.bits(data, keep, bits);
    } else {
      w_.binary(data, keep, whole);
    }
  }

  void encode_bignum(Term t) {
    BigShape b = src_.bignum(t);
    if (!b.known) return w_.cut(CutReason::Bytes);
    if (b.bytes() <= caps_.max_binary) return encode_external(t, 7 + b.bytes());
    w_.big_cut(b);
  }

  // An external fun, or a local one whose environment is at most max_binary bytes, is
  // copied whole; other local funs are described by their identity.
  void encode_fun(Term t) {
    FunShape f;
    const Term* env = src_.fun(t, f);
    if (!f.known) return w_.cut(CutReason::Bytes);
    if (f.external) return encode_external(t, kLeafEstimate);
    std::size_t budget = caps_.max_binary;
    bool small = true;
    for (std::uint32_t i = 0; i < f.num_free && small; ++i) small = fits(env[i], budget, 0);
    if (small) return encode_external(t, kFunEstimate + caps_.max_binary - budget);
    if (!f.identity) return w_.cut(CutReason::Bytes);
    w_.fun_cut(f);
  }

  // Copies a term in the external term format, `estimate` bytes by the encoder's sizing:
  // a term that does not fit the event's budget is cut before any copying.
  void encode_external(Term t, std::size_t estimate) {
    if (estimate > w_.room()) return w_.cut(CutReason::Bytes);
    bool written = src_.external(t, [&](const std::uint8_t* data, std::size_t size) {
      if (size > w_.room()) {
        w_.cut(CutReason::Bytes);
      } else {
        w_.external(data, size);
      }
    });
    if (!written) w_.cut(CutReason::Bytes);
  }

  // Whether `t`'s external format fits in `budget` bytes, by an estimate that charges
  // every node at least kMinNode bytes: the walk stops after budget / kMinNode nodes.
  // Takes what it counts from `budget`.
  bool fits(Term t, std::size_t& budget, std::uint32_t depth) {
    auto take = [&](std::size_t n) {
      if (n < kMinNode) n = kMinNode;
      if (n > budget) return false;
      budget -= n;
      return true;
    };
    if (depth >= caps_.max_depth) return false;
    switch (src_.kind(t)) {
      case TermKind::Immediate:
      case TermKind::Other:
        return take(src_.leaf_size(t));
      case TermKind::Integer: {
        std::int64_t v;
        if (src_.int64(t, v)) return take(11);
        BigShape b = src_.bignum(t);
        return b.known && b.bytes() < budget && take(7 + b.bytes());
      }
      case TermKind::Float:
        return take(9);
      case TermKind::Binary:
      case TermKind::Bitstring: {
        std::uint64_t bits = 0;
        return src_.bit_size(t, bits) && bits / 8 < budget && take(6 + (bits + 7) / 8);
      }
      case TermKind::Tuple: {
        std::uint32_t arity = 0;
        const Term* elems = src_.tuple(t, arity);
        if (!take(5)) return false;
        for (std::uint32_t i = 0; i < arity; ++i)
          if (!fits(elems[i], budget, depth + 1)) return false;
        return true;
      }
      case TermKind::List: {
        if (!take(5)) return false;
        Term head, tail;
        Term cell = t;
        while (src_.list_cell(cell, head, tail)) {
          if (!fits(head, budget, depth + 1)) return false;
          cell = tail;
        }
        return fits(cell, budget, depth + 1);
      }
      case TermKind::Map: {
        std::uint32_t n = src_.map_size(t);
        if (!take(5) || n > budget / (2 * kMinNode)) return false;
        bool ok = true;
        src_.map_each(t, n, [&](Term k, Term v) {
          ok = fits(k, budget, depth + 1) && fits(v, budget, depth + 1);
          return ok;
        });
        return ok;
      }
      case TermKind::Fun: {
        FunShape f;
        const Term* env = src_.fun(t, f);
        if (!f.known || !take(f.external ? kLeafEstimate : kFunEstimate)) return false;
        for (std::uint32_t i = 0; i < f.num_free; ++i)
          if (!fits(env[i], budget, depth + 1)) return false;
        return true;
      }
    }
    return false;
  }

  // A local fun's own fields in the external format (module, indexes, uniq, creator pid).
  static constexpr std::size_t kFunEstimate = 96;
  static constexpr std::size_t kMinNode = 16;

  Source& src_;
  TermWriter& w_;
  const TermCaps& caps_;
};

// Reads the format back. Builder provides, for its `Term` type:
//   Term immediate(std::uint64_t)
//   Term int64(std::int64_t)
//   Term float64(double)
//   Term binary(const std::uint8_t*, std::size_t kept, std::uint64_t total)
//   Term tuple(std::vector<Term>& elems, std::uint32_t total)       // total > size: cut
//   Term list(std::vector<Term>& elems, ListEnd end, const Term* tail)
//   Term map(std::vector<Term>& keys_and_values, std::uint32_t total)
//   Term external(const std::uint8_t*, std::size_t)
//   Term cut(CutReason)
//   Term bits(const std::uint8_t*, std::size_t kept, std::uint64_t total_bits)   // cut short
//   Term big_cut(const BigShape&)
//   Term fun_cut(const FunShape&)                                   // identity only
//   Term malformed()                                                // never for our own output
// A payload that is malformed anywhere (bad tag, truncated, inconsistent counts) decodes
// as a whole to malformed(), and the decoder then stays at_end(): nothing after a bad
// piece can be trusted.
template <class Builder>
class TermDecoder {
 public:
  using Term = typename Builder::Term;

  TermDecoder(Builder& builder, const std::uint8_t* data, std::size_t size)
      : b_(builder), p_(data), end_(data + size) {}

  bool at_end() const { return p_ >= end_; }
  bool failed() const { return failed_; }

  Term decode() {
    if (failed_) return b_.malformed();
    return decode_term();  // every failure returns malformed() all the way up
  }

 private:
  Term malformed() {
    failed_ = true;
    p_ = end_;
    return b_.malformed();
  }

  Term decode_term() {
    std::uint8_t tag;
    if (!get(tag)) return malformed();
    switch (static_cast<Tag>(tag)) {
      case Tag::Immediate: {
        std::uint64_t w;
        return get(w) ? b_.immediate(w) : malformed();
      }
      case Tag::Int64: {
        std::int64_t v;
        return get(v) ? b_.int64(v) : malformed();
      }
      case Tag::Float: {
        double v;
        return get(v) ? b_.float64(v) : malformed();
      }
      case Tag::Binary: {
        std::uint64_t total;
        std::uint32_t kept;
        if (!get(total) || !get(kept) || kept > total || remaining() < kept) return malformed();
        const std::uint8_t* data = p_;
        p_ += kept;
        return b_.binary(data, kept, total);
      }
      case Tag::Tuple: {
        std::uint32_t total, kept;
        if (!get(total) || !get(kept) || kept > total) return malformed();
        std::vector<Term> elems;
        if (!items(kept, elems)) return malformed();
        return b_.tuple(elems, total);
      }
      case Tag::List: {
        std::uint32_t kept;
        std::uint8_t end;
        if (!get(kept) || !get(end) || end > 2) return malformed();
        std::vector<Term> elems;
        if (!items(kept, elems)) return malformed();
        if (static_cast<ListEnd>(end) == ListEnd::Improper) {
          Term tail = decode_term();
          if (failed_) return malformed();
          return b_.list(elems, ListEnd::Improper, &tail);
        }
        return b_.list(elems, static_cast<ListEnd>(end), nullptr);
      }
      case Tag::Map: {
        std::uint32_t total, kept;
        if (!get(total) || !get(kept) || kept > total) return malformed();
        std::vector<Term> kvs;
        if (!items(2ull * kept, kvs)) return malformed();
        return b_.map(kvs, total);
      }
      case Tag::External: {
        std::uint32_t len;
        if (!get(len) || remaining() < len) return malformed();
        const std::uint8_t* data = p_;
        p_ += len;
        return b_.external(data, len);
      }
      case Tag::Cut: {
        std::uint8_t why;
        if (!get(why) || why < static_cast<std::uint8_t>(CutReason::Depth) ||
            why > static_cast<std::uint8_t>(CutReason::Bytes))
          return malformed();
        return b_.cut(static_cast<CutReason>(why));
      }
      case Tag::Bits: {
        std::uint64_t total;
        std::uint32_t kept;
        if (!get(total) || !get(kept) || total % 8 == 0 || kept > total / 8 || remaining() < kept)
          return malformed();
        const std::uint8_t* data = p_;
        p_ += kept;
        return b_.bits(data, kept, total);
      }
      case Tag::BigCut: {
        BigShape b;
        std::uint8_t negative;
        if (!get(negative) || !get(b.bits) || !get(b.lead) || !get(b.lead_bits) || negative > 1 ||
            b.lead_bits == 0 || b.lead_bits > 60 || b.lead_bits > b.bits || (b.lead >> (b.lead_bits - 1)) != 1)
          return malformed();
        b.known = true;
        b.negative = negative == 1;
        return b_.big_cut(b);
      }
      case Tag::FunCut: {
        FunShape f;
        if (!get(f.module) || !get(f.arity) || !get(f.index) || !get(f.uniq) || !get(f.num_free) ||
            !erts::is_atom(f.module) || f.arity > 255 || f.num_free == 0 || f.num_free > 255)
          return malformed();
        f.known = f.identity = true;
        return b_.fun_cut(f);
      }
    }
    return malformed();
  }

  std::size_t remaining() const { return static_cast<std::size_t>(end_ - p_); }

  template <class T>
  bool get(T& v) {
    if (remaining() < sizeof v) return false;
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return true;
  }

  bool items(std::uint64_t n, std::vector<Term>& out) {
    // Every encoded item takes at least 2 bytes: refuse counts the data cannot hold.
    if (n > remaining() / 2) return false;
    out.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      out.push_back(decode_term());
      if (failed_) return false;
    }
    return true;
  }

  Builder& b_;
  const std::uint8_t* p_;
  const std::uint8_t* end_;
  bool failed_ = false;
};

}  // namespace kino_trace
