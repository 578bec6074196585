// The NIFs of kino_trace_tracer, as the function table (kino_trace_nif.cpp) names them.
#pragma once

#include <erl_nif.h>

namespace kino_trace::nif {

// erl_tracer callbacks (tracer_callbacks.cpp)
ERL_NIF_TERM enabled(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM trace(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);

// session NIFs (session_nifs.cpp)
ERL_NIF_TERM new_session(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM session_id(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM drain(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM counters(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM close_session(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM roundtrip(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM set_loop_modules(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM loop_release(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_loaded(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM struct_keys(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
// The More of drain/2 and drain_events/3: true (drain again), recheck (none left, and the
// queue just went to sleep: drain once more a moment later, see SessionCore's header,
// "Wake-up") or false (none left: the next event wakes the session).
ERL_NIF_TERM more_term(bool more, bool recheck);

// the native decoder (decoder_nifs.cpp)
ERL_NIF_TERM new_decoder(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM decoder_no_returns(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM decoder_unpair(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM decoder_take_callers(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM decoder_put_names(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM drain_events(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM decode_events(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]);

}  // namespace kino_trace::nif
