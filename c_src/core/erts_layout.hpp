// Size fields of boxed Erlang terms, read from their memory (64-bit ERTS 27 layout).
//
// erl_nif has no call that tells a bitstring's size in bits, a bignum's magnitude or a
// fun's environment without serialising the whole term (enif_term_to_binary), which is
// what made huge terms cost milliseconds inside the traced process. These readers look
// only at a few header words; the data itself is still read through erl_nif.
//
// The layout is ERTS's, not a public API: the NIF checks it at load time on terms it
// builds with known shapes (`kino_trace_nif.cpp`, check_layout) and, when anything
// differs, never calls these readers (bitstrings, bignums and funs are then cut whole).
//
// What is read, from erl_term.h / erl_bits.h / erl_fun.h (OTP 27):
//   a boxed term's word is its address | 0b10; the pointed-to header word holds a
//   subtag in bits 2..5 and an arity (words that follow) from bit 6 on;
//   bignum     subtag 0b001s (s: sign), arity = number of 64-bit digits, digits follow
//              least significant first;
//   heap bits  subtag 0b1000: word 1 is the size in bits;
//   sub bits   subtag 0b1001: words 2 and 3 are the start and end offsets in bits;
//   fun        subtag 0b0101: arity in header bits 8..15, environment size from bit 16
//              (0 for an external fun; for a local fun, its free variables plus one);
//              word 1 points to the fun entry (module, arity, index, uniq, old_uniq),
//              the environment follows from word 2.
// Free of erl_nif: the Catch2 tests run these readers on words they lay out by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "term_codec.hpp"

namespace kino_trace {
namespace erts {

constexpr std::uint64_t kPrimaryMask = 0x3;
constexpr std::uint64_t kPrimaryBoxed = 0x2;
constexpr std::uint64_t kSubtagMask = 0x3C;   // header bits 2..5
constexpr std::uint64_t kHeaderArityShift = 6;
constexpr std::uint64_t kBignumSubtag = 0x08;  // 0x08 positive, 0x0C negative
constexpr std::uint64_t kBignumSignBit = 0x04;
constexpr std::uint64_t kHeapBitsSubtag = 0x20;
constexpr std::uint64_t kSubBitsSubtag = 0x24;
constexpr std::uint64_t kFunSubtag = 0x14;
constexpr unsigned kFunArityShift = 8;
constexpr unsigned kFunEnvShift = 16;

inline bool is_boxed(std::uint64_t term) { return (term & kPrimaryMask) == kPrimaryBoxed; }

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

// Where a fun entry's fields are, from the entry's start: `module` is the offset of the
// module atom (after the code addresses, 3 or 4 of them); the rest follow it.
struct FunEntryLayout {
  std::size_t module = 0;  // 0: unknown, identity is not read
  std::size_t arity() const { return module + 8; }
  std::size_t index() const { return module + 16; }
  std::size_t old_uniq() const { return module + 36; }
};

// A fun's shape; its environment (num_free terms) starts at p + 2 for a local fun.
inline FunShape read_fun(const std::uint64_t* p, const FunEntryLayout& entry) {
  FunShape f;
  std::uint64_t h = p[0];
  if ((h & (kSubtagMask | kPrimaryMask)) != kFunSubtag) return f;
  f.known = true;
  f.arity = static_cast<std::uint32_t>((h >> kFunArityShift) & 0xFF);
  std::uint64_t env_size = h >> kFunEnvShift;
  f.external = env_size == 0;
  if (f.external) return f;
  f.num_free = static_cast<std::uint32_t>(env_size - 1);
  if (entry.module == 0 || p[1] == 0) return f;
  const auto* e = reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(p[1]));
  std::uint64_t module;
  std::int32_t index, uniq;
  std::memcpy(&module, e + entry.module, sizeof module);
  std::memcpy(&index, e + entry.index(), sizeof index);
  std::memcpy(&uniq, e + entry.old_uniq(), sizeof uniq);
  if (!is_atom_word(module)) return f;
  f.identity = true;
  f.module = module;
  f.index = static_cast<std::uint32_t>(index);
  f.uniq = static_cast<std::uint32_t>(uniq);
  return f;
}

}  // namespace erts
}  // namespace kino_trace
