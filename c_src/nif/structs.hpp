// The Elixir structs the NIF builds by hand, from one table: each struct's module and
// keys. struct_keys/0 (a NIF) returns the table, and an ExUnit test checks it against
// the structs' defstruct, so a field added in Elixir and not here fails that test.
#pragma once

#include <erl_nif.h>

#include <array>
#include <cstddef>

#include "atoms.hpp"

namespace kino_trace::nif {

// A struct's module and keys (besides __struct__), as text: the table's rows.
template <std::size_t N>
struct StructSpec {
  const char* module;
  std::array<const char*, N> keys;
};

// Kino.Trace.Cut: what the encoder left out (see lib/kino/trace/cut.ex).
inline constexpr StructSpec<3> kCutSpec{"Elixir.Kino.Trace.Cut", {"kind", "value", "size"}};
// Kino.Trace.Event: what drain_events/3 and decode_events/2 build (see
// lib/kino/trace/event.ex), the keys in defstruct order.
inline constexpr StructSpec<21> kEventSpec{
    "Elixir.Kino.Trace.Event",
    {"id", "kind", "node", "pid", "name", "module", "function", "arity", "args", "return", "exception", "caller",
     "data", "peer", "time", "monotonic", "scheduler", "depth", "call_id", "duration", "lost"}};
// ArgumentError, raised by the session NIFs on bad input.
inline constexpr StructSpec<2> kArgumentErrorSpec{"Elixir.ArgumentError", {"__exception__", "message"}};

// A struct's atoms, made at load from its spec; make() builds one with its N values in
// the spec's key order (a different count does not compile).
template <std::size_t N>
struct StructAtoms {
  ERL_NIF_TERM struct_key = 0;  // __struct__
  ERL_NIF_TERM module = 0;
  std::array<ERL_NIF_TERM, N> keys{};

  void init(ErlNifEnv* env, const StructSpec<N>& spec) {
    struct_key = make_atom(env, "__struct__");
    module = make_atom(env, spec.module);
    for (std::size_t i = 0; i < N; ++i) keys[i] = make_atom(env, spec.keys[i]);
  }

  ERL_NIF_TERM make(ErlNifEnv* env, const std::array<ERL_NIF_TERM, N>& values) const {
    std::array<ERL_NIF_TERM, N + 1> k, v;
    k[0] = struct_key;
    v[0] = module;
    for (std::size_t i = 0; i < N; ++i) {
      k[i + 1] = keys[i];
      v[i + 1] = values[i];
    }
    ERL_NIF_TERM m;
    enif_make_map_from_arrays(env, k.data(), v.data(), N + 1, &m);
    return m;
  }

  // For make_sorted(): the keys in the order the VM keeps them in a small map (its own
  // order since OTP 26, not the atoms' text order), read back from a map made once, so
  // the VM's check of each new map finds them already in order (no reordering).
  void sort_keys(ErlNifEnv* env) {
    std::array<ERL_NIF_TERM, N + 1> all, index;
    all[0] = struct_key;
    for (std::size_t i = 0; i < N; ++i) all[i + 1] = keys[i];
    for (std::size_t i = 0; i <= N; ++i) index[i] = enif_make_uint64(env, i);
    ERL_NIF_TERM m;
    enif_make_map_from_arrays(env, all.data(), index.data(), N + 1, &m);
    ErlNifMapIterator it;
    enif_map_iterator_create(env, m, &it, ERL_NIF_MAP_ITERATOR_FIRST);
    ERL_NIF_TERM key, value;
    for (std::size_t at = 0; at <= N && enif_map_iterator_get_pair(env, &it, &key, &value); ++at) {
      ErlNifUInt64 i = 0;
      enif_get_uint64(env, value, &i);
      sorted[at] = key;
      position[i] = at;
      enif_map_iterator_next(env, &it);
    }
    enif_map_iterator_destroy(env, &it);
  }

  std::array<ERL_NIF_TERM, N + 1> sorted{};  // __struct__ and the keys, in the map's order
  std::array<std::size_t, N + 1> position{};  // where __struct__ and each key go in `sorted`

  // The struct with its N values (spec order), its keys handed over in the map's order.
  ERL_NIF_TERM make_sorted(ErlNifEnv* env, const std::array<ERL_NIF_TERM, N>& values) const {
    std::array<ERL_NIF_TERM, N + 1> v;
    v[position[0]] = module;
    for (std::size_t i = 0; i < N; ++i) v[position[i + 1]] = values[i];
    ERL_NIF_TERM m;
    // erl_nif takes the keys as non-const; it only reads them.
    enif_make_map_from_arrays(env, const_cast<ERL_NIF_TERM*>(sorted.data()), v.data(), N + 1, &m);
    return m;
  }

  // {Module, [Key]}: this row of the table, for struct_keys/0.
  ERL_NIF_TERM row(ErlNifEnv* env) const {
    return enif_make_tuple2(env, module, enif_make_list_from_array(env, keys.data(), static_cast<unsigned>(N)));
  }
};

struct Structs {
  StructAtoms<3> cut;
  StructAtoms<2> argument_error;
  StructAtoms<21> event;

  void init(ErlNifEnv* env) {
    cut.init(env, kCutSpec);
    argument_error.init(env, kArgumentErrorSpec);
    event.init(env, kEventSpec);
    event.sort_keys(env);
  }

  // [{Module, [Key]}] for every struct the NIF builds.
  ERL_NIF_TERM table(ErlNifEnv* env) const {
    ERL_NIF_TERM rows[] = {cut.row(env), argument_error.row(env), event.row(env)};
    return enif_make_list_from_array(env, rows, 3);
  }
};

inline Structs structs;

}  // namespace kino_trace::nif
