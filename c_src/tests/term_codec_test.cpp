// Term codec: TermEncoder (through a Source adapter) + TermWriter + TermDecoder (through a
// Builder), over a small C++ term type. Round trips, every cap, cost bounds, and a
// decoder that refuses malformed input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "term_codec.hpp"

using namespace kino_trace;

namespace kino_trace {
bool operator==(const BigShape& a, const BigShape& b) {
  return a.known == b.known && a.negative == b.negative && a.bits == b.bits && a.lead == b.lead &&
         a.lead_bits == b.lead_bits;
}
bool operator==(const FunShape& a, const FunShape& b) {
  return a.known == b.known && a.external == b.external && a.identity == b.identity && a.module == b.module &&
         a.arity == b.arity && a.index == b.index && a.uniq == b.uniq && a.num_free == b.num_free;
}
}  // namespace kino_trace

namespace {

// ---------------------------------------------------------------------------------
// A tiny term type, used both as the encoder's input and as the decoder's output.
// Source terms are always "complete" (total == kept, ListEnd Proper/Improper);
// decoded terms may carry cuts.

struct TestTerm;
using Bytes = std::vector<std::uint8_t>;

// Immediate words as erts_layout.hpp lays them out.
constexpr std::uint64_t kNil = erts::kNil;
constexpr std::uint64_t atom_word(std::uint64_t n) { return erts::atom_word(n); }

struct Imm { std::uint64_t word = 0; };
struct Int { std::int64_t value = 0; };
struct Big {                               // an integer that does not fit int64
  Bytes ext;                                //   its external format (opaque here)
  std::vector<std::uint64_t> digits;        //   its magnitude, least significant first
  bool negative = false;
};
struct Bits {                               // a bitstring with tail bits; decoded: cut short
  Bytes bytes;                              //   source: all bytes; decoded: the kept whole bytes
  std::uint64_t bits = 0;
  Bytes ext;                                //   source: its external format
};
struct BigCutT { BigShape shape; };         // decoded only
struct Fun {                                // source: a fun; decoded (cut): shape only
  FunShape shape;
  std::vector<TestTerm> env;                //   source only
  Bytes ext;                                //   source only
};
struct Flt { double value = 0; };
struct Bin { Bytes bytes; std::uint64_t total = 0; };
struct Tup { std::vector<TestTerm> elems; std::uint32_t total = 0; };
struct Lst {                                // a non-empty list
  std::vector<TestTerm> items;
  ListEnd end = ListEnd::Proper;
  std::shared_ptr<const TestTerm> tail;     // set only when end == Improper
};
struct Map { std::vector<TestTerm> kvs; std::uint32_t total = 0; };  // k0, v0, k1, v1, ...
struct Ext { Bytes bytes; bool encodable = true; };
struct Cut { CutReason why = CutReason::Depth; };
struct Malformed {};

struct TestTerm {
  std::variant<Imm, Int, Big, Flt, Bin, Tup, Lst, Map, Ext, Cut, Malformed, Bits, BigCutT, Fun> v;
};

bool operator==(const TestTerm& a, const TestTerm& b);
bool operator==(const Imm& a, const Imm& b) { return a.word == b.word; }
bool operator==(const Int& a, const Int& b) { return a.value == b.value; }
bool operator==(const Big& a, const Big& b) { return a.ext == b.ext && a.digits == b.digits && a.negative == b.negative; }
bool operator==(const Bits& a, const Bits& b) { return a.bytes == b.bytes && a.bits == b.bits && a.ext == b.ext; }
bool operator==(const BigCutT& a, const BigCutT& b) { return a.shape == b.shape; }
bool operator==(const Fun& a, const Fun& b) { return a.shape == b.shape && a.env == b.env && a.ext == b.ext; }
bool operator==(const Flt& a, const Flt& b) { return std::memcmp(&a.value, &b.value, sizeof a.value) == 0; }
bool operator==(const Bin& a, const Bin& b) { return a.bytes == b.bytes && a.total == b.total; }
bool operator==(const Tup& a, const Tup& b) { return a.elems == b.elems && a.total == b.total; }
bool operator==(const Lst& a, const Lst& b) {
  if (a.items != b.items || a.end != b.end) return false;
  if (!a.tail || !b.tail) return !a.tail && !b.tail;
  return *a.tail == *b.tail;
}
bool operator==(const Map& a, const Map& b) { return a.kvs == b.kvs && a.total == b.total; }
bool operator==(const Ext& a, const Ext& b) { return a.bytes == b.bytes && a.encodable == b.encodable; }
bool operator==(const Cut& a, const Cut& b) { return a.why == b.why; }
bool operator==(const Malformed&, const Malformed&) { return true; }
bool operator==(const TestTerm& a, const TestTerm& b) { return a.v == b.v; }
bool operator!=(const TestTerm& a, const TestTerm& b) { return !(a == b); }

void show(std::ostream& os, const TestTerm& t);
void show_seq(std::ostream& os, const std::vector<TestTerm>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) os << ", ";
    show(os, v[i]);
  }
}
void show(std::ostream& os, const TestTerm& t) {
  struct V {
    std::ostream& out;
    void operator()(const Imm& x) { out << (x.word == kNil ? std::string("[]") : "imm:" + std::to_string(x.word)); }
    void operator()(const Int& x) { out << x.value; }
    void operator()(const Big& x) { out << "big<" << x.ext.size() << ">"; }
    void operator()(const Flt& x) { out << x.value << "f"; }
    void operator()(const Bin& x) { out << "<<" << x.bytes.size() << "/" << x.total << ">>"; }
    void operator()(const Tup& x) { out << "{"; show_seq(out, x.elems); out << " |" << x.total << "}"; }
    void operator()(const Lst& x) {
      out << "[";
      show_seq(out, x.items);
      if (x.end == ListEnd::Cut) out << " | ...";
      if (x.tail) { out << " | "; show(out, *x.tail); }
      out << "]";
    }
    void operator()(const Map& x) { out << "%{"; show_seq(out, x.kvs); out << " |" << x.total << "}"; }
    void operator()(const Ext& x) { out << "ext<" << x.bytes.size() << (x.encodable ? "" : ",!") << ">"; }
    void operator()(const Cut& x) { out << "CUT(" << static_cast<int>(x.why) << ")"; }
    void operator()(const Malformed&) { out << "MALFORMED"; }
    void operator()(const Bits& x) { out << "<<" << x.bytes.size() << " bytes/" << x.bits << " bits" << ">>"; }
    void operator()(const BigCutT& x) {
      out << "bigcut(" << (x.shape.negative ? "-" : "+") << x.shape.bits << " bits, lead " << x.shape.lead << "/"
          << int(x.shape.lead_bits) << ")";
    }
    void operator()(const Fun& x) {
      out << "fun(" << (x.shape.external ? "ext " : "") << x.shape.module << " " << x.shape.index << "/"
          << x.shape.arity << " free " << x.shape.num_free << " env " << x.env.size() << ")";
    }
  };
  std::visit(V{os}, t.v);
}
std::ostream& operator<<(std::ostream& os, const TestTerm& t) { show(os, t); return os; }

// --- constructors ------------------------------------------------------------------
Bytes bytes_of(std::size_t n, std::uint8_t seed = 1) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(seed + 31u * i);
  return b;
}
TestTerm imm(std::uint64_t w) { return {Imm{w}}; }
TestTerm atom(std::uint64_t n) { return imm(atom_word(n)); }
// The atom the test source reads as __struct__.
constexpr std::uint64_t kStructAtom = 4077;
TestTerm nil() { return imm(kNil); }
TestTerm i64(std::int64_t v) { return {Int{v}}; }
// A bignum whose magnitude takes b.size() bytes (its top byte made non-zero).
TestTerm big(Bytes b, bool negative = false) {
  std::vector<std::uint64_t> digits((b.size() + 7) / 8, 0);
  for (std::size_t i = 0; i < b.size(); ++i) {
    std::uint8_t byte = i + 1 == b.size() && b[i] == 0 ? 1 : b[i];
    digits[i / 8] |= std::uint64_t{byte} << (8 * (i % 8));
  }
  return {Big{std::move(b), std::move(digits), negative}};
}
TestTerm bits(Bytes bytes, std::uint64_t nbits) {
  Bytes e = bytes;
  e.push_back(static_cast<std::uint8_t>(nbits % 8));
  return {Bits{std::move(bytes), nbits, std::move(e)}};
}
TestTerm bits_cut(Bytes kept, std::uint64_t nbits) { return {Bits{std::move(kept), nbits, {}}}; }
TestTerm big_cut(const BigShape& s) { return {BigCutT{s}}; }
FunShape local_fun_shape(std::uint32_t num_free) {
  FunShape f;
  f.known = f.identity = true;
  f.module = atom_word(77);
  f.arity = 2;
  f.index = 3;
  f.uniq = 123456;
  f.num_free = num_free;
  return f;
}
TestTerm local_fun(std::vector<TestTerm> env) {
  Bytes e = bytes_of(60, 9);
  FunShape f = local_fun_shape(static_cast<std::uint32_t>(env.size()));
  return {Fun{f, std::move(env), std::move(e)}};
}
TestTerm external_fun() {
  FunShape f;
  f.known = f.external = true;
  f.arity = 1;
  return {Fun{f, {}, bytes_of(30, 4)}};
}
TestTerm fun_cut(const FunShape& f) { return {Fun{f, {}, {}}}; }
TestTerm flt(double d) { return {Flt{d}}; }
TestTerm bin(Bytes b) { std::uint64_t n = b.size(); return {Bin{std::move(b), n}}; }
TestTerm bin_cut(Bytes kept, std::uint64_t total) { return {Bin{std::move(kept), total}}; }
TestTerm tup(std::vector<TestTerm> e) { auto n = static_cast<std::uint32_t>(e.size()); return {Tup{std::move(e), n}}; }
TestTerm tup_cut(std::vector<TestTerm> e, std::uint32_t total) { return {Tup{std::move(e), total}}; }
TestTerm list(std::vector<TestTerm> items) { return {Lst{std::move(items), ListEnd::Proper, nullptr}}; }
TestTerm ilist(std::vector<TestTerm> items, TestTerm tail) {
  return {Lst{std::move(items), ListEnd::Improper, std::make_shared<const TestTerm>(std::move(tail))}};
}
TestTerm list_cut(std::vector<TestTerm> items) { return {Lst{std::move(items), ListEnd::Cut, nullptr}}; }
TestTerm map(std::vector<TestTerm> kvs) {
  auto n = static_cast<std::uint32_t>(kvs.size() / 2);
  return {Map{std::move(kvs), n}};
}
TestTerm map_cut(std::vector<TestTerm> kvs, std::uint32_t total) { return {Map{std::move(kvs), total}}; }
TestTerm ext(Bytes b, bool encodable = true) { return {Ext{std::move(b), encodable}}; }
TestTerm cut(CutReason why) { return {Cut{why}}; }


// ---------------------------------------------------------------------------------
// The Source adapter. A Term is a reference to a node; for a list node it names the cell
// at `offset` (the list's suffix from that element on).

struct Ref {
  const TestTerm* node = nullptr;
  std::uint32_t offset = 0;
};

const TestTerm& nil_term() {
  static const TestTerm t = nil();
  return t;
}

class TestSource {
 public:
  using Term = Ref;

  std::size_t kind_calls = 0;
  std::size_t list_cell_calls = 0;
  std::size_t map_pairs_visited = 0;
  std::size_t tuple_elems_exposed = 0;
  std::size_t bytes_read = 0;      // binary/bitstring bytes handed to the encoder
  std::size_t external_bytes = 0;  // bytes serialised by external()

  TermKind kind(Ref r) {
    ++kind_calls;
    struct K {
      TermKind operator()(const Imm&) { return TermKind::Immediate; }
      TermKind operator()(const Int&) { return TermKind::Integer; }
      TermKind operator()(const Big&) { return TermKind::Integer; }
      TermKind operator()(const Flt&) { return TermKind::Float; }
      TermKind operator()(const Bin&) { return TermKind::Binary; }
      TermKind operator()(const Tup&) { return TermKind::Tuple; }
      TermKind operator()(const Lst&) { return TermKind::List; }
      TermKind operator()(const Map&) { return TermKind::Map; }
      TermKind operator()(const Ext&) { return TermKind::Other; }
      TermKind operator()(const Cut&) { return TermKind::Other; }
      TermKind operator()(const Malformed&) { return TermKind::Other; }
      TermKind operator()(const Bits&) { return TermKind::Bitstring; }
      TermKind operator()(const BigCutT&) { return TermKind::Other; }
      TermKind operator()(const Fun&) { return TermKind::Fun; }
    };
    return std::visit(K{}, r.node->v);
  }
  std::uint64_t word(Ref r) { return std::get<Imm>(r.node->v).word; }
  std::size_t leaf_size(Ref r) {
    if (auto* e = std::get_if<Ext>(&r.node->v)) return e->bytes.size();
    return 9;
  }
  BigShape bignum(Ref r) {
    const Big& b = std::get<Big>(r.node->v);
    return bignum_shape(b.digits.data(), b.digits.size(), b.negative);
  }
  bool bit_size(Ref r, std::uint64_t& n) {
    if (auto* b = std::get_if<Bin>(&r.node->v)) {
      n = 8 * std::uint64_t{b->bytes.size()};
      return true;
    }
    n = std::get<Bits>(r.node->v).bits;
    return true;
  }
  bool bytes(Ref r, std::size_t n, const std::uint8_t*& data) {
    const Bytes& b = std::holds_alternative<Bin>(r.node->v) ? std::get<Bin>(r.node->v).bytes : std::get<Bits>(r.node->v).bytes;
    REQUIRE(n <= b.size());
    bytes_read += n;
    data = b.data();
    return true;
  }
  const Ref* fun(Ref r, FunShape& shape) {
    const Fun& f = std::get<Fun>(r.node->v);
    shape = f.shape;
    arrays_.emplace_back();
    for (const TestTerm& e : f.env) arrays_.back().push_back(Ref{&e, 0});
    return arrays_.back().data();
  }
  bool int64(Ref r, std::int64_t& out) {
    if (auto* i = std::get_if<Int>(&r.node->v)) {
      out = i->value;
      return true;
    }
    return false;
  }
  double float64(Ref r) { return std::get<Flt>(r.node->v).value; }

  const Ref* tuple(Ref r, std::uint32_t& arity) {
    const Tup& t = std::get<Tup>(r.node->v);
    arrays_.emplace_back();
    for (const TestTerm& e : t.elems) arrays_.back().push_back(Ref{&e, 0});
    arity = static_cast<std::uint32_t>(t.elems.size());
    tuple_elems_exposed += t.elems.size();
    return arrays_.back().data();
  }
  bool list_cell(Ref r, Ref& head, Ref& tail) {
    auto* l = std::get_if<Lst>(&r.node->v);
    if (!l) return false;
    ++list_cell_calls;
    head = Ref{&l->items.at(r.offset), 0};
    if (r.offset + 1 < l->items.size()) {
      tail = Ref{r.node, r.offset + 1};
    } else {
      tail = Ref{l->tail ? l->tail.get() : &nil_term(), 0};
    }
    return true;
  }
  bool is_nil(Ref r) {
    auto* i = std::get_if<Imm>(&r.node->v);
    return i && i->word == kNil;
  }
  std::uint32_t map_size(Ref r) { return static_cast<std::uint32_t>(std::get<Map>(r.node->v).kvs.size() / 2); }
  // The test terms' __struct__ is atom(kStructAtom).
  bool struct_entry(Ref r, Ref& key, Ref& value) {
    const Map& m = std::get<Map>(r.node->v);
    for (std::size_t i = 0; i + 1 < m.kvs.size(); i += 2) {
      if (is_struct_key(Ref{&m.kvs[i], 0})) {
        key = Ref{&m.kvs[i], 0};
        value = Ref{&m.kvs[i + 1], 0};
        return true;
      }
    }
    return false;
  }
  bool is_struct_key(Ref r) {
    auto* i = std::get_if<Imm>(&r.node->v);
    return i && i->word == atom_word(kStructAtom);
  }
  template <class F>
  void map_each(Ref r, std::uint32_t limit, F&& f) {
    const Map& m = std::get<Map>(r.node->v);
    for (std::size_t i = 0; i + 1 < m.kvs.size() && i / 2 < limit; i += 2) {
      ++map_pairs_visited;
      if (!f(Ref{&m.kvs[i], 0}, Ref{&m.kvs[i + 1], 0})) break;
    }
  }
  template <class F>
  bool external(Ref r, F&& sink) {
    const Bytes* bytes = nullptr;
    if (auto* b = std::get_if<Big>(&r.node->v)) bytes = &b->ext;
    if (auto* b = std::get_if<Bits>(&r.node->v)) bytes = &b->ext;
    if (auto* f = std::get_if<Fun>(&r.node->v)) bytes = &f->ext;
    if (!bytes) {
      const Ext& e = std::get<Ext>(r.node->v);
      if (!e.encodable) return false;
      bytes = &e.bytes;
    }
    external_bytes += bytes->size();
    sink(bytes->data(), bytes->size());
    return true;
  }

 private:
  std::deque<std::vector<Ref>> arrays_;  // element arrays handed out by tuple()
};

// The Builder: decodes back into TestTerm.
struct TestBuilder {
  using Term = TestTerm;
  std::size_t malformed_calls = 0;

  Term immediate(std::uint64_t w) { return imm(w); }
  Term int64(std::int64_t v) { return i64(v); }
  Term float64(double d) { return flt(d); }
  Term binary(const std::uint8_t* data, std::size_t kept, std::uint64_t total) {
    return bin_cut(Bytes(data, data + kept), total);
  }
  Term tuple(std::vector<Term>& elems, std::uint32_t total) { return tup_cut(std::move(elems), total); }
  Term list(std::vector<Term>& elems, ListEnd end, const Term* tail) {
    if (end == ListEnd::Improper) return ilist(std::move(elems), *tail);
    return {Lst{std::move(elems), end, nullptr}};
  }
  Term map(std::vector<Term>& kvs, std::uint32_t total) { return map_cut(std::move(kvs), total); }
  Term external(const std::uint8_t* data, std::size_t size) { return ext(Bytes(data, data + size)); }
  Term cut(CutReason why) { return ::cut(why); }
  Term bits(const std::uint8_t* data, std::size_t kept, std::uint64_t total) { return bits_cut(Bytes(data, data + kept), total); }
  Term big_cut(const BigShape& b) { return ::big_cut(b); }
  Term fun_cut(const FunShape& f) { return ::fun_cut(f); }
  Term malformed() {
    ++malformed_calls;
    return {Malformed{}};
  }
};

TermCaps unlimited_caps() {
  TermCaps c;
  c.max_depth = 1000;
  c.max_items = 1u << 30;
  c.max_binary = 1u << 30;
  c.max_bytes = 1u << 30;
  return c;
}

PayloadBuffer encode(const TestTerm& t, const TermCaps& caps, TestSource* counting = nullptr) {
  PayloadBuffer out;
  TermWriter w(out, caps);
  TestSource local;
  TestSource& src = counting ? *counting : local;
  TermEncoder<TestSource> enc(src, w);
  enc.encode(Ref{&t, 0});
  return out;
}

TestTerm decode(const std::uint8_t* data, std::size_t size, bool* at_end = nullptr) {
  TestBuilder b;
  TermDecoder<TestBuilder> dec(b, data, size);
  TestTerm t = dec.decode();
  if (at_end) *at_end = dec.at_end();
  return t;
}

TestTerm decode(const PayloadBuffer& buf, bool* at_end = nullptr) { return decode(buf.data(), buf.size(), at_end); }

TestTerm round_trip(const TestTerm& t, const TermCaps& caps) {
  PayloadBuffer buf = encode(t, caps);
  bool at_end = false;
  TestTerm back = decode(buf, &at_end);
  CHECK(at_end);
  return back;
}

// What a source term looks like after an uncut round trip: bignums come back as external.
TestTerm normalized(const TestTerm& t) {
  if (auto* b = std::get_if<Big>(&t.v)) return ext(b->ext);
  if (auto* b = std::get_if<Bits>(&t.v)) return ext(b->ext);
  if (auto* f = std::get_if<Fun>(&t.v)) return ext(f->ext);
  if (auto* tp = std::get_if<Tup>(&t.v)) {
    std::vector<TestTerm> e;
    for (auto& x : tp->elems) e.push_back(normalized(x));
    return tup_cut(std::move(e), tp->total);
  }
  if (auto* l = std::get_if<Lst>(&t.v)) {
    std::vector<TestTerm> e;
    for (auto& x : l->items) e.push_back(normalized(x));
    if (l->tail) return ilist(std::move(e), normalized(*l->tail));
    return {Lst{std::move(e), l->end, nullptr}};
  }
  if (auto* m = std::get_if<Map>(&t.v)) {
    std::vector<TestTerm> e;
    for (auto& x : m->kvs) e.push_back(normalized(x));
    return map_cut(std::move(e), m->total);
  }
  return t;
}

// Reference model of the caps (without the byte budget): what the decoder must give back.
TestTerm expected_under_caps(const TestTerm& t, const TermCaps& caps, std::uint32_t depth) {
  auto sub = [&](const TestTerm& x) { return expected_under_caps(x, caps, depth + 1); };
  if (auto* b = std::get_if<Big>(&t.v)) {
    if (b->ext.size() <= caps.max_binary) return ext(b->ext);
    return big_cut(bignum_shape(b->digits.data(), b->digits.size(), b->negative));
  }
  if (auto* b = std::get_if<Bits>(&t.v)) {
    if ((b->bits + 7) / 8 <= caps.max_binary) return ext(b->ext);
    std::size_t keep = std::min<std::size_t>(b->bits / 8, caps.max_binary);
    return bits_cut(Bytes(b->bytes.begin(), b->bytes.begin() + static_cast<std::ptrdiff_t>(keep)), b->bits);
  }
  if (auto* f = std::get_if<Fun>(&t.v)) {
    // The generator makes funs whose environment is either a few integers (each sized
    // as the encoder's minimum per node, 16 bytes) or 1000-byte binaries (1006 bytes).
    if (depth >= caps.max_depth) return cut(CutReason::Depth);
    std::size_t env = 0;
    for (const TestTerm& e : f->env) env += std::holds_alternative<Bin>(e.v) ? 1006 : 16;
    if (f->shape.external || env <= caps.max_binary) return ext(f->ext);
    return fun_cut(f->shape);
  }
  if (auto* b = std::get_if<Bin>(&t.v)) {
    std::size_t keep = std::min<std::size_t>(b->bytes.size(), caps.max_binary);
    return bin_cut(Bytes(b->bytes.begin(), b->bytes.begin() + static_cast<std::ptrdiff_t>(keep)), b->total);
  }
  if (auto* tp = std::get_if<Tup>(&t.v)) {
    if (depth >= caps.max_depth) return cut(CutReason::Depth);
    std::vector<TestTerm> e;
    for (std::size_t i = 0; i < tp->elems.size() && i < caps.max_items; ++i) e.push_back(sub(tp->elems[i]));
    return tup_cut(std::move(e), tp->total);
  }
  if (auto* l = std::get_if<Lst>(&t.v)) {
    if (depth >= caps.max_depth) return cut(CutReason::Depth);
    std::vector<TestTerm> e;
    for (std::size_t i = 0; i < l->items.size() && i < caps.max_items; ++i) e.push_back(sub(l->items[i]));
    if (l->items.size() > caps.max_items) return list_cut(std::move(e));
    if (l->tail) return ilist(std::move(e), sub(*l->tail));
    return list(std::move(e));
  }
  if (auto* m = std::get_if<Map>(&t.v)) {
    if (depth >= caps.max_depth) return cut(CutReason::Depth);
    std::vector<TestTerm> e;
    for (std::size_t i = 0; i + 1 < m->kvs.size() && i / 2 < caps.max_items; i += 2) {
      e.push_back(sub(m->kvs[i]));
      e.push_back(sub(m->kvs[i + 1]));
    }
    return map_cut(std::move(e), m->total);
  }
  if (auto* x = std::get_if<Ext>(&t.v)) {
    if (depth >= caps.max_depth) return cut(CutReason::Depth);
    if (!x->encodable) return cut(CutReason::Bytes);
    return t;
  }
  return t;
}

// Random terms. Lists never end in another list or in [] written as an explicit tail.
class TermGen {
 public:
  explicit TermGen(std::uint32_t seed) : rng_(seed) {}

  // A random term of at most `depth` container levels and about `nodes` nodes.
  TestTerm any(int depth, int nodes = 300) {
    budget_ = nodes;
    return gen(depth);
  }

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::uint64_t pick_u64() { return std::uniform_int_distribution<std::uint64_t>()(rng_); }

 private:
  int length(int lo, int hi) { return std::max(lo, std::min(pick(lo, hi), budget_)); }

  TestTerm gen(int depth_left) {
    --budget_;
    int k = pick(0, depth_left > 0 && budget_ > 0 ? 10 : 5);
    switch (k) {
      case 0: return imm(pick_u64());
      case 1: return pick(0, 3) == 0 ? nil() : atom(static_cast<std::uint64_t>(pick(0, 1000)));
      case 2: return i64(static_cast<std::int64_t>(pick_u64()));
      case 3: return flt(std::ldexp(static_cast<double>(pick(-1000000, 1000000)), pick(-60, 60)));
      case 4: return bin(bytes_of(static_cast<std::size_t>(pick(0, 3) == 0 ? pick(0, 700) : pick(0, 20)),
                                  static_cast<std::uint8_t>(pick(0, 255))));
      case 5:
        switch (pick(0, 4)) {
          case 0: return big(bytes_of(static_cast<std::size_t>(pick(8, 60))), pick(0, 1) == 1);
          case 1: {
            std::size_t n = static_cast<std::size_t>(pick(1, 60));
            return bits(bytes_of(n), 8 * (n - 1) + static_cast<std::uint64_t>(pick(1, 7)));
          }
          case 2: {
            if (pick(0, 3) == 0) return external_fun();
            std::vector<TestTerm> env;
            bool huge = pick(0, 1) == 1;
            for (int i = pick(1, 3); i > 0; --i) env.push_back(huge ? bin(bytes_of(1000)) : i64(i));
            return local_fun(std::move(env));
          }
          default: return ext(bytes_of(static_cast<std::size_t>(pick(0, 40))));
        }
      case 6:
      case 7: {
        std::vector<TestTerm> e;
        int n = pick(0, 3) == 0 ? length(0, 80) : length(0, 6);
        for (int i = 0; i < n; ++i) e.push_back(gen(depth_left - 1));
        return tup(std::move(e));
      }
      case 8: {
        std::vector<TestTerm> e;
        int n = pick(0, 3) == 0 ? length(1, 80) : length(1, 6);
        for (int i = 0; i < n; ++i) e.push_back(gen(depth_left - 1));
        if (pick(0, 3) == 0) {
          TestTerm tail = gen(depth_left - 1);
          while (std::holds_alternative<Lst>(tail.v) || tail == nil()) tail = atom(7);
          return ilist(std::move(e), std::move(tail));
        }
        return list(std::move(e));
      }
      case 9: {
        std::vector<TestTerm> e;
        int n = pick(0, 3) == 0 ? length(0, 60) : length(0, 5);
        for (int i = 0; i < 2 * n; ++i) e.push_back(gen(depth_left - 1));
        return map(std::move(e));
      }
      default:
        return ext(bytes_of(static_cast<std::size_t>(pick(0, 10))), pick(0, 4) != 0);
    }
  }

  std::mt19937 rng_;
  int budget_ = 0;
};

// Everything a decoded term may legally look like.
bool well_formed_decoded(const TestTerm& t) {
  if (auto* b = std::get_if<Bin>(&t.v)) return b->bytes.size() <= b->total;
  if (auto* b = std::get_if<Bits>(&t.v)) return b->bytes.size() <= b->bits / 8 && b->bits % 8 != 0;
  if (auto* b = std::get_if<BigCutT>(&t.v)) return b->shape.known && b->shape.lead_bits <= b->shape.bits;
  if (auto* f = std::get_if<Fun>(&t.v)) return f->shape.identity && f->env.empty();
  if (auto* c = std::get_if<Cut>(&t.v))
    return c->why == CutReason::Depth || c->why == CutReason::Items || c->why == CutReason::Bytes;
  if (auto* tp = std::get_if<Tup>(&t.v)) {
    if (tp->elems.size() > tp->total) return false;
    for (auto& x : tp->elems) if (!well_formed_decoded(x)) return false;
  }
  if (auto* l = std::get_if<Lst>(&t.v)) {
    if ((l->end == ListEnd::Improper) != static_cast<bool>(l->tail)) return false;
    if (l->end != ListEnd::Proper && l->end != ListEnd::Improper && l->end != ListEnd::Cut) return false;
    for (auto& x : l->items) if (!well_formed_decoded(x)) return false;
    if (l->tail && !well_formed_decoded(*l->tail)) return false;
  }
  if (auto* m = std::get_if<Map>(&t.v)) {
    if (m->kvs.size() % 2 != 0 || m->kvs.size() / 2 > m->total) return false;
    for (auto& x : m->kvs) if (!well_formed_decoded(x)) return false;
  }
  return !std::holds_alternative<Malformed>(t.v);
}

std::size_t term_depth(const TestTerm& t) {
  std::size_t d = 0;
  auto deeper = [&](const TestTerm& x) { d = std::max(d, 1 + term_depth(x)); };
  if (auto* tp = std::get_if<Tup>(&t.v)) for (auto& x : tp->elems) deeper(x);
  if (auto* l = std::get_if<Lst>(&t.v)) {
    for (auto& x : l->items) deeper(x);
    if (l->tail) deeper(*l->tail);
  }
  if (auto* m = std::get_if<Map>(&t.v)) for (auto& x : m->kvs) deeper(x);
  return d;
}

std::vector<TestTerm> ints(int from, int to) {
  std::vector<TestTerm> v;
  for (int i = from; i < to; ++i) v.push_back(i64(i));
  return v;
}

}  // namespace

// =====================================================================================
// Round trips

TEST_CASE("codec: every kind round-trips exactly under the caps", "[codec]") {
  const TermCaps caps;  // the defaults
  std::vector<TestTerm> terms = {
      imm(0), imm(std::numeric_limits<std::uint64_t>::max()), nil(), atom(42),
      i64(0), i64(-1), i64(std::numeric_limits<std::int64_t>::min()), i64(std::numeric_limits<std::int64_t>::max()),
      big(bytes_of(12)),
      flt(0.0), flt(-0.0), flt(3.25), flt(std::numeric_limits<double>::infinity()),
      flt(-std::numeric_limits<double>::infinity()), flt(std::numeric_limits<double>::quiet_NaN()),
      flt(std::numeric_limits<double>::denorm_min()),
      bin({}), bin(bytes_of(1)), bin(bytes_of(caps.max_binary)),
      tup({}), tup({atom(1)}), tup({i64(1), flt(2.5), bin(bytes_of(3))}),
      list({atom(1)}), list(ints(0, 50)),
      ilist({atom(1)}, atom(2)), ilist({i64(1), i64(2)}, tup({})), ilist({nil()}, bin(bytes_of(5))),
      ilist({i64(1)}, flt(1.5)), ilist({i64(1)}, ext(bytes_of(9))),
      list({nil(), nil()}), list({list({list({nil()})})}),
      map({}), map({atom(1), i64(1)}), map({tup({}), map({}), list({atom(3)}), nil(), bin({}), big(bytes_of(20))}),
      ext({}), ext(bytes_of(200)),
      tup({tup({tup({tup({tup({})})})}), map({map({}), list({tup({ilist({atom(9)}, tup({atom(8)}))})})}),
           list({bin(bytes_of(100)), i64(-5), big(bytes_of(9)), ext(bytes_of(3))})}),
  };
  for (const TestTerm& t : terms) {
    INFO("term: " << t);
    CHECK(round_trip(t, caps) == normalized(t));
  }
}

TEST_CASE("codec: NaN payload bits survive", "[codec]") {
  std::uint64_t bits = 0x7ff8dead0000beefULL;
  double d;
  std::memcpy(&d, &bits, sizeof d);
  TestTerm back = round_trip(flt(d), TermCaps{});
  REQUIRE(std::holds_alternative<Flt>(back.v));
  std::uint64_t got;
  std::memcpy(&got, &std::get<Flt>(back.v).value, sizeof got);
  CHECK(got == bits);
}

TEST_CASE("codec: random terms round-trip exactly with generous caps", "[codec]") {
  TermGen gen(12345);
  TermCaps caps = unlimited_caps();
  for (int i = 0; i < 400; ++i) {
    TestTerm t = gen.any(6);
    // Unencodable externals are cut by design; leave them out of the exact round trip.
    TestTerm expected = expected_under_caps(t, caps, 0);
    TestTerm got = round_trip(t, caps);
    if (got != expected) FAIL("iteration " << i << "\n term " << t << "\n got  " << got << "\n want " << expected);
    CHECK(got == expected);
  }
}

TEST_CASE("codec: several terms in one payload decode in order", "[codec]") {
  PayloadBuffer out;
  TermCaps caps;
  TermWriter w(out, caps);
  TestSource src;
  TermEncoder<TestSource> enc(src, w);
  TestTerm a = tup({atom(1), i64(2)}), b = bin(bytes_of(7)), c = ilist({atom(1)}, atom(2));
  enc.encode(Ref{&a, 0});
  enc.encode(Ref{&b, 0});
  enc.encode(Ref{&c, 0});
  TestBuilder builder;
  TermDecoder<TestBuilder> dec(builder, out.data(), out.size());
  CHECK(dec.decode() == a);
  CHECK_FALSE(dec.at_end());
  CHECK(dec.decode() == b);
  CHECK(dec.decode() == c);
  CHECK(dec.at_end());
  CHECK(builder.malformed_calls == 0);
}

TEST_CASE("codec: encode_list encodes an argument list at depth 0", "[codec]") {
  TermCaps caps;
  caps.max_depth = 2;
  TestTerm args = list({tup({tup({atom(1)})}), atom(2)});
  PayloadBuffer out;
  TermWriter w(out, caps);
  TestSource src;
  TermEncoder<TestSource> enc(src, w);
  enc.encode_list(Ref{&args, 0}, 0);
  // The arguments are at depth 1: a tuple there is kept, its inner tuple (depth 2) is cut.
  CHECK(decode(out) == list({tup({cut(CutReason::Depth)}), atom(2)}));
  caps.max_depth = 1;  // now the arguments' own containers are cut
  PayloadBuffer o1;
  TermWriter w1(o1, caps);
  TermEncoder<TestSource> e1(src, w1);
  e1.encode_list(Ref{&args, 0}, 0);
  CHECK(decode(o1) == list({cut(CutReason::Depth), atom(2)}));

  SECTION("an empty argument list is an empty proper list") {
    PayloadBuffer o2;
    TermWriter w2(o2, caps);
    TermEncoder<TestSource> e2(src, w2);
    TestTerm none = nil();
    e2.encode_list(Ref{&none, 0}, 0);
    CHECK(decode(o2) == list({}));
  }
}

// =====================================================================================
// Caps

TEST_CASE("codec: depth cap cuts exactly at max_depth", "[codec][caps]") {
  TestTerm nested = tup({atom(1), tup({atom(2), tup({atom(3), tup({atom(4)})})})});
  TermCaps caps = unlimited_caps();

  caps.max_depth = 0;
  CHECK(round_trip(nested, caps) == cut(CutReason::Depth));
  CHECK(round_trip(atom(1), caps) == atom(1));  // leaves are never depth-cut
  CHECK(round_trip(bin(bytes_of(4)), caps) == bin(bytes_of(4)));

  caps.max_depth = 1;
  CHECK(round_trip(nested, caps) == tup({atom(1), cut(CutReason::Depth)}));
  caps.max_depth = 2;
  CHECK(round_trip(nested, caps) == tup({atom(1), tup({atom(2), cut(CutReason::Depth)})}));
  caps.max_depth = 3;
  CHECK(round_trip(nested, caps) == tup({atom(1), tup({atom(2), tup({atom(3), cut(CutReason::Depth)})})}));
  caps.max_depth = 4;
  CHECK(round_trip(nested, caps) == nested);

  SECTION("lists, maps and externals are containers too") {
    caps.max_depth = 1;
    TestTerm t = list({list({atom(1)}), map({atom(1), atom(2)}), ext(bytes_of(3)), big(bytes_of(3)), i64(5)});
    // Bignums are integers: kept at any depth.
    CHECK(round_trip(t, caps) == list({cut(CutReason::Depth), cut(CutReason::Depth), cut(CutReason::Depth),
                                       ext(bytes_of(3)), i64(5)}));
    TestTerm m = map({tup({}), list({atom(1)}), atom(2), map({})});
    CHECK(round_trip(m, caps) == map({cut(CutReason::Depth), cut(CutReason::Depth), atom(2), cut(CutReason::Depth)}));
  }
  SECTION("an improper tail is one level below its list") {
    caps.max_depth = 1;
    CHECK(round_trip(ilist({atom(1)}, tup({atom(2)})), caps) == ilist({atom(1)}, cut(CutReason::Depth)));
    CHECK(round_trip(ilist({atom(1)}, atom(2)), caps) == ilist({atom(1)}, atom(2)));
  }
  SECTION("a deep chain is cut at exactly max_depth levels") {
    TestTerm deep = atom(0);
    for (int i = 0; i < 200; ++i) deep = list({deep});
    caps.max_depth = 37;
    TestTerm back = round_trip(deep, caps);
    CHECK(term_depth(back) == 37);
    const TestTerm* p = &back;
    for (int i = 0; i < 37; ++i) {
      REQUIRE(std::holds_alternative<Lst>(p->v));
      p = &std::get<Lst>(p->v).items.at(0);
    }
    CHECK(*p == cut(CutReason::Depth));
  }
}

TEST_CASE("codec: items cap on lists", "[codec][caps]") {
  TermCaps caps = unlimited_caps();
  caps.max_items = 3;
  CHECK(round_trip(list(ints(0, 10)), caps) == list_cut(ints(0, 3)));
  CHECK(round_trip(list(ints(0, 4)), caps) == list_cut(ints(0, 3)));
  CHECK(round_trip(list(ints(0, 3)), caps) == list(ints(0, 3)));  // exactly max_items: not cut
  CHECK(round_trip(list(ints(0, 1)), caps) == list(ints(0, 1)));
  // An improper list longer than the cap loses its tail along with the rest.
  CHECK(round_trip(ilist(ints(0, 5), atom(1)), caps) == list_cut(ints(0, 3)));
  // The tail is not an item.
  CHECK(round_trip(ilist(ints(0, 3), atom(1)), caps) == ilist(ints(0, 3), atom(1)));

  caps.max_items = 0;
  CHECK(round_trip(list(ints(0, 1)), caps) == list_cut({}));
}

TEST_CASE("codec: items cap on tuples and maps keeps the total", "[codec][caps]") {
  TermCaps caps = unlimited_caps();
  caps.max_items = 4;
  CHECK(round_trip(tup(ints(0, 10)), caps) == tup_cut(ints(0, 4), 10));
  CHECK(round_trip(tup(ints(0, 4)), caps) == tup(ints(0, 4)));
  CHECK(round_trip(tup({}), caps) == tup({}));

  std::vector<TestTerm> kvs;
  for (int i = 0; i < 10; ++i) {
    kvs.push_back(atom(static_cast<std::uint64_t>(i)));
    kvs.push_back(i64(i * 10));
  }
  std::vector<TestTerm> first4(kvs.begin(), kvs.begin() + 8);
  TestSource src;
  PayloadBuffer buf = encode(map(kvs), caps, &src);
  CHECK(decode(buf) == map_cut(first4, 10));
  CHECK(src.map_pairs_visited == 4);  // never walks past the cap

  std::vector<TestTerm> exactly4(kvs.begin(), kvs.begin() + 8);
  CHECK(round_trip(map(exactly4), caps) == map(exactly4));

  caps.max_items = 0;
  CHECK(round_trip(tup(ints(0, 2)), caps) == tup_cut({}, 2));
  TestSource src0;
  CHECK(decode(encode(map(kvs), caps, &src0)) == map_cut({}, 10));
  CHECK(src0.map_pairs_visited == 0);
}

TEST_CASE("codec: a struct cut short keeps its __struct__ pair first", "[codec][caps]") {
  TermCaps caps;
  caps.max_items = 4;
  std::vector<TestTerm> kvs;
  for (int i = 0; i < 10; ++i) {
    kvs.push_back(atom(static_cast<std::uint64_t>(i)));
    kvs.push_back(i64(i * 10));
  }
  kvs.push_back(atom(kStructAtom));  // last in the map's order
  kvs.push_back(atom(5000));
  std::vector<TestTerm> kept{atom(kStructAtom), atom(5000)};
  kept.insert(kept.end(), kvs.begin(), kvs.begin() + 6);
  CHECK(round_trip(map(kvs), caps) == map_cut(kept, 11));

  // a struct that fits is copied as it is, in its order
  caps.max_items = 11;
  CHECK(round_trip(map(kvs), caps) == map(kvs));
  // no room for any pair: nothing kept
  caps.max_items = 0;
  CHECK(round_trip(map(kvs), caps) == map_cut({}, 11));
}

TEST_CASE("codec: binaries keep the first max_binary bytes and the total size", "[codec][caps]") {
  TermCaps caps = unlimited_caps();
  caps.max_binary = 16;
  Bytes big_bin = bytes_of(1000, 77);
  CHECK(round_trip(bin(big_bin), caps) == bin_cut(Bytes(big_bin.begin(), big_bin.begin() + 16), 1000));
  CHECK(round_trip(bin(bytes_of(16)), caps) == bin(bytes_of(16)));
  CHECK(round_trip(bin(bytes_of(17)), caps) == bin_cut(bytes_of(16), 17));
  caps.max_binary = 0;
  CHECK(round_trip(bin(bytes_of(5)), caps) == bin_cut({}, 5));
  // Inside containers too.
  caps.max_binary = 2;
  CHECK(round_trip(tup({bin(bytes_of(9)), list({bin(bytes_of(1))})}), caps) ==
        tup({bin_cut(bytes_of(2), 9), list({bin(bytes_of(1))})}));
}

TEST_CASE("codec: random terms under random caps match the reference model", "[codec][caps]") {
  TermGen gen(777);
  for (int i = 0; i < 500; ++i) {
    TermCaps caps = unlimited_caps();
    caps.max_depth = static_cast<std::uint32_t>(gen.pick(0, 6));
    caps.max_items = static_cast<std::uint32_t>(gen.pick(0, 12));
    caps.max_binary = static_cast<std::uint32_t>(gen.pick(0, 40));
    TestTerm t = gen.any(7);
    TestTerm expected = expected_under_caps(t, caps, 0);
    TestTerm got = round_trip(t, caps);
    if (got != expected)
      FAIL("iteration " << i << " depth " << caps.max_depth << " items " << caps.max_items << " binary "
                        << caps.max_binary << "\n term " << t << "\n got  " << got << "\n want " << expected);
    CHECK(got == expected);
  }
}

TEST_CASE("codec: the byte budget stops early", "[codec][caps]") {
  TermCaps caps = unlimited_caps();
  caps.max_bytes = 64;

  SECTION("a tuple stops between items and keeps its total") {
    TestSource src;
    PayloadBuffer buf = encode(tup(ints(0, 100)), caps, &src);
    TestTerm back = decode(buf);
    REQUIRE(std::holds_alternative<Tup>(back.v));
    const Tup& t = std::get<Tup>(back.v);
    CHECK(t.total == 100);
    // header 9 bytes + 9 per int64; the check is made before each item: ceil((64-9)/9) = 7
    CHECK(t.elems.size() == 7);
    CHECK(t.elems == ints(0, 7));
    CHECK(buf.size() < caps.max_bytes + 9);
    CHECK(src.kind_calls <= 1 + 7);
  }
  SECTION("a list stops and is marked cut") {
    TestSource src;
    PayloadBuffer buf = encode(list(ints(0, 100)), caps, &src);
    TestTerm back = decode(buf);
    REQUIRE(std::holds_alternative<Lst>(back.v));
    CHECK(std::get<Lst>(back.v).end == ListEnd::Cut);
    CHECK(std::get<Lst>(back.v).items.size() < 100);
    CHECK(std::get<Lst>(back.v).items == ints(0, static_cast<int>(std::get<Lst>(back.v).items.size())));
    CHECK(src.list_cell_calls <= 8);
    CHECK(buf.size() < caps.max_bytes + 9);
  }
  SECTION("a term encoded after the budget is spent is Cut(Bytes)") {
    PayloadBuffer out;
    TermWriter w(out, caps);
    TestSource src;
    TermEncoder<TestSource> enc(src, w);
    TestTerm filler = bin(bytes_of(100)), after = tup({atom(1)});
    enc.encode(Ref{&filler, 0});
    CHECK(w.over_budget());
    enc.encode(Ref{&after, 0});
    TestBuilder b;
    TermDecoder<TestBuilder> dec(b, out.data(), out.size());
    TestTerm first = dec.decode();
    // A binary keeps at most the room left when it starts (its 13-byte header comes on top).
    CHECK(first == bin_cut(bytes_of(64), 100));
    CHECK(dec.decode() == cut(CutReason::Bytes));
    CHECK(dec.at_end());
  }
  SECTION("a map value after a key that spent the budget is Cut(Bytes)") {
    TestTerm m = map({bin(bytes_of(200)), i64(1), atom(2), atom(3)});
    TestTerm back = round_trip(m, caps);
    CHECK(back == map_cut({bin_cut(bytes_of(64 - 9), 200), cut(CutReason::Bytes)}, 2));
  }
  SECTION("an improper tail after the budget is spent is Cut(Bytes)") {
    TestTerm l = ilist({bin(bytes_of(200))}, atom(5));
    CHECK(round_trip(l, caps) == ilist({bin_cut(bytes_of(64 - 6), 200)}, cut(CutReason::Bytes)));
  }
  SECTION("an external larger than the room left is Cut(Bytes), smaller ones are kept") {
    CHECK(round_trip(ext(bytes_of(100)), caps) == cut(CutReason::Bytes));
    CHECK(round_trip(big(bytes_of(100)), caps) == cut(CutReason::Bytes));
    CHECK(round_trip(ext(bytes_of(40)), caps) == ext(bytes_of(40)));
    CHECK(round_trip(tup({ext(bytes_of(40)), ext(bytes_of(40))}), caps) ==
          tup({ext(bytes_of(40)), cut(CutReason::Bytes)}));
  }
  SECTION("an unencodable external is Cut(Bytes)") {
    CHECK(round_trip(ext(bytes_of(4), false), unlimited_caps()) == cut(CutReason::Bytes));
  }
}

TEST_CASE("codec: encoded size stays near max_bytes for any term", "[codec][caps]") {
  TermGen gen(4242);
  for (int i = 0; i < 400; ++i) {
    TermCaps caps;
    caps.max_depth = static_cast<std::uint32_t>(gen.pick(0, 8));
    caps.max_items = static_cast<std::uint32_t>(gen.pick(0, 100));
    caps.max_binary = static_cast<std::uint32_t>(gen.pick(0, 1000));
    caps.max_bytes = static_cast<std::uint32_t>(gen.pick(1, 600));
    TestTerm t = gen.any(7);
    PayloadBuffer buf = encode(t, caps);
    INFO("iteration " << i << " max_bytes " << caps.max_bytes << " size " << buf.size());
    // Soft budget: one piece may start just below it (at most a 13-byte binary header,
    // its data limited to the room), followed by at most one 2-byte Cut per level.
    CHECK(buf.size() <= caps.max_bytes + 13 + 2 * (caps.max_depth + 2));
    bool at_end = false;
    TestTerm back = decode(buf, &at_end);
    CHECK(at_end);
    CHECK(well_formed_decoded(back));
    CHECK(term_depth(back) <= caps.max_depth);
  }
}

// =====================================================================================
// Cost: the walk never looks past the caps.

namespace {

// A list of `length` small integers that exists only as a counter: a cell is its index.
class LongListSource {
 public:
  struct Term {
    enum class What : std::uint8_t { Cell, Head, Nil } what = What::Nil;
    std::uint64_t index = 0;
  };
  explicit LongListSource(std::uint64_t length) : length_(length) {}

  std::size_t list_cell_calls = 0;
  std::size_t kind_calls = 0;

  TermKind kind(Term t) {
    ++kind_calls;
    return t.what == Term::What::Cell ? TermKind::List : TermKind::Immediate;
  }
  std::uint64_t word(Term t) {
    return t.what == Term::What::Nil ? kNil : erts::small_word(static_cast<std::int64_t>(t.index));
  }
  std::size_t leaf_size(Term) { return 9; }
  bool int64(Term, std::int64_t&) { return false; }
  BigShape bignum(Term) { return {}; }
  double float64(Term) { return 0; }
  bool bit_size(Term, std::uint64_t&) { return false; }
  bool bytes(Term, std::size_t, const std::uint8_t*&) { return false; }
  const Term* fun(Term, FunShape&) { return nullptr; }
  const Term* tuple(Term, std::uint32_t& arity) { arity = 0; return nullptr; }
  bool list_cell(Term t, Term& head, Term& tail) {
    if (t.what != Term::What::Cell) return false;
    ++list_cell_calls;
    head = Term{Term::What::Head, t.index};
    tail = t.index + 1 < length_ ? Term{Term::What::Cell, t.index + 1} : Term{Term::What::Nil, 0};
    return true;
  }
  bool is_nil(Term t) { return t.what == Term::What::Nil; }
  std::uint32_t map_size(Term) { return 0; }
  template <class F> void map_each(Term, std::uint32_t, F&&) {}
  bool struct_entry(Term, Term&, Term&) { return false; }
  bool is_struct_key(Term) { return false; }
  template <class F> bool external(Term, F&&) { return false; }

 private:
  std::uint64_t length_;
};

}  // namespace

TEST_CASE("codec: a 10-million-element list costs only max_items cells", "[codec][cost]") {
  const std::uint64_t length = 10'000'000;
  LongListSource src(length);
  TermCaps caps;  // max_items 50
  PayloadBuffer out;
  TermWriter w(out, caps);
  TermEncoder<LongListSource> enc(src, w);
  enc.encode(LongListSource::Term{LongListSource::Term::What::Cell, 0});
  // max_items cells for the elements, plus one to see that more follow.
  CHECK(src.list_cell_calls == caps.max_items + 1);
  CHECK(src.kind_calls == 1 + caps.max_items);
  TestTerm back = decode(out);
  REQUIRE(std::holds_alternative<Lst>(back.v));
  const Lst& l = std::get<Lst>(back.v);
  CHECK(l.end == ListEnd::Cut);
  REQUIRE(l.items.size() == caps.max_items);
  for (std::uint64_t i = 0; i < caps.max_items; ++i) CHECK(l.items[i] == imm(erts::small_word(static_cast<std::int64_t>(i))));

  SECTION("the byte budget bounds the walk as well") {
    LongListSource src2(length);
    TermCaps c2 = unlimited_caps();
    c2.max_bytes = 100;
    PayloadBuffer o2;
    TermWriter w2(o2, c2);
    TermEncoder<LongListSource> e2(src2, w2);
    e2.encode(LongListSource::Term{LongListSource::Term::What::Cell, 0});
    CHECK(src2.list_cell_calls <= 12);
    CHECK(o2.size() < 100 + 9);
  }
  SECTION("a short one is walked to its end") {
    LongListSource src3(7);
    PayloadBuffer o3;
    TermWriter w3(o3, caps);
    TermEncoder<LongListSource> e3(src3, w3);
    e3.encode(LongListSource::Term{LongListSource::Term::What::Cell, 0});
    CHECK(src3.list_cell_calls == 7);
    TestTerm b3 = decode(o3);
    REQUIRE(std::holds_alternative<Lst>(b3.v));
    CHECK(std::get<Lst>(b3.v).end == ListEnd::Proper);
    CHECK(std::get<Lst>(b3.v).items.size() == 7);
  }
}

TEST_CASE("codec: a huge tuple costs only max_items elements", "[codec][cost]") {
  TermCaps caps;
  caps.max_items = 5;
  TestSource src;
  PayloadBuffer buf = encode(tup(ints(0, 20000)), caps, &src);
  CHECK(src.kind_calls == 1 + 5);
  CHECK(decode(buf) == tup_cut(ints(0, 5), 20000));
}

// =====================================================================================
// Decoder robustness

namespace {

bool decodes_as_malformed(const Bytes& data, bool* at_end = nullptr) {
  TestTerm t = decode(data.data(), data.size(), at_end);
  return std::holds_alternative<Malformed>(t.v);
}

Bytes to_bytes(const PayloadBuffer& b) { return Bytes(b.data(), b.data() + b.size()); }

template <class T>
void put(Bytes& b, T v) {
  std::uint8_t raw[sizeof v];
  std::memcpy(raw, &v, sizeof v);
  b.insert(b.end(), raw, raw + sizeof v);
}

}  // namespace

TEST_CASE("decoder: hand-made malformed inputs", "[codec][decoder]") {
  CHECK(decodes_as_malformed({}));
  CHECK(decodes_as_malformed({0}));    // no such tag
  CHECK(decodes_as_malformed({13}));
  CHECK(decodes_as_malformed({255}));
  CHECK(decodes_as_malformed({static_cast<std::uint8_t>(Tag::Immediate), 1, 2, 3}));  // short word

  Bytes tuple_kept_over_total{static_cast<std::uint8_t>(Tag::Tuple)};
  put<std::uint32_t>(tuple_kept_over_total, 1);
  put<std::uint32_t>(tuple_kept_over_total, 2);
  for (int i = 0; i < 2; ++i) { tuple_kept_over_total.push_back(static_cast<std::uint8_t>(Tag::Cut)); tuple_kept_over_total.push_back(1); }
  CHECK(decodes_as_malformed(tuple_kept_over_total));

  Bytes map_kept_over_total{static_cast<std::uint8_t>(Tag::Map)};
  put<std::uint32_t>(map_kept_over_total, 0);
  put<std::uint32_t>(map_kept_over_total, 1);
  for (int i = 0; i < 2; ++i) { map_kept_over_total.push_back(static_cast<std::uint8_t>(Tag::Cut)); map_kept_over_total.push_back(1); }
  CHECK(decodes_as_malformed(map_kept_over_total));

  Bytes bad_list_end{static_cast<std::uint8_t>(Tag::List)};
  put<std::uint32_t>(bad_list_end, 0);
  bad_list_end.push_back(3);
  CHECK(decodes_as_malformed(bad_list_end));

  // A count that the data cannot hold is refused before anything is reserved.
  Bytes huge_list{static_cast<std::uint8_t>(Tag::List)};
  put<std::uint32_t>(huge_list, 0xFFFFFFFFu);
  huge_list.push_back(0);
  CHECK(decodes_as_malformed(huge_list));
  Bytes huge_map{static_cast<std::uint8_t>(Tag::Map)};
  put<std::uint32_t>(huge_map, 0xFFFFFFFFu);
  put<std::uint32_t>(huge_map, 0xFFFFFFFFu);
  CHECK(decodes_as_malformed(huge_map));

  Bytes short_binary{static_cast<std::uint8_t>(Tag::Binary)};
  put<std::uint64_t>(short_binary, 10);
  put<std::uint32_t>(short_binary, 10);
  short_binary.push_back(1);
  CHECK(decodes_as_malformed(short_binary));

  Bytes binary_kept_over_total{static_cast<std::uint8_t>(Tag::Binary)};
  put<std::uint64_t>(binary_kept_over_total, 1);
  put<std::uint32_t>(binary_kept_over_total, 2);
  binary_kept_over_total.push_back(1);
  binary_kept_over_total.push_back(2);
  CHECK(decodes_as_malformed(binary_kept_over_total));

  Bytes short_external{static_cast<std::uint8_t>(Tag::External)};
  put<std::uint32_t>(short_external, 0x7FFFFFFFu);
  CHECK(decodes_as_malformed(short_external));

  CHECK(decodes_as_malformed({static_cast<std::uint8_t>(Tag::Cut)}));
  CHECK(decodes_as_malformed({static_cast<std::uint8_t>(Tag::Cut), 0}));   // no such reason
  CHECK(decodes_as_malformed({static_cast<std::uint8_t>(Tag::Cut), 77}));
  CHECK_FALSE(decodes_as_malformed({static_cast<std::uint8_t>(Tag::Cut), 3}));

  SECTION("a malformed element makes the whole term malformed") {
    Bytes t{static_cast<std::uint8_t>(Tag::Tuple)};
    put<std::uint32_t>(t, 2);
    put<std::uint32_t>(t, 2);
    t.push_back(static_cast<std::uint8_t>(Tag::Cut));
    t.push_back(1);
    t.push_back(200);  // bad tag
    t.push_back(0);
    bool at_end = false;
    CHECK(decodes_as_malformed(t, &at_end));
    CHECK(at_end);  // nothing after a malformed piece is trusted
  }
  SECTION("a malformed improper tail makes the list malformed") {
    Bytes l{static_cast<std::uint8_t>(Tag::List)};
    put<std::uint32_t>(l, 0);
    l.push_back(static_cast<std::uint8_t>(ListEnd::Improper));
    CHECK(decodes_as_malformed(l));
  }
}

TEST_CASE("decoder: every truncation of a valid encoding is malformed", "[codec][decoder][fuzz]") {
  TermGen gen(99);
  std::size_t prefixes = 0;
  for (int i = 0; i < 150; ++i) {
    TermCaps caps;
    caps.max_items = static_cast<std::uint32_t>(gen.pick(1, 20));
    caps.max_bytes = static_cast<std::uint32_t>(gen.pick(16, 2000));
    TestTerm t = gen.any(5);
    Bytes full = to_bytes(encode(t, caps));
    bool at_end = false;
    REQUIRE_FALSE(decodes_as_malformed(full, &at_end));
    REQUIRE(at_end);
    for (std::size_t n = 0; n < full.size(); ++n) {
      Bytes prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
      TestTerm back = decode(prefix.data(), prefix.size());
      if (!std::holds_alternative<Malformed>(back.v))
        FAIL("term " << t << " cut at " << n << " of " << full.size() << " decoded to " << back);
      ++prefixes;
    }
  }
  CHECK(prefixes > 1000);
}

TEST_CASE("decoder: random bytes never crash and never yield an inconsistent term", "[codec][decoder][fuzz]") {
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> byte(0, 255), small(0, 12), len(0, 200);
  std::size_t accepted = 0, rejected = 0;
  for (int i = 0; i < 30000; ++i) {
    Bytes data(static_cast<std::size_t>(len(rng)));
    // Bias toward plausible input: valid tags and small numbers, so the decoder gets deep.
    for (auto& b : data) b = static_cast<std::uint8_t>(small(rng) < 6 ? small(rng) : byte(rng));
    TestTerm t = decode(data.data(), data.size());
    if (std::holds_alternative<Malformed>(t.v)) {
      ++rejected;
    } else {
      ++accepted;
      if (!well_formed_decoded(t)) FAIL("input #" << i << " decoded to " << t);
    }
  }
  CHECK(rejected > 0);
  CHECK(accepted > 0);
}

TEST_CASE("decoder: mutated valid encodings never crash", "[codec][decoder][fuzz]") {
  TermGen gen(31337);
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) {
    Bytes full = to_bytes(encode(gen.any(5), TermCaps{}));
    for (int m = 0; m < 30; ++m) {
      Bytes mutated = full;
      int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips && !mutated.empty(); ++f) {
        std::size_t at = rng() % mutated.size();
        mutated[at] = static_cast<std::uint8_t>(rng());
      }
      if (rng() % 4 == 0 && !mutated.empty()) mutated.resize(rng() % mutated.size());
      TestTerm t = decode(mutated.data(), mutated.size());
      if (!std::holds_alternative<Malformed>(t.v)) REQUIRE(well_formed_decoded(t));
    }
  }
}

// =====================================================================================
// Bitstrings, bignums and funs: bounded whatever their size.

namespace {

Bytes bytes_of_tag(Tag t) { return Bytes{static_cast<std::uint8_t>(t)}; }

// 10 MB of bytes, shared by the tests below (made once).
const Bytes& ten_mb() {
  static const Bytes b = bytes_of(10u << 20, 3);
  return b;
}

Bytes prefix(const Bytes& b, std::size_t n) { return Bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n)); }

}  // namespace

TEST_CASE("codec: a bitstring is copied whole up to max_binary bytes, else its first bytes", "[codec][bits]") {
  TermCaps caps;  // max_binary 512
  TestTerm small = bits(bytes_of(3), 21);
  CHECK(round_trip(small, caps) == normalized(small));

  TestSource src;
  TestTerm huge = bits(ten_mb(), 8 * std::uint64_t{ten_mb().size()} - 3);
  CHECK(decode(encode(huge, caps, &src)) == bits_cut(prefix(ten_mb(), caps.max_binary), 8 * ten_mb().size() - 3));
  CHECK(src.bytes_read == caps.max_binary);
  CHECK(src.external_bytes == 0);

  SECTION("the last whole byte and the tail: 513 bytes with a tail is cut, 512 is not") {
    TestTerm at = bits(bytes_of(512), 8 * 511 + 1);
    TestTerm over = bits(bytes_of(513), 8 * 512 + 1);
    CHECK(round_trip(at, caps) == normalized(at));
    CHECK(round_trip(over, caps) == bits_cut(bytes_of(512), 8 * 512 + 1));
  }
  SECTION("the byte budget bounds what is kept") {
    TermCaps small_budget = unlimited_caps();
    small_budget.max_binary = 1u << 30;
    small_budget.max_bytes = 100;
    TestSource s2;
    CHECK(decode(encode(huge, small_budget, &s2)) == bits_cut(prefix(ten_mb(), 100), 8 * ten_mb().size() - 3));
    CHECK(s2.bytes_read == 100);
    CHECK(s2.external_bytes == 0);
  }
}

TEST_CASE("codec: a binary reads only the bytes it keeps", "[codec][bits]") {
  TermCaps caps;
  TestSource src;
  CHECK(decode(encode(bin(ten_mb()), caps, &src)) == bin_cut(prefix(ten_mb(), caps.max_binary), ten_mb().size()));
  CHECK(src.bytes_read == caps.max_binary);
}

TEST_CASE("codec: bignum shapes: sign, bit length and leading hex digits", "[codec][bignum]") {
  std::uint64_t two_pow_100_plus_5[8] = {5, std::uint64_t{1} << 36};
  BigShape s = bignum_shape(two_pow_100_plus_5, 2, false);
  CHECK(s.known);
  CHECK_FALSE(s.negative);
  CHECK(s.bits == 101);
  CHECK(s.lead_bits == 57);  // 101 - 57 = 44 bits follow: 11 hex digits
  CHECK(s.lead == std::uint64_t{1} << 56);

  std::uint64_t top_zero[8] = {1, 0};
  CHECK_FALSE(bignum_shape(top_zero, 2, false).known);
  CHECK_FALSE(bignum_shape(top_zero, 0, false).known);

  // For any magnitude: lead is its leading bits, and a whole number of hex digits follows.
  std::mt19937_64 rng(99);
  for (int i = 0; i < 2000; ++i) {
    std::size_t n = 1 + rng() % 5;
    std::vector<std::uint64_t> d(n);
    for (auto& w : d) w = rng() >> (rng() % 64);
    if (d.back() == 0) d.back() = 1;
    if (n == 1 && d[0] < (std::uint64_t{1} << 59)) d[0] |= std::uint64_t{1} << 59;
    BigShape b = bignum_shape(d.data(), n, i % 2 == 0);
    INFO("iteration " << i);
    REQUIRE(b.known);
    CHECK(b.negative == (i % 2 == 0));
    CHECK(b.lead_bits >= 57);
    CHECK(b.lead_bits <= 60);
    CHECK((b.bits - b.lead_bits) % 4 == 0);
    CHECK((b.lead >> (b.lead_bits - 1)) == 1);
    // Compare with a bit-by-bit reading of the magnitude.
    std::uint64_t want = 0;
    for (std::uint64_t k = 0; k < b.lead_bits; ++k) {
      std::uint64_t bit = b.bits - 1 - k;
      want = (want << 1) | ((d[bit / 64] >> (bit % 64)) & 1);
    }
    CHECK(b.lead == want);
  }
}

TEST_CASE("codec: a bignum is copied up to max_binary bytes, else described", "[codec][bignum]") {
  TermCaps caps;  // max_binary 512
  TestTerm small = big(bytes_of(512), true);
  CHECK(round_trip(small, caps) == normalized(small));

  const Big& s = std::get<Big>(small.v);
  (void)s;
  TestTerm large = big(bytes_of(513), true);
  const Big& l = std::get<Big>(large.v);
  TestSource src;
  TestTerm back = decode(encode(large, caps, &src));
  REQUIRE(std::holds_alternative<BigCutT>(back.v));
  CHECK(std::get<BigCutT>(back.v).shape == bignum_shape(l.digits.data(), l.digits.size(), true));
  CHECK(std::get<BigCutT>(back.v).shape.negative);
  CHECK(std::get<BigCutT>(back.v).shape.bits > 8 * 512);
  CHECK(src.external_bytes == 0);

  SECTION("a bignum the source cannot read is cut") {
    Big unknown{bytes_of(20), {}, false};
    CHECK(round_trip(TestTerm{unknown}, caps) == cut(CutReason::Bytes));
  }
}

TEST_CASE("codec: funs: external and small environments whole, large environments by identity", "[codec][fun]") {
  TermCaps caps;  // max_binary 512

  TestTerm ext_fun = external_fun();
  CHECK(round_trip(ext_fun, caps) == normalized(ext_fun));
  TestTerm no_env = local_fun({});
  CHECK(round_trip(no_env, caps) == normalized(no_env));
  TestTerm small_env = local_fun({i64(1), atom(3), bin(bytes_of(100)), tup({i64(2), list(ints(0, 10))})});
  CHECK(round_trip(small_env, caps) == normalized(small_env));

  SECTION("a 10 MB binary in the environment: identity only, nothing serialised or read") {
    TestTerm f = local_fun({i64(1), bin(ten_mb())});
    TestSource src;
    CHECK(decode(encode(f, caps, &src)) == fun_cut(local_fun_shape(2)));
    CHECK(src.external_bytes == 0);
    CHECK(src.bytes_read == 0);
  }
  SECTION("a long list in the environment: sizing stops after max_binary / 16 cells") {
    TestTerm f = local_fun({list(ints(0, 200000))});
    TestSource src;
    CHECK(decode(encode(f, caps, &src)) == fun_cut(local_fun_shape(1)));
    CHECK(src.list_cell_calls <= caps.max_binary / 16 + 1);
    CHECK(src.external_bytes == 0);
  }
  SECTION("a deep environment: sizing stops at max_depth") {
    TestTerm deep = i64(1);
    for (int i = 0; i < 200; ++i) deep = tup({deep});
    TestSource src;
    CHECK(decode(encode(local_fun({deep}), caps, &src)) == fun_cut(local_fun_shape(1)));
    CHECK(src.kind_calls <= 2 + caps.max_depth);
  }
  SECTION("a large map in the environment is refused from its size") {
    std::vector<TestTerm> kvs;
    for (int i = 0; i < 2000; ++i) {
      kvs.push_back(i64(i));
      kvs.push_back(i64(i));
    }
    TestSource src;
    CHECK(decode(encode(local_fun({map(kvs)}), caps, &src)) == fun_cut(local_fun_shape(1)));
    CHECK(src.map_pairs_visited == 0);
  }
  SECTION("a fun inside the environment is sized with its own environment") {
    TestTerm inner = local_fun({bin(ten_mb())});
    CHECK(decode(encode(local_fun({inner}), caps)) == fun_cut(local_fun_shape(1)));
    TestTerm small_inner = local_fun({i64(5)});
    TestTerm outer = local_fun({small_inner});
    CHECK(round_trip(outer, caps) == normalized(outer));
  }
  SECTION("max_binary 0: every environment is too large") {
    TermCaps zero = caps;
    zero.max_binary = 0;
    CHECK(round_trip(local_fun({i64(1)}), zero) == fun_cut(local_fun_shape(1)));
    CHECK(round_trip(ext_fun, zero) == normalized(ext_fun));
  }
  SECTION("a fun whose identity or shape the source cannot read is cut") {
    TestTerm f = local_fun({bin(ten_mb())});
    std::get<Fun>(f.v).shape.identity = false;
    CHECK(round_trip(f, caps) == cut(CutReason::Bytes));
    std::get<Fun>(f.v).shape.known = false;
    CHECK(round_trip(f, caps) == cut(CutReason::Bytes));
  }
  SECTION("at max_depth a fun is cut like a container") {
    TermCaps shallow = caps;
    shallow.max_depth = 1;
    CHECK(round_trip(list({list({ext_fun})}), shallow) == list({cut(CutReason::Depth)}));
  }
}

TEST_CASE("codec: 50 huge terms in one event cost the event's budget, not their size", "[codec][cost]") {
  TermCaps caps;  // max_items 50, max_binary 512, max_bytes 16384
  std::vector<TestTerm> args;
  for (int i = 0; i < 50; ++i) {
    switch (i % 4) {
      case 0: args.push_back(bits(ten_mb(), 8 * ten_mb().size() - 1)); break;
      case 1: args.push_back(bin(ten_mb())); break;
      case 2: args.push_back(local_fun({bin(ten_mb())})); break;
      default: args.push_back(big(bytes_of(600))); break;
    }
  }
  TestTerm t = list(std::move(args));
  TestSource src;
  PayloadBuffer buf = encode(t, caps, &src);
  CHECK(buf.size() <= caps.max_bytes + 64);
  CHECK(src.bytes_read <= caps.max_bytes);
  CHECK(src.external_bytes == 0);
  bool at_end = false;
  TestTerm back = decode(buf, &at_end);
  CHECK(at_end);
  CHECK(well_formed_decoded(back));
}

TEST_CASE("decoder: malformed bitstring, bignum and fun cuts", "[codec][decoder]") {
  auto bits_piece = [](std::uint64_t total, std::uint32_t kept) {
    Bytes b = bytes_of_tag(Tag::Bits);
    put(b, total);
    put(b, kept);
    for (std::uint32_t i = 0; i < kept; ++i) b.push_back(1);
    return b;
  };
  CHECK_FALSE(decodes_as_malformed(bits_piece(20, 2)));
  CHECK(decodes_as_malformed(bits_piece(16, 2)));  // whole bytes: that is a binary
  CHECK(decodes_as_malformed(bits_piece(20, 3)));  // more bytes than whole ones
  Bytes short_bits = bits_piece(2000, 100);
  short_bits.resize(short_bits.size() - 1);
  CHECK(decodes_as_malformed(short_bits));

  auto big_piece = [](std::uint8_t negative, std::uint64_t nbits, std::uint64_t lead, std::uint8_t lead_bits) {
    Bytes b = bytes_of_tag(Tag::BigCut);
    put(b, negative);
    put(b, nbits);
    put(b, lead);
    put(b, lead_bits);
    return b;
  };
  CHECK_FALSE(decodes_as_malformed(big_piece(1, 4000, std::uint64_t{1} << 59, 60)));
  CHECK(decodes_as_malformed(big_piece(2, 4000, std::uint64_t{1} << 59, 60)));  // sign
  CHECK(decodes_as_malformed(big_piece(0, 4000, std::uint64_t{1} << 60, 61)));  // too many lead bits
  CHECK(decodes_as_malformed(big_piece(0, 4000, 1, 60)));                       // lead's top bit clear
  CHECK(decodes_as_malformed(big_piece(0, 4000, 0, 0)));
  CHECK(decodes_as_malformed(big_piece(0, 50, std::uint64_t{1} << 59, 60)));    // more lead than bits

  auto fun_piece = [](std::uint64_t module, std::uint32_t arity, std::uint32_t num_free) {
    Bytes b = bytes_of_tag(Tag::FunCut);
    put(b, module);
    put(b, arity);
    put<std::uint32_t>(b, 1);
    put<std::uint32_t>(b, 2);
    put(b, num_free);
    return b;
  };
  CHECK_FALSE(decodes_as_malformed(fun_piece(atom_word(5), 2, 1)));
  CHECK(decodes_as_malformed(fun_piece(0x2, 2, 1)));  // not an atom: never a raw boxed word
  CHECK(decodes_as_malformed(fun_piece(atom_word(5), 256, 1)));
  CHECK(decodes_as_malformed(fun_piece(atom_word(5), 2, 0)));
  Bytes short_fun = fun_piece(atom_word(5), 2, 1);
  short_fun.pop_back();
  CHECK(decodes_as_malformed(short_fun));
}

TEST_CASE("codec: a payload that spills gets the event's budget in one allocation", "[codec][cost]") {
  TermCaps caps;  // max_bytes 16384
  std::vector<TestTerm> args;
  for (int i = 0; i < 40; ++i) args.push_back(bin(bytes_of(600)));
  PayloadBuffer buf = encode(list(std::move(args)), caps);
  REQUIRE(buf.on_heap());
  CHECK(buf.capacity() == caps.max_bytes + TermWriter::kSlack);  // not doubled up to 32 KiB
  CHECK(buf.size() <= buf.capacity());
  std::size_t size = buf.size();
  buf.shrink_to_fit();
  CHECK(buf.capacity() == size);

  SECTION("a huge max_bytes reserves at most kUpfront at first") {
    TermCaps big = caps;
    big.max_bytes = 1u << 30;
    PayloadBuffer b2 = encode(bin(bytes_of(600)), big);
    CHECK(b2.capacity() == TermWriter::kUpfront);
  }
}
