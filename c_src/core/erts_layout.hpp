// Everything kino_trace assumes about ERTS's term layout (64-bit, OTP 27 to 29), in one
// place.
//
// erl_nif treats a term as opaque; the tracer does not, in two ways:
//
// 1. Immediates (fatal if different). An immediate term (atom, small integer, local pid
//    or port, []) is one word that means the same in every environment and is never
//    freed: the encoder stores it as its raw word and the decoder returns that word as a
//    term of another environment, and the events keep their pid, module and function as
//    raw words. The NIF also reads the primary tag (`is_immediate`, `is_list_cell`)
//    before asking erl_nif, and the small-integer, atom and [] tags to estimate a leaf's
//    size. The same in OTP 27, 28 and 29. The NIF checks all of this at load
//    (check_immediates below, on words it makes through erl_nif, then an encode/decode
//    round trip into another environment) and refuses to load when anything differs.
// 2. Boxed headers (one TermLayout per ERTS release, kTermLayouts below). erl_nif has no
//    call that tells a bitstring's size in bits, a bignum's magnitude or a fun's
//    environment without serialising the whole term (enif_term_to_binary), which is what
//    made huge terms cost milliseconds inside the traced process. The readers below look
//    only at a few header words; the data itself is still read through erl_nif. At load
//    the NIF picks the layout named for the running OTP release (any other layout, the
//    closest release first, when the release has none), checks its readers on terms it
//    builds with known shapes, and refuses to load when no layout reads them all right:
//    kino_trace_tracer:load_error/0 then says why and the pure-Erlang tracer takes over.
//    Terms are never cut whole because a layout was not understood.
//
// Immediate tags, from erl_term.h (OTP 27 to 29, 64-bit):
//   primary tag, bits 0..1: 0b01 list cell, 0b10 boxed, 0b11 immediate;
//   immediate-1 tag, bits 0..3: 0b0011 pid, 0b0111 port, 0b1111 small integer (value
//   from bit 4), 0b1011 immediate-2;
//   immediate-2 tag, bits 0..5: 0b001011 atom (atom index from bit 6), 0b111011 [].
// Boxed terms, from erl_term.h / erl_bits.h / big.h (the same in OTP 27 and 29):
//   a boxed term's word is its address | 0b10; the pointed-to header word holds a
//   subtag in bits 2..5 and an arity (words that follow) from bit 6 on;
//   bignum     subtag 0b001s (s: sign), arity = number of 64-bit digits, digits follow
//              least significant first;
//   heap bits  subtag 0b1000: word 1 is the size in bits;
//   sub bits   subtag 0b1001: words 2 and 3 are the start and end offsets in bits;
//   fun        subtag 0b0101, arity in header bits 8..15; word 1 points to the fun entry
//              (local fun) or export entry (external fun), the environment follows from
//              word 2. What differs between releases (erl_term.h, erl_fun.h):
//     OTP 27   header bits 16..24: environment size, 0 for an external fun, else the free
//              variables plus one (a FunRef after them). Fun entry (ErlFunEntry): code
//              addresses (3, or 4 with the JIT), then Eterm module, Uint arity, int index,
//              byte uniq[16], int old_uniq, int old_index.
//     OTP 29   header bits 16..23: free variables; bit 24: 1 for an external fun (no
//              FunRef). Fun entry: code addresses (3 or 4), ErtsCodePtr
//              pend_purge_address, then Eterm module, byte uniq[16], int arity, int index,
//              int old_uniq, int old_index.
//     OTP 28   no layout of its own here (no OTP 28 source was at hand): the load-time
//              check takes whichever of the two reads its terms right.
// Free of erl_nif: the Catch2 tests run these readers on words they lay out by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "term_shapes.hpp"

namespace kino_trace {
namespace erts {

// --- immediates ----------------------------------------------------------------------

constexpr std::uint64_t kPrimaryMask = 0x3;
constexpr std::uint64_t kPrimaryList = 0x1;
constexpr std::uint64_t kPrimaryBoxed = 0x2;
constexpr std::uint64_t kPrimaryImmediate = 0x3;
constexpr std::uint64_t kImmed1Mask = 0xF;
constexpr std::uint64_t kSmallTag = 0xF;
constexpr unsigned kSmallShift = 4;
constexpr std::uint64_t kImmed2Mask = 0x3F;
constexpr std::uint64_t kAtomTag = 0x0B;
constexpr unsigned kAtomIndexShift = 6;
constexpr std::uint64_t kNil = 0x3B;  // []
// Small integers hold 60 bits, sign included.
constexpr std::int64_t kSmallMax = (std::int64_t{1} << 59) - 1;
constexpr std::int64_t kSmallMin = -(std::int64_t{1} << 59);

// An immediate: one self-contained word, the same in every environment.
constexpr bool is_immediate(std::uint64_t word) { return (word & kPrimaryMask) == kPrimaryImmediate; }
constexpr bool is_list_cell(std::uint64_t word) { return (word & kPrimaryMask) == kPrimaryList; }
constexpr bool is_boxed(std::uint64_t word) { return (word & kPrimaryMask) == kPrimaryBoxed; }
constexpr bool is_small(std::uint64_t word) { return (word & kImmed1Mask) == kSmallTag; }
constexpr bool is_atom(std::uint64_t word) { return (word & kImmed2Mask) == kAtomTag; }
constexpr bool is_nil(std::uint64_t word) { return word == kNil; }

// The words of a small integer and of the atom at `index` of the atom table (tests).
constexpr std::uint64_t small_word(std::int64_t v) { return (static_cast<std::uint64_t>(v) << kSmallShift) | kSmallTag; }
constexpr std::uint64_t atom_word(std::uint64_t index) { return (index << kAtomIndexShift) | kAtomTag; }

// What a word made through erl_nif at load must be.
enum class Expect { Nil, Small, Atom, OtherImmediate, ListCell, Boxed };

// One probe: a word erl_nif made (`what` names it in the error) and what it must be;
// for Small, `value` is the integer it was made from.
struct ImmediateProbe {
  const char* what;
  std::uint64_t word;
  Expect expect;
  std::int64_t value = 0;
};

inline bool probe_ok(const ImmediateProbe& p) {
  switch (p.expect) {
    case Expect::Nil: return is_nil(p.word) && is_immediate(p.word) && !is_atom(p.word) && !is_small(p.word);
    case Expect::Small: return is_small(p.word) && is_immediate(p.word) && p.word == small_word(p.value);
    case Expect::Atom: return is_atom(p.word) && is_immediate(p.word) && !is_nil(p.word) && !is_small(p.word);
    case Expect::OtherImmediate:
      return is_immediate(p.word) && !is_small(p.word) && !is_atom(p.word) && !is_nil(p.word);
    case Expect::ListCell: return is_list_cell(p.word);
    case Expect::Boxed: return is_boxed(p.word);
  }
  return false;
}

// The first probe whose word is not what this header says, or nullptr when all are.
inline const ImmediateProbe* check_immediates(const ImmediateProbe* probes, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!probe_ok(probes[i])) return &probes[i];
  return nullptr;
}

// What a probe's word should have been, for the load error.
inline const char* expected_name(Expect e) {
  switch (e) {
    case Expect::Nil: return "[]";
    case Expect::Small: return "that small integer";
    case Expect::Atom: return "an atom";
    case Expect::OtherImmediate: return "an immediate";
    case Expect::ListCell: return "a list cell";
    case Expect::Boxed: return "a boxed term";
  }
  return "?";
}

// --- boxed headers ---------------------------------------------------------------------

constexpr std::uint64_t kSubtagMask = 0x3C;   // header bits 2..5
constexpr std::uint64_t kHeaderArityShift = 6;
constexpr std::uint64_t kBignumSubtag = 0x08;  // 0x08 positive, 0x0C negative
constexpr std::uint64_t kBignumSignBit = 0x04;
constexpr std::uint64_t kHeapBitsSubtag = 0x20;
constexpr std::uint64_t kSubBitsSubtag = 0x24;
constexpr std::uint64_t kFunSubtag = 0x14;
constexpr unsigned kFunArityShift = 8;
constexpr unsigned kFunEnvShift = 16;

// How a fun's header word tells an external fun and the number of free variables.
enum class FunHeader {
  EnvWithRef,  // OTP 27: bits 16..24 the environment size, 0 for an external fun, else
               // the free variables plus the FunRef that follows them
  KindBit,     // OTP 29: bits 16..23 the free variables, bit 24 set for an external fun
};

// Where a fun entry keeps a local fun's identity, in bytes from the entry's start.
struct FunEntryLayout {
  std::size_t module = 0;  // the module atom (Eterm)
  std::size_t arity = 0;   // arity_bytes wide (Uint or int)
  unsigned arity_bytes = 8;
  std::size_t index = 0;     // int
  std::size_t old_uniq = 0;  // int: the `uniq` of erlang:fun_info/2
};

// One ERTS release's layout of the boxed terms the readers look at (see the top).
struct TermLayout {
  const char* name;       // "OTP 27": the release whose headers it was read from
  unsigned otp_release;   // 27
  FunHeader fun_header;
  // The fun entry: its code addresses (3, or 4 with the JIT: each build is one of the
  // two), `before_module` bytes, then the module and the fields after it, by offset
  // from the module.
  std::size_t before_module;
  std::size_t arity_at;
  unsigned arity_bytes;
  std::size_t index_at;
  std::size_t old_uniq_at;

  // The fun entry's layout in a build whose entries start with `addresses` code pointers.
  constexpr FunEntryLayout fun_entry(std::size_t addresses) const {
    std::size_t m = 8 * addresses + before_module;
    return FunEntryLayout{m, m + arity_at, arity_bytes, m + index_at, m + old_uniq_at};
  }
};

// The layouts of the supported releases: the one place each is named.
inline constexpr TermLayout kTermLayouts[] = {
    {"OTP 27", 27, FunHeader::EnvWithRef, 0, 8, 8, 16, 36},
    {"OTP 29", 29, FunHeader::KindBit, 8, 24, 4, 28, 32},
};
inline constexpr std::size_t kTermLayoutCount = sizeof(kTermLayouts) / sizeof(kTermLayouts[0]);
inline constexpr std::size_t kFunEntryAddresses[] = {3, 4};

// The layout named `name`, or nullptr.
inline const TermLayout* find_layout(const char* name) {
  for (const TermLayout& l : kTermLayouts)
    if (std::strcmp(l.name, name) == 0) return &l;
  return nullptr;
}

// The order in which the layouts are tried on OTP release `otp`: the one named for it
// first, then the others, the closest release first (the newer one of two as close).
// Fills `order` (kTermLayoutCount entries).
inline void layout_order(unsigned otp, const TermLayout* order[kTermLayoutCount]) {
  for (std::size_t i = 0; i < kTermLayoutCount; ++i) order[i] = &kTermLayouts[i];
  auto distance = [otp](const TermLayout* l) { return l->otp_release > otp ? l->otp_release - otp : otp - l->otp_release; };
  for (std::size_t i = 1; i < kTermLayoutCount; ++i)  // insertion sort: stable, tiny
    for (std::size_t j = i; j > 0; --j) {
      const TermLayout* a = order[j - 1];
      const TermLayout* b = order[j];
      bool before = distance(b) < distance(a) || (distance(b) == distance(a) && b->otp_release > a->otp_release);
      if (!before) break;
      order[j - 1] = b;
      order[j] = a;
    }
}

// The layout in use: the release's layout and its build's fun entry.
struct ChosenLayout {
  const TermLayout* layout = nullptr;  // nullptr: none read the probe terms right
  FunEntryLayout fun_entry;
  bool by_release = false;  // the layout named for the running release (else found by the check)
};

// Picks the layout for OTP release `otp`: the first, in layout_order (or only `only`,
// when given), for which `check(layout, entry)` returns an empty string, `entry` being
// each of kFunEntryAddresses' fun entries in turn. Otherwise returns no layout, and
// `why` tells what each one read wrong.
template <class Check>
ChosenLayout choose_layout(unsigned otp, const TermLayout* only, Check&& check, std::string& why) {
  const TermLayout* order[kTermLayoutCount];
  layout_order(otp, order);
  why.clear();
  for (const TermLayout* l : order) {
    if (only && l != only) continue;
    std::string wrong;
    for (std::size_t addresses : kFunEntryAddresses) {
      FunEntryLayout entry = l->fun_entry(addresses);
      std::string w = check(*l, entry);
      if (w.empty()) return ChosenLayout{l, entry, l->otp_release == otp};
      if (wrong.find(w) == std::string::npos) wrong += (wrong.empty() ? "" : "; ") + w;
    }
    why += (why.empty() ? "" : "; ") + std::string(l->name) + ": " + wrong;
  }
  return ChosenLayout{};
}

// The words of a boxed term (its header first). Bit 2 may tag literals in some builds:
// boxed objects are 8-byte aligned, so clearing the low 3 bits is right either way.
inline const std::uint64_t* boxed(std::uint64_t term) {
  return reinterpret_cast<const std::uint64_t*>(static_cast<std::uintptr_t>(term & ~std::uint64_t{7}));
}

// A bignum's shape from its header and digits; known == false when `p` is no bignum.
inline BigShape read_bignum(const std::uint64_t* p) {
  std::uint64_t h = p[0];
  if ((h & (kSubtagMask & ~kBignumSignBit)) != kBignumSubtag) return BigShape{};
  return bignum_shape(p + 1, h >> kHeaderArityShift, (h & kBignumSignBit) != 0);
}

// A bitstring's size in bits; false when `p` is no bitstring.
inline bool read_bit_size(const std::uint64_t* p, std::uint64_t& bits) {
  std::uint64_t subtag = p[0] & kSubtagMask;
  if (subtag == kHeapBitsSubtag) {
    bits = p[1];
    return true;
  }
  if (subtag == kSubBitsSubtag) {
    if (p[3] < p[2]) return false;
    bits = p[3] - p[2];
    return true;
  }
  return false;
}

// A fun's shape (with its identity when `entry` is given); its environment (num_free
// terms) starts at p + 2 for a local fun. known == false when `p` is no fun, or its
// header is not one `header` lays out.
inline FunShape read_fun(const std::uint64_t* p, FunHeader header, const FunEntryLayout* entry) {
  FunShape f;
  std::uint64_t h = p[0];
  if ((h & (kSubtagMask | kPrimaryMask)) != kFunSubtag) return f;
  f.arity = static_cast<std::uint32_t>((h >> kFunArityShift) & 0xFF);
  std::uint64_t env = h >> kFunEnvShift;
  if (header == FunHeader::EnvWithRef) {
    if (env > 0x1FF) return f;
    f.external = env == 0;
    f.num_free = f.external ? 0 : static_cast<std::uint32_t>(env - 1);
  } else {
    if (env > 0x100) return f;  // bit 24 is set only for an external fun, which has no free variables
    f.external = env == 0x100;
    f.num_free = static_cast<std::uint32_t>(env & 0xFF);
  }
  f.known = true;
  if (f.external || entry == nullptr || p[1] == 0) return f;
  const auto* e = reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(p[1]));
  std::uint64_t module;
  std::int32_t index, uniq;
  std::memcpy(&module, e + entry->module, sizeof module);
  std::memcpy(&index, e + entry->index, sizeof index);
  std::memcpy(&uniq, e + entry->old_uniq, sizeof uniq);
  if (!is_atom(module)) return f;
  f.identity = true;
  f.module = module;
  f.index = static_cast<std::uint32_t>(index);
  f.uniq = static_cast<std::uint32_t>(uniq);
  return f;
}

// A fun entry's arity field (the probe check compares it).
inline std::uint64_t read_fun_entry_arity(const std::uint64_t* p, const FunEntryLayout& entry) {
  const auto* e = reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(p[1]));
  if (entry.arity_bytes == 4) {
    std::uint32_t a;
    std::memcpy(&a, e + entry.arity, sizeof a);
    return a;
  }
  std::uint64_t a;
  std::memcpy(&a, e + entry.arity, sizeof a);
  return a;
}

}  // namespace erts
}  // namespace kino_trace
