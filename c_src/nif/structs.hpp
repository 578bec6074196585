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
// Kino.Trace.Event: drain_events/3 and decode_events/2 hand each event over as a tuple
// of these fields, in this order, which must be defstruct's (lib/kino/trace/event.ex):
// KinoTrace.Tracer.NativeDecoder makes the structs (they then share the struct's key tuple).
inline constexpr StructSpec<21> kEventSpec{
    "Elixir.Kino.Trace.Event",
    {"id", "kind", "node", "pid", "name", "module", "function", "arity", "args", "return", "exception", "caller",
     "data", "peer", "time", "monotonic", "scheduler", "depth", "call_id", "duration", "lost"}};
// ArgumentError, raised by the session NIFs on bad input.
inline constexpr StructSpec<2> kArgumentErrorSpec{"Elixir.ArgumentError", {"__exception__", "message"}};
// RuntimeError, raised by a NIF that ran out of memory (nifs.hpp, guarded).
inline constexpr StructSpec<2> kRuntimeErrorSpec{"Elixir.RuntimeError", {"__exception__", "message"}};

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

  // {Module, [Key]}: this row of the table, for struct_keys/0.
  ERL_NIF_TERM row(ErlNifEnv* env) const {
    return enif_make_tuple2(env, module, enif_make_list_from_array(env, keys.data(), static_cast<unsigned>(N)));
  }
};

struct Structs {
  StructAtoms<3> cut;
  StructAtoms<2> argument_error;
  StructAtoms<2> runtime_error;
  StructAtoms<21> event;

  void init(ErlNifEnv* env) {
    cut.init(env, kCutSpec);
    argument_error.init(env, kArgumentErrorSpec);
    runtime_error.init(env, kRuntimeErrorSpec);
    event.init(env, kEventSpec);
  }

  // [{Module, [Key]}] for every struct the NIF builds.
  ERL_NIF_TERM table(ErlNifEnv* env) const {
    ERL_NIF_TERM rows[] = {cut.row(env), argument_error.row(env), runtime_error.row(env), event.row(env)};
    return enif_make_list_from_array(env, rows, 4);
  }
};

inline Structs structs;

}  // namespace kino_trace::nif
