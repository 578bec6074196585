// erts_layout.hpp: the immediate tags and their load-time check, the readers on words
// laid out by hand as ERTS 27 and 29 lay out boxed terms, and the choice of a layout.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "erts_layout.hpp"

using namespace kino_trace;

namespace {

constexpr std::uint64_t header(std::uint64_t arity, std::uint64_t subtag) { return (arity << 6) | subtag; }

// A boxed term word pointing at `words` (8-byte aligned, as ERTS's heaps are).
std::uint64_t box(const std::uint64_t* words, std::uint64_t extra_tag = 0) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(words)) | erts::kPrimaryBoxed | extra_tag;
}

// MAKE_FUN_HEADER of each release's erl_term.h.
std::uint64_t fun_header_27(std::uint64_t arity, std::uint64_t num_free, bool external) {
  return erts::kFunSubtag | (arity << erts::kFunArityShift) | ((num_free + !external) << erts::kFunEnvShift);
}
std::uint64_t fun_header_29(std::uint64_t arity, std::uint64_t num_free, bool external) {
  return erts::kFunSubtag | (arity << erts::kFunArityShift) | (num_free << erts::kFunEnvShift) |
         (std::uint64_t{external} << 24);
}

// ErlFunEntry as each release's erl_fun.h declares it, after N code addresses
// (ErtsDispatchable): the compiler lays them out, not the table under test.
template <std::size_t N>
struct Entry27 {
  const void* addresses[N];
  std::uint64_t module;
  std::uint64_t arity;
  std::int32_t index;
  unsigned char uniq[16];
  std::int32_t old_uniq;
  std::int32_t old_index;
  std::int64_t refc;
  const void* pend_purge_address;
};
template <std::size_t N>
struct Entry29 {
  const void* addresses[N];
  const void* pend_purge_address;
  std::uint64_t module;
  unsigned char uniq[16];
  std::int32_t arity;
  std::int32_t index;
  std::int32_t old_uniq;
  std::int32_t old_index;
};

template <class E>
E make_entry(std::uint64_t module, std::int32_t arity, std::int32_t index, std::int32_t old_uniq) {
  E e{};
  e.module = module;
  e.arity = static_cast<decltype(e.arity)>(arity);
  e.index = index;
  e.old_uniq = old_uniq;
  e.old_index = 99;
  std::memset(e.uniq, 0xAB, sizeof e.uniq);
  return e;
}

const erts::TermLayout& layout(const char* name) {
  const erts::TermLayout* l = erts::find_layout(name);
  REQUIRE(l != nullptr);
  return *l;
}

constexpr std::uint64_t kModule = erts::atom_word(1234);

}  // namespace

TEST_CASE("erts layout: boxed words", "[erts]") {
  alignas(8) std::uint64_t words[2] = {header(1, erts::kBignumSubtag), 7};
  std::uint64_t t = box(words);
  CHECK(erts::is_boxed(t));
  CHECK(erts::boxed(t) == words);
  CHECK(erts::boxed(box(words, 0x4)) == words);  // a literal tag bit is ignored
  CHECK_FALSE(erts::is_boxed(erts::kNil));        // []
  CHECK_FALSE(erts::is_boxed(t - 1));             // a list cell
}

TEST_CASE("erts layout: bignums", "[erts]") {
  alignas(8) std::uint64_t pos[8] = {header(2, 0x08), 5, std::uint64_t{1} << 36};
  BigShape p = erts::read_bignum(pos);
  CHECK(p.known);
  CHECK_FALSE(p.negative);
  CHECK(p.bits == 101);
  CHECK(p.lead == std::uint64_t{1} << 56);

  alignas(8) std::uint64_t neg[8] = {header(1, 0x0C), ~std::uint64_t{0}};
  BigShape n = erts::read_bignum(neg);
  CHECK(n.known);
  CHECK(n.negative);
  CHECK(n.bits == 64);

  alignas(8) std::uint64_t tuple[8] = {header(2, 0x00), 1, 2};
  alignas(8) std::uint64_t fun[8] = {fun_header_27(1, 0, true), 0};
  CHECK_FALSE(erts::read_bignum(tuple).known);
  CHECK_FALSE(erts::read_bignum(fun).known);
}

TEST_CASE("erts layout: bitstring sizes", "[erts]") {
  std::uint64_t bits = 0;
  alignas(8) std::uint64_t heap[8] = {header(2, erts::kHeapBitsSubtag), 21, 0, 0};
  REQUIRE(erts::read_bit_size(heap, bits));
  CHECK(bits == 21);
  alignas(8) std::uint64_t sub[8] = {header(4, erts::kSubBitsSubtag), 0, 24, 8024 + 3, 0};
  REQUIRE(erts::read_bit_size(sub, bits));
  CHECK(bits == 8003);
  alignas(8) std::uint64_t backwards[8] = {header(4, erts::kSubBitsSubtag), 0, 100, 99, 0};
  CHECK_FALSE(erts::read_bit_size(backwards, bits));
  alignas(8) std::uint64_t big[8] = {header(1, 0x08), 1};
  CHECK_FALSE(erts::read_bit_size(big, bits));
}

template <class E, std::size_t N>
void check_release_funs(const erts::TermLayout& l, std::uint64_t (*header)(std::uint64_t, std::uint64_t, bool)) {
  INFO(l.name << ", " << N << " code addresses");
  erts::FunEntryLayout entry = l.fun_entry(N);
  CHECK(entry.module == offsetof(E, module));
  CHECK(entry.arity == offsetof(E, arity));
  CHECK(entry.arity_bytes == sizeof(E::arity));
  CHECK(entry.index == offsetof(E, index));
  CHECK(entry.old_uniq == offsetof(E, old_uniq));

  E e = make_entry<E>(kModule, 2, 7, 123456);
  alignas(8) std::uint64_t local[8] = {header(2, 2, false), reinterpret_cast<std::uintptr_t>(&e), 42, 43, 99};
  FunShape f = erts::read_fun(local, l.fun_header, &entry);
  CHECK(f.known);
  CHECK_FALSE(f.external);
  CHECK(f.identity);
  CHECK(f.arity == 2);
  CHECK(f.num_free == 2);
  CHECK(f.module == kModule);
  CHECK(f.index == 7);
  CHECK(f.uniq == 123456);
  CHECK(erts::read_fun_entry_arity(local, entry) == 2);

  FunShape no_entry = erts::read_fun(local, l.fun_header, nullptr);
  CHECK(no_entry.known);
  CHECK_FALSE(no_entry.identity);
  CHECK(no_entry.num_free == 2);

  // The wrong offset reads something that is not an atom: no identity.
  erts::FunEntryLayout wrong = entry;
  wrong.module += 4;
  CHECK_FALSE(erts::read_fun(local, l.fun_header, &wrong).identity);

  alignas(8) std::uint64_t closed[8] = {header(0, 0, false), reinterpret_cast<std::uintptr_t>(&e)};
  FunShape c = erts::read_fun(closed, l.fun_header, &entry);
  CHECK((c.known && !c.external && c.num_free == 0 && c.identity));

  alignas(8) std::uint64_t external[8] = {header(3, 0, true), 0};
  FunShape x = erts::read_fun(external, l.fun_header, &entry);
  CHECK(x.known);
  CHECK(x.external);
  CHECK(x.arity == 3);
  CHECK(x.num_free == 0);
  CHECK_FALSE(x.identity);
}

TEST_CASE("erts layout: funs, as each release lays them out", "[erts]") {
  check_release_funs<Entry27<3>, 3>(layout("OTP 27"), fun_header_27);
  check_release_funs<Entry27<4>, 4>(layout("OTP 27"), fun_header_27);
  check_release_funs<Entry29<3>, 3>(layout("OTP 29"), fun_header_29);
  check_release_funs<Entry29<4>, 4>(layout("OTP 29"), fun_header_29);

  alignas(8) std::uint64_t not_fun[8] = {header(2, 0x00), 1, 2};
  CHECK_FALSE(erts::read_fun(not_fun, erts::FunHeader::EnvWithRef, nullptr).known);
  CHECK_FALSE(erts::read_fun(not_fun, erts::FunHeader::KindBit, nullptr).known);
}

TEST_CASE("erts layout: one release's fun header is not read as the other's", "[erts]") {
  // What the load-time check relies on to tell the layouts apart.
  alignas(8) std::uint64_t ext29[2] = {fun_header_29(1, 0, true), 0};
  FunShape a = erts::read_fun(ext29, erts::FunHeader::EnvWithRef, nullptr);
  CHECK_FALSE((a.known && a.external));  // OTP 27's reader: a local fun with 255 free variables
  alignas(8) std::uint64_t ext27[2] = {fun_header_27(1, 0, true), 0};
  FunShape b = erts::read_fun(ext27, erts::FunHeader::KindBit, nullptr);
  CHECK_FALSE((b.known && b.external));  // OTP 29's reader: a local fun with no free variables
  alignas(8) std::uint64_t local27[2] = {fun_header_27(2, 2, false), 0};
  CHECK(erts::read_fun(local27, erts::FunHeader::KindBit, nullptr).num_free == 3);  // the FunRef counted
  // Bits no release sets make no fun.
  alignas(8) std::uint64_t odd[2] = {fun_header_29(1, 3, true), 0};
  CHECK_FALSE(erts::read_fun(odd, erts::FunHeader::KindBit, nullptr).known);
  alignas(8) std::uint64_t huge[2] = {erts::kFunSubtag | (std::uint64_t{0x200} << erts::kFunEnvShift), 0};
  CHECK_FALSE(erts::read_fun(huge, erts::FunHeader::EnvWithRef, nullptr).known);
}

TEST_CASE("erts layout: the layouts are named once, and tried in order", "[erts]") {
  CHECK(erts::find_layout("OTP 27")->otp_release == 27);
  CHECK(erts::find_layout("OTP 29")->otp_release == 29);
  CHECK(erts::find_layout("OTP 28") == nullptr);
  CHECK(erts::find_layout("") == nullptr);

  auto order = [](unsigned otp) {
    const erts::TermLayout* o[erts::kTermLayoutCount];
    erts::layout_order(otp, o);
    std::string names;
    for (const auto* l : o) names += std::string(names.empty() ? "" : ",") + l->name;
    return names;
  };
  CHECK(order(27) == "OTP 27,OTP 29");
  CHECK(order(29) == "OTP 29,OTP 27");
  CHECK(order(28) == "OTP 29,OTP 27");  // as close to both: the newer first
  CHECK(order(26) == "OTP 27,OTP 29");
  CHECK(order(31) == "OTP 29,OTP 27");
}

TEST_CASE("erts layout: choose_layout takes the first layout that passes the check", "[erts]") {
  // A check that passes only for `name` with `addresses` code addresses.
  auto only = [](const char* name, std::size_t addresses) {
    return [=](const erts::TermLayout& l, const erts::FunEntryLayout& e) -> std::string {
      if (std::string(l.name) == name && e.module == l.fun_entry(addresses).module) return {};
      return std::string("wrong at ") + std::to_string(e.module);
    };
  };
  std::string why;
  erts::ChosenLayout c = erts::choose_layout(29, nullptr, only("OTP 29", 4), why);
  REQUIRE(c.layout == erts::find_layout("OTP 29"));
  CHECK(c.by_release);
  CHECK(c.fun_entry.module == 40);
  CHECK(why.empty());

  c = erts::choose_layout(28, nullptr, only("OTP 27", 3), why);
  REQUIRE(c.layout == erts::find_layout("OTP 27"));
  CHECK_FALSE(c.by_release);  // found by the check
  CHECK(c.fun_entry.module == 24);

  c = erts::choose_layout(29, nullptr, only("OTP 27", 4), why);  // the release's own fails: another is taken
  REQUIRE(c.layout == erts::find_layout("OTP 27"));
  CHECK_FALSE(c.by_release);

  c = erts::choose_layout(29, erts::find_layout("OTP 29"), only("OTP 27", 4), why);  // only the one given
  CHECK(c.layout == nullptr);
  CHECK(why == "OTP 29: wrong at 32; wrong at 40");

  c = erts::choose_layout(30, nullptr, only("none", 3), why);
  CHECK(c.layout == nullptr);
  CHECK(why == "OTP 29: wrong at 32; wrong at 40; OTP 27: wrong at 24; wrong at 32");
}

TEST_CASE("erts layout: immediate tags", "[erts]") {
  CHECK(erts::is_immediate(erts::kNil));
  CHECK(erts::is_nil(erts::kNil));
  CHECK_FALSE(erts::is_atom(erts::kNil));
  CHECK_FALSE(erts::is_small(erts::kNil));
  for (std::uint64_t index : {0u, 1u, 1234u}) {
    std::uint64_t a = erts::atom_word(index);
    CHECK((erts::is_immediate(a) && erts::is_atom(a) && !erts::is_small(a) && !erts::is_nil(a)));
  }
  for (std::int64_t v : {std::int64_t{0}, std::int64_t{-1}, erts::kSmallMax, erts::kSmallMin}) {
    std::uint64_t w = erts::small_word(v);
    CHECK((erts::is_immediate(w) && erts::is_small(w) && !erts::is_atom(w)));
    CHECK(static_cast<std::int64_t>(w) >> erts::kSmallShift == v);  // arithmetic shift back
  }
  alignas(8) std::uint64_t cell[2] = {erts::kNil, erts::kNil};
  std::uint64_t list = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(cell)) | erts::kPrimaryList;
  CHECK((erts::is_list_cell(list) && !erts::is_immediate(list) && !erts::is_boxed(list)));
}

TEST_CASE("erts layout: the load-time check of immediates", "[erts]") {
  using erts::Expect;
  std::uint64_t pid = (std::uint64_t{77} << 4) | 0x3;  // a local pid: immediate-1 tag 0b0011
  alignas(8) std::uint64_t words[2] = {0, 0};
  std::uint64_t boxed = box(words);
  std::vector<erts::ImmediateProbe> probes = {
      {"[]", erts::kNil, Expect::Nil},
      {"an atom", erts::atom_word(5), Expect::Atom},
      {"a small integer", erts::small_word(-42), Expect::Small, -42},
      {"a small integer", erts::small_word(erts::kSmallMax), Expect::Small, erts::kSmallMax},
      {"a pid", pid, Expect::OtherImmediate},
      {"a list cell", boxed - erts::kPrimaryBoxed + erts::kPrimaryList, Expect::ListCell},
      {"a tuple", boxed, Expect::Boxed},
  };
  CHECK(erts::check_immediates(probes.data(), probes.size()) == nullptr);

  // Any word not as the header lays it out is found, and named.
  auto first_bad = [&](std::size_t i, std::uint64_t word) {
    auto changed = probes;
    changed[i].word = word;
    const erts::ImmediateProbe* bad = erts::check_immediates(changed.data(), changed.size());
    return bad ? bad - changed.data() : -1;
  };
  CHECK(first_bad(0, erts::kNil + 0x40) == 0);          // [] elsewhere
  CHECK(first_bad(0, erts::atom_word(0)) == 0);         // [] tagged as an atom
  CHECK(first_bad(1, erts::kNil) == 1);                 // an atom tagged as []
  CHECK(first_bad(1, erts::small_word(5)) == 1);
  CHECK(first_bad(2, erts::small_word(42)) == 2);       // the wrong value
  CHECK(first_bad(2, static_cast<std::uint64_t>(-42) << 3 | 0x7) == 2);  // another shift
  CHECK(first_bad(4, boxed) == 4);                      // a pid that is not immediate
  CHECK(first_bad(4, erts::atom_word(77)) == 4);
  CHECK(first_bad(5, boxed) == 5);
  CHECK(first_bad(6, erts::kNil) == 6);                 // a boxed term that is immediate
  CHECK(std::string(erts::expected_name(Expect::Nil)) == "[]");
}
