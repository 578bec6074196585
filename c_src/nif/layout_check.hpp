// The load-time self-check of what the NIF assumes of ERTS's term layout
// (c_src/core/erts_layout.hpp): the immediates, then the boxed-header readers of the
// layout chosen for the running release. Either failing stops the load.
#pragma once

#include <erl_nif.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
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

// Checks the bignum and bitstring readers (the same in every layout) on terms of known
// shapes: bignums, bitstrings on the heap, off it, a sub-binary. Returns what was read
// wrong, or "".
inline std::string check_bignums_and_bits(ErlNifEnv* env) {
  // 2^100 + 5 and -(2^64 + 5)
  if (!check_bignum(env, false, 13, 0x10, 101)) return "the bignum 2^100 + 5 does not read as 101 bits";
  if (!check_bignum(env, true, 9, 0x01, 65)) return "the bignum -(2^64 + 5) does not read as 65 bits";
  ERL_NIF_TERM heap_bits, small_bin, refc_bin, sub_bin;
  ExtBuilder bits;
  bits.u8(77).u32(3).u8(5).u8(1).u8(2).u8(0xF8);  // BIT_BINARY_EXT: 2 bytes and 5 bits
  std::memset(enif_make_new_binary(env, 10, &small_bin), 1, 10);
  std::memset(enif_make_new_binary(env, 200, &refc_bin), 2, 200);
  sub_bin = enif_make_sub_binary(env, refc_bin, 3, 100);
  if (!bits.term(env, heap_bits) || !check_bits(heap_bits, 21)) return "the bitstring <<1, 2, 31::5>> does not read as 21 bits";
  if (!check_bits(small_bin, 80)) return "a 10-byte binary does not read as 80 bits";
  if (!check_bits(refc_bin, 1600)) return "a 200-byte binary does not read as 1600 bits";
  if (!check_bits(sub_bin, 800)) return "a 100-byte sub-binary does not read as 800 bits";
  return {};
}

// Funs of known shapes: erlang:abs/1, and a local fun of a made-up module with two free
// variables (42 and the atom probe), index 7, old uniq 123456, arity 2.
struct FunProbes {
  ERL_NIF_TERM external = 0, local = 0, module = 0, free_atom = 0, free_int = 0;
  bool made = false;

  explicit FunProbes(ErlNifEnv* env) {
    ExtBuilder ext;
    ext.u8(113).atom("erlang").atom("abs").u8(97).u8(1);  // EXPORT_EXT erlang:abs/1
    ExtBuilder l;
    l.u8(112).u32(0).u8(2);  // NEW_FUN_EXT, size (not checked), arity 2
    for (unsigned i = 1; i <= 16; ++i) l.u8(i);  // uniq
    l.u32(7).u32(2).atom("kino_trace_layout_probe");  // index, free variables, module
    l.u8(97).u8(5).u8(98).u32(123456);  // old index, old uniq
    l.u8(88).atom("nonode@nohost").u32(0).u32(0).u32(0);  // creator pid
    l.u8(97).u8(42).atom("probe");  // the free variables: 42, :probe
    free_int = enif_make_int(env, 42);
    made = ext.term(env, external) && l.term(env, local) &&
           enif_make_existing_atom(env, "kino_trace_layout_probe", &module, ERL_NIF_LATIN1) &&
           enif_make_existing_atom(env, "probe", &free_atom, ERL_NIF_LATIN1) && kt::erts::is_boxed(external) &&
           kt::erts::is_boxed(local);
  }
};

// Checks the fun reader of `layout` with the fun entry `entry` on the probe funs.
// Returns what was read wrong, or "".
inline std::string check_funs(const FunProbes& probes, const kt::erts::TermLayout& layout,
                              const kt::erts::FunEntryLayout& entry) {
  if (!probes.made) return "the probe funs could not be made";
  kt::FunShape e = kt::erts::read_fun(kt::erts::boxed(probes.external), layout.fun_header, nullptr);
  if (!e.known || !e.external || e.arity != 1)
    return fmt::format("the external fun erlang:abs/1 reads as {} (header {:#x})",
                       !e.known ? "no fun" : e.external ? fmt::format("an external fun of arity {}", e.arity)
                                                        : fmt::format("a local fun with {} free variables", e.num_free),
                       kt::erts::boxed(probes.external)[0]);
  const std::uint64_t* p = kt::erts::boxed(probes.local);
  kt::FunShape l = kt::erts::read_fun(p, layout.fun_header, &entry);
  if (!l.known || l.external || l.arity != 2 || l.num_free != 2 || p[2] != probes.free_int || p[3] != probes.free_atom)
    return fmt::format("the local fun of arity 2 with 2 free variables reads as {} (header {:#x})",
                       !l.known ? "no fun" : l.external ? "an external fun"
                                                         : fmt::format("arity {} with {} free variables", l.arity, l.num_free),
                       p[0]);
  if (!l.identity || l.module != probes.module || l.index != 7 || l.uniq != 123456 ||
      kt::erts::read_fun_entry_arity(p, entry) != 2)
    return fmt::format("its fun entry (module at byte {}) does not read as kino_trace_layout_probe, index 7, uniq 123456",
                       entry.module);
  return {};
}

// The OTP release the NIF runs on (27 for "27"), or 0; and its ERTS version ("17.1.1").
inline unsigned running_otp_release() {
  ErlNifSysInfo info{};
  enif_system_info(&info, sizeof info);
  return info.otp_release ? static_cast<unsigned>(std::strtoul(info.otp_release, nullptr, 10)) : 0;
}
inline std::string erts_version() {
  ErlNifSysInfo info{};
  enif_system_info(&info, sizeof info);
  return info.erts_version ? info.erts_version : "?";
}

// Chooses the term layout of the running release (erts_layout.hpp's kTermLayouts), or
// only the layout named `forced` when it is not empty (kino_trace_tracer's load info),
// and checks its readers on terms of known shapes. Returns no layout when none reads
// them all right, and `why` then says what each one read wrong.
inline kt::erts::ChosenLayout check_readers(ErlNifEnv* env, const std::string& forced, std::string& why) {
  why = check_bignums_and_bits(env);
  if (!why.empty()) return {};
  const kt::erts::TermLayout* only = nullptr;
  if (!forced.empty() && !(only = kt::erts::find_layout(forced.c_str()))) {
    why = fmt::format("no term layout is named \"{}\"", forced);
    return {};
  }
  FunProbes probes(env);
  return kt::erts::choose_layout(
      running_otp_release(), only,
      [&](const kt::erts::TermLayout& l, const kt::erts::FunEntryLayout& e) { return check_funs(probes, l, e); }, why);
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
