// The NIFs of kino_trace_tracer, one line each: this list declares their C++ functions
// and makes the function table (kino_trace_nif.cpp); test/kino_trace/tracer/nif_table_test.exs
// checks it against the module's -nifs and stubs (src/kino_trace_tracer.erl).
//
//   X(Erlang name, arity, C++ function, flags, noexcept or nothing)
//
// Flags: 0, or ERL_NIF_DIRTY_JOB_CPU_BOUND / ERL_NIF_DIRTY_JOB_IO_BOUND.
//
// Failures stay contained: a NIF that may run out of memory (a std container, a buffer)
// is entered through guarded<F>, which turns std::bad_alloc into a RuntimeError ("... no
// memory ...") and any other exception into one too: never std::terminate. A `noexcept`
// NIF is put in the table as it is (no wrapper on the hot path): the erl_tracer callbacks
// allocate nothing that throws (enabled) or catch it themselves and count the event as
// a no_memory drop (trace).
#pragma once

#include <erl_nif.h>

#include <cstddef>
#include <new>

#define KINO_TRACE_NIFS(X)                                                \
  /* erl_tracer callbacks (tracer_callbacks.cpp): the hot path */         \
  X(enabled, 3, enabled, 0, noexcept)                                     \
  X(enabled_call, 3, enabled, 0, noexcept)                                \
  X(enabled_send, 3, enabled, 0, noexcept)                                \
  X(enabled_receive, 3, enabled, 0, noexcept)                             \
  X(enabled_procs, 3, enabled, 0, noexcept)                               \
  X(trace, 5, trace, 0, noexcept)                                         \
  X(trace_call, 5, trace, 0, noexcept)                                    \
  X(trace_send, 5, trace, 0, noexcept)                                    \
  X(trace_receive, 5, trace, 0, noexcept)                                 \
  X(trace_procs, 5, trace, 0, noexcept)                                   \
  /* sessions (session_nifs.cpp) */                                      \
  X(new_session, 2, new_session, 0, )                                     \
  X(session_id, 1, session_id, 0, )                                       \
  X(drain, 2, drain, 0, )                                                 \
  X(counters, 1, counters, 0, )                                           \
  X(close, 1, close_session, 0, )                                         \
  X(roundtrip, 2, roundtrip, 0, )                                         \
  X(limits, 0, limits, 0, )                                               \
  X(set_loop_modules, 2, set_loop_modules, 0, )                           \
  X(loop_release, 3, loop_release, 0, )                                   \
  X(nif_loaded, 0, nif_loaded, 0, )                                       \
  X(struct_keys, 0, struct_keys, 0, )                                     \
  /* the load (kino_trace_nif.cpp) */                                     \
  X(term_layout, 0, term_layout, 0, )                                     \
  X(alloc_faults, 3, alloc_faults, 0, )                                   \
  /* the native decoder (decoder_nifs.cpp) */                             \
  X(new_decoder, 2, new_decoder, 0, )                                     \
  X(decoder_no_returns, 2, decoder_no_returns, 0, )                       \
  X(decoder_unpair, 2, decoder_unpair, 0, )                               \
  X(decoder_take_callers, 1, decoder_take_callers, 0, )                   \
  X(decoder_put_names, 2, decoder_put_names, 0, )                         \
  X(drain_events, 3, drain_events, 0, )                                   \
  X(decode_events, 2, decode_events, 0, )

namespace kino_trace::nif {

using NifFunction = ERL_NIF_TERM (*)(ErlNifEnv*, int, const ERL_NIF_TERM[]);

#define KINO_TRACE_DECLARE_NIF(name, arity, function, flags, spec) \
  ERL_NIF_TERM function(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) spec;
KINO_TRACE_NIFS(KINO_TRACE_DECLARE_NIF)
#undef KINO_TRACE_DECLARE_NIF

// The function table (kino_trace_nif.cpp), made from KINO_TRACE_NIFS.
extern ErlNifFunc nif_table[];
extern const std::size_t nif_table_size;

// What a NIF raises when an exception reached its entry (kino_trace_nif.cpp): a
// RuntimeError saying the native tracer ran out of memory (`no_memory`) or failed.
// Builds nothing on the C++ heap.
ERL_NIF_TERM raise_contained(ErlNifEnv* env, bool no_memory) noexcept;

// F behind a catch: what the table holds for a NIF that may throw.
template <NifFunction F>
ERL_NIF_TERM guarded(ErlNifEnv* env, int argc, const ERL_NIF_TERM argv[]) noexcept {
  try {
    return F(env, argc, argv);
  } catch (const std::bad_alloc&) {
    return raise_contained(env, true);
  } catch (...) {
    return raise_contained(env, false);
  }
}

// The table's entry for F: F itself when it cannot throw, else guarded<F>.
template <auto F>
constexpr NifFunction entry() {
  if constexpr (noexcept(F(nullptr, 0, nullptr))) {
    return F;
  } else {
    return guarded<F>;
  }
}

// The More of drain/2 and drain_events/3: true (drain again), recheck (none left, and the
// queue just went to sleep: drain once more a moment later, see SessionCore's header,
// "Wake-up") or false (none left: the next event wakes the session).
ERL_NIF_TERM more_term(bool more, bool recheck);

}  // namespace kino_trace::nif
