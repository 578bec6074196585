// erts_layout.hpp: the immediate tags and their load-time check, and the readers on words
// laid out by hand as ERTS 27 lays out boxed terms.
#include <catch2/catch.hpp>

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

std::uint64_t fun_header(std::uint64_t arity, std::uint64_t env_size) {
  return erts::kFunSubtag | (arity << erts::kFunArityShift) | (env_size << erts::kFunEnvShift);
}

// A fun entry as ERTS 27 lays it out after `addresses` code pointers.
struct alignas(8) Entry {
  unsigned char bytes[128] = {};
  Entry(std::size_t addresses, std::uint64_t module, std::uint64_t arity, std::int32_t index, std::int32_t old_uniq) {
    std::size_t m = 8 * addresses;
    std::memcpy(bytes + m, &module, 8);
    std::memcpy(bytes + m + 8, &arity, 8);
    std::memcpy(bytes + m + 16, &index, 4);
    std::memcpy(bytes + m + 36, &old_uniq, 4);
  }
};

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
  alignas(8) std::uint64_t fun[8] = {fun_header(1, 0), 0};
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

TEST_CASE("erts layout: funs", "[erts]") {
  for (std::size_t addresses : {3u, 4u}) {
    INFO(addresses << " code addresses");
    Entry entry(addresses, kModule, 2, 7, 123456);
    alignas(8) std::uint64_t local[8] = {fun_header(2, 3), reinterpret_cast<std::uintptr_t>(&entry), 42, 43, 99};
    erts::FunEntryLayout layout{8 * addresses};

    FunShape f = erts::read_fun(local, layout);
    CHECK(f.known);
    CHECK_FALSE(f.external);
    CHECK(f.identity);
    CHECK(f.arity == 2);
    CHECK(f.num_free == 2);  // the environment's last word is the fun reference
    CHECK(f.module == kModule);
    CHECK(f.index == 7);
    CHECK(f.uniq == 123456);

    FunShape unknown_entry = erts::read_fun(local, erts::FunEntryLayout{});
    CHECK(unknown_entry.known);
    CHECK_FALSE(unknown_entry.identity);
    CHECK(unknown_entry.num_free == 2);

    // The wrong offset reads something that is not an atom: no identity.
    erts::FunEntryLayout wrong{8 * addresses + 4};
    CHECK_FALSE(erts::read_fun(local, wrong).identity);
  }

  alignas(8) std::uint64_t external[8] = {fun_header(3, 0), 0};
  FunShape e = erts::read_fun(external, erts::FunEntryLayout{32});
  CHECK(e.known);
  CHECK(e.external);
  CHECK(e.arity == 3);
  CHECK(e.num_free == 0);
  CHECK_FALSE(e.identity);

  alignas(8) std::uint64_t not_fun[8] = {header(2, 0x00), 1, 2};
  CHECK_FALSE(erts::read_fun(not_fun, erts::FunEntryLayout{32}).known);
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
