// The codec's erl_nif adapters: EnifSource reads a term for TermEncoder, EnifBuilder
// builds one from TermDecoder's pieces. What they assume of ERTS's term layout is named
// in c_src/core/erts_layout.hpp.
#pragma once

#include <erl_nif.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "atoms.hpp"
#include "erts_layout.hpp"
#include "structs.hpp"
#include "term_codec.hpp"

namespace kino_trace::nif {

namespace kt = kino_trace;

// ---------------------------------------------------------------------------------------
// reading Erlang terms for the encoder

// The term layout check_readers (layout_check.hpp) chose at load: the NIF loads only
// when one was found, so the boxed-header readers below always have one.
inline kt::erts::ChosenLayout chosen_layout;

struct EnifSource {
  using Term = ERL_NIF_TERM;
  ErlNifEnv* env;

  kt::TermKind kind(Term t) const {
    if (kt::erts::is_immediate(t)) return kt::TermKind::Immediate;  // atom, small integer, local pid/port, []
    if (kt::erts::is_list_cell(t)) return kt::TermKind::List;
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
  // From the immediate tags (see erts_layout.hpp).
  std::size_t leaf_size(Term t) const {
    if (kt::erts::is_small(t)) return 11;
    if (kt::erts::is_nil(t)) return 1;
    unsigned len = 0;
    if (kt::erts::is_atom(t) && enif_get_atom_length(env, t, &len, ERL_NIF_UTF8)) return 3 + len;
    return kt::kLeafEstimate;
  }
  bool int64(Term t, std::int64_t& v) const {
    ErlNifSInt64 x;
    if (!enif_get_int64(env, t, &x)) return false;
    v = static_cast<std::int64_t>(x);
    return true;
  }
  kt::BigShape bignum(Term t) const {
    if (!kt::erts::is_boxed(t)) return kt::BigShape{};
    return kt::erts::read_bignum(kt::erts::boxed(t));
  }
  double float64(Term t) const {
    double d = 0;
    enif_get_double(env, t, &d);
    return d;
  }
  bool bit_size(Term t, std::uint64_t& bits) const {
    return kt::erts::is_boxed(t) && kt::erts::read_bit_size(kt::erts::boxed(t), bits);
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
    if (!kt::erts::is_boxed(t)) return nullptr;
    const std::uint64_t* p = kt::erts::boxed(t);
    f = kt::erts::read_fun(p, chosen_layout.layout->fun_header, &chosen_layout.fun_entry);
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
  bool struct_entry(Term t, Term& key, Term& value) const {
    key = structs.cut.struct_key;
    return enif_get_map_value(env, t, key, &value);
  }
  bool is_struct_key(Term k) const { return enif_is_identical(k, structs.cut.struct_key); }
  template <class F>
  bool external(Term t, F&& sink) const {
    ErlNifBinary bin;
    if (!enif_term_to_binary(env, t, &bin)) return false;
    sink(bin.data, bin.size);
    enif_release_binary(&bin);
    return true;
  }
};

// ---------------------------------------------------------------------------------------
// building Erlang terms from the encoded format

struct EnifBuilder {
  using Term = ERL_NIF_TERM;
  ErlNifEnv* env;

  // %Kino.Trace.Cut{kind: kind, value: value, size: size} (structs.hpp).
  Term cut_struct(ERL_NIF_TERM kind, ERL_NIF_TERM value, ERL_NIF_TERM size) const {
    return structs.cut.make(env, {kind, value, size});
  }

  // An immediate's raw word is the same term in any environment (erts_layout.hpp).
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

}  // namespace kino_trace::nif
