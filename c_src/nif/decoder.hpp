// The native decoder resource (decoder_nifs.cpp): the call pairing of one trace
// (call_pairing.hpp), the registered names it has seen, and a drained batch waiting for
// names. Only its owner (a session process) uses it; a mutex keeps any other caller safe.
#pragma once

#include <erl_nif.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "call_pairing.hpp"
#include "resource.hpp"
#include "session_event.hpp"

namespace kino_trace::nif {

namespace kt = kino_trace;

struct Decoder {
  Decoder(bool pair_calls, ERL_NIF_TERM node_atom) : pairing(pair_calls), node(node_atom) {}

  // Registered names kept (as KinoTrace.Tracer.Decoder's @max_names): past it they start again.
  static constexpr std::size_t kMaxNames = 10000;

  std::mutex mutex;
  kt::CallPairing pairing;
  ERL_NIF_TERM node;                                  // an atom
  std::unordered_map<std::uint64_t, ERL_NIF_TERM> names;  // pid -> atom or nil
  // The names given for the batch being decoded (also in `names`, which may start
  // again meanwhile): a batch needs them once.
  std::unordered_map<std::uint64_t, ERL_NIF_TERM> batch_names;
  // Drained events: the first `pending` of `slots` (kept between calls, so draining
  // does not make its Events anew each time), waiting to be decoded.
  std::vector<kt::Event> slots;
  std::size_t pending = 0;
  bool pending_more = false;
  bool pending_recheck = false;
};

inline ErlNifResourceType* decoder_type = nullptr;

inline void decoder_dtor(ErlNifEnv* env, void* obj) noexcept { destroy_resource<Decoder>(env, obj); }

inline Decoder* get_decoder(ErlNifEnv* env, ERL_NIF_TERM term) {
  void* obj = nullptr;
  if (!enif_get_resource(env, term, decoder_type, &obj)) return nullptr;
  return static_cast<Decoder*>(obj);
}

}  // namespace kino_trace::nif
