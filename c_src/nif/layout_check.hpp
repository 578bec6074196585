// The load-time self-check of what the NIF assumes of ERTS's term layout
// (c_src/core/erts_layout.hpp): fatal for immediates, optional for the boxed readers.
#pragma once

#include <erl_nif.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "atoms.hpp"
#include "erts_layout.hpp"
#include "term_codec.hpp"
#include "terms.hpp"

namespace kino_trace::nif {

static_assert(sizeof(ERL_NIF_TERM) == 8 && sizeof(void*) == 8, "kino_trace needs a 64-bit VM");

// Terms of known shapes, made from the external term format.
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

inline bool check_bignum(ErlNifEnv* env, bool negative, unsigned digits_bytes, unsigned top, std::uint64_t bits) {
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

inline bool check_bits(ERL_NIF_TERM t, std::uint64_t bits) {
  std::uint64_t read = 0;
  return kt::erts::is_boxed(t) && kt::erts::read_bit_size(kt::erts::boxed(t), read) && read == bits;
}

// The offset of the module in a fun entry, or 0 if none of the known ones is right.
inline std::size_t find_fun_entry_module(const std::uint64_t* p, ERL_NIF_TERM module) {
  for (std::size_t offset : {std::size_t{32}, std::size_t{24}}) {
    kt::erts::FunEntryLayout l{offset};
    kt::FunShape f = kt::erts::read_fun(p, l);
    std::uint64_t arity = 0;
    std::memcpy(&arity, reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(p[1])) + l.arity(), sizeof arity);
    if (f.identity && f.module == module && f.index == 7 && f.uniq == 123456 && arity == 2) return offset;
  }
  return 0;
}

// Checks erts_layout.hpp's boxed-header readers on terms of known shapes: bignums,
// bitstrings (on the heap, off it, a sub-binary), an external fun and a local fun of a
// made-up module. Only when every answer is right are the readers used; the fun entry's
// field offset is found the same way (3 or 4 code addresses precede it, JIT or not).
// Optional: when they are not, bitstrings, bignums and funs are cut whole.
inline Layout check_readers(ErlNifEnv* env) {
  Layout result;
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

// Checks what erts_layout.hpp says of immediates on words made through erl_nif, then copies
// them as the tracer does (encoded, decoded into another environment) and compares.
// Returns why the layout is unsupported, or "" when it is as expected. Fatal: the NIF
// refuses to load on any difference.
inline std::string check_immediates(ErlNifEnv* env) {
  using kt::erts::Expect;
  using Probe = kt::erts::ImmediateProbe;
  std::vector<Probe> probes = {
      {"[]", enif_make_list(env, 0), Expect::Nil},
      {"the atom ok", atoms.ok, Expect::Atom},
      {"the atom true", atoms.true_, Expect::Atom},
      {"the atom kino_trace_layout_probe", make_atom(env, "kino_trace_layout_probe"), Expect::Atom},
      {"[ok]", enif_make_list1(env, atoms.ok), Expect::ListCell},
      {"{ok}", enif_make_tuple1(env, atoms.ok), Expect::Boxed},
      {"1.5", enif_make_double(env, 1.5), Expect::Boxed},
      {"the integer 2^59", enif_make_int64(env, kt::erts::kSmallMax + 1), Expect::Boxed},
  };
  for (std::int64_t v : {std::int64_t{0}, std::int64_t{1}, std::int64_t{-1}, std::int64_t{-42},
                         kt::erts::kSmallMax, kt::erts::kSmallMin}) {
    probes.push_back({"a small integer", enif_make_int64(env, v), Expect::Small, v});
  }
  ErlNifPid self;
  if (enif_self(env, &self)) probes.push_back({"a local pid", enif_make_pid(env, &self), Expect::OtherImmediate});

  if (const Probe* bad = kt::erts::check_immediates(probes.data(), probes.size())) {
    std::string what = bad->expect == Expect::Small ? fmt::format("the small integer {}", bad->value) : bad->what;
    return fmt::format("{} is {:#x}, which erts_layout.hpp does not read as {}", what, bad->word,
                       kt::erts::expected_name(bad->expect));
  }

  // The immediates, as the tracer keeps them: raw words, rebuilt in another environment.
  std::vector<ERL_NIF_TERM> immediates;
  for (const Probe& p : probes)
    if (kt::erts::is_immediate(p.word)) immediates.push_back(p.word);
  ERL_NIF_TERM tuple = enif_make_tuple_from_array(env, immediates.data(), static_cast<unsigned>(immediates.size()));
  kt::PayloadBuffer buf;
  kt::TermCaps caps;
  kt::TermWriter writer(buf, caps);
  EnifSource source{env};
  kt::TermEncoder<EnifSource> encoder(source, writer);
  encoder.encode(tuple, 0);
  ErlNifEnv* other = enif_alloc_env();
  if (!other) return {};  // no memory to check with: nothing says the layout differs
  EnifBuilder builder{other};
  kt::TermDecoder<EnifBuilder> decoder(builder, buf.data(), buf.size());
  ERL_NIF_TERM copy = decoder.decode();
  int arity = 0;
  const ERL_NIF_TERM* elems = nullptr;
  std::string error;
  if (!enif_get_tuple(other, copy, &arity, &elems) || arity != static_cast<int>(immediates.size()) ||
      !enif_is_identical(copy, enif_make_copy(other, tuple))) {
    error = "immediates copied into another environment are not the same terms";
  } else {
    for (std::size_t i = 0; i < immediates.size(); ++i)
      if (elems[i] != immediates[i]) error = fmt::format("the immediate {:#x} came back as {:#x}", immediates[i], elems[i]);
  }
  enif_free_env(other);
  return error;
}

}  // namespace kino_trace::nif
