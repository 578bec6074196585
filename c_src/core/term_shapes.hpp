// What the tracer reports of a term too large to copy: a bignum's or a fun's shape.
// The term codec writes and reads them; erts_layout.hpp's readers find them in memory.
#pragma once

#include <cstdint>

namespace kino_trace {

// A bignum as the tracer reports one too large to copy: sign, bit length and leading bits.
struct BigShape {
  bool known = false;      // false: the source could not read it
  bool negative = false;
  std::uint64_t bits = 0;  // bit length of the magnitude
  std::uint64_t lead = 0;  // the magnitude's leading `lead_bits` bits
  std::uint8_t lead_bits = 0;

  std::uint64_t bytes() const { return (bits + 7) / 8; }
};

inline unsigned bit_length(std::uint64_t x) {
  unsigned n = 0;
  while (x) {
    ++n;
    x >>= 1;
  }
  return n;
}

// The shape of the magnitude held in `n` 64-bit digits, least significant first (the
// top digit non-zero). `lead_bits` is 57..60 bits, chosen so that the bits after it are
// a multiple of 4: `lead` written in hex is then exactly the number's first hex digits.
inline BigShape bignum_shape(const std::uint64_t* digits, std::uint64_t n, bool negative) {
  BigShape s;
  if (n == 0 || digits[n - 1] == 0) return s;
  s.known = true;
  s.negative = negative;
  s.bits = (n - 1) * 64 + bit_length(digits[n - 1]);
  if (s.bits <= 60) {
    s.lead = digits[0];
    s.lead_bits = static_cast<std::uint8_t>(s.bits);
    return s;
  }
  s.lead_bits = static_cast<std::uint8_t>(57 + (s.bits - 57) % 4);
  std::uint64_t shift = s.bits - s.lead_bits;
  std::uint64_t word = shift / 64;
  unsigned off = static_cast<unsigned>(shift % 64);
  std::uint64_t v = digits[word] >> off;
  if (off != 0 && word + 1 < n) v |= digits[word + 1] << (64 - off);
  s.lead = v & ((std::uint64_t{1} << s.lead_bits) - 1);
  return s;
}

// What the tracer keeps of a fun whose environment is too large to copy.
struct FunShape {
  bool known = false;         // false: the source could not read it (the fun is cut whole)
  bool external = false;      // fun M:F/A: no environment, always small
  bool identity = false;      // module, index and uniq are known
  std::uint64_t module = 0;   // the module's atom word
  std::uint32_t arity = 0;
  std::uint32_t index = 0;    // which fun of its module (Elixir shows "#Function<index.uniq/...")
  std::uint32_t uniq = 0;
  std::uint32_t num_free = 0; // captured variables
};

}  // namespace kino_trace
