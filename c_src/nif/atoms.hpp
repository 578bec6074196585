// The atoms the NIF uses, made once at load (see setup in kino_trace_nif.cpp).
//
// One X-macro row per atom: X(member, "text"). Struct modules and keys are not here:
// they live in structs.hpp's table.
#pragma once

#include <erl_nif.h>

namespace kino_trace::nif {

#define KINO_TRACE_ATOMS(X)                                            \
  /* replies */                                                        \
  X(ok, "ok")                                                          \
  X(nil, "nil")                                                        \
  X(undefined, "undefined")                                            \
  X(true_, "true")                                                     \
  X(false_, "false")                                                   \
  X(recheck, "recheck")                                                \
  /* erl_tracer */                                                     \
  X(trace, "trace")                                                    \
  X(discard, "discard")                                                \
  X(remove, "remove")                                                  \
  X(trace_status, "trace_status")                                      \
  X(extra, "extra")                                                    \
  X(match_spec_result, "match_spec_result")                            \
  X(scheduler_id, "scheduler_id")                                      \
  /* a receive...after that timed out (KinoTrace.Plan.MessagePattern) */   \
  X(kino_trace_after_timeout, "kino_trace_after_timeout")              \
  X(timeout, "timeout")                                                \
  /* trace tags */                                                     \
  X(call, "call")                                                      \
  X(return_from, "return_from")                                        \
  X(exception_from, "exception_from")                                  \
  X(return_to, "return_to")                                            \
  X(send, "send")                                                      \
  X(send_to_non_existing_process, "send_to_non_existing_process")      \
  X(receive, "receive")                                                \
  X(spawn, "spawn")                                                    \
  X(spawned, "spawned")                                                \
  X(exit, "exit")                                                      \
  X(link, "link")                                                      \
  X(unlink, "unlink")                                                  \
  X(getting_linked, "getting_linked")                                  \
  X(getting_unlinked, "getting_unlinked")                              \
  X(register_, "register")                                             \
  X(unregister, "unregister")                                          \
  /* event kinds (Kino.Trace.Event), besides the tags' own */         \
  X(return_, "return")                                                 \
  X(exception, "exception")                                            \
  X(send_to_non_existing, "send_to_non_existing")                      \
  /* the native decoder */                                             \
  X(names, "names")                                                    \
  X(file, "file")                                                      \
  X(line, "line")                                                      \
  /* messages to the owner */                                          \
  X(kino_trace, "kino_trace")                                          \
  X(ready, "ready")                                                    \
  X(limit_reached, "limit_reached")                                    \
  X(loop, "loop")                                                      \
  /* Kino.Trace.Cut kinds, and a fun's identity */                     \
  X(depth, "depth")                                                    \
  X(items, "items")                                                    \
  X(bytes, "bytes")                                                    \
  X(binary, "binary")                                                  \
  X(bitstring, "bitstring")                                            \
  X(integer, "integer")                                                \
  X(fun, "fun")                                                        \
  X(tuple, "tuple")                                                    \
  X(map, "map")                                                        \
  X(malformed, "malformed")                                            \
  X(module, "module")                                                  \
  X(index, "index")                                                    \
  X(uniq, "uniq")                                                      \
  X(arity, "arity")                                                    \
  /* counters */                                                       \
  X(id, "id")                                                          \
  X(accepted, "accepted")                                              \
  X(delivered, "delivered")                                            \
  X(queued, "queued")                                                  \
  X(discarded, "discarded")                                            \
  X(bytes_queued, "bytes_queued")                                      \
  X(dropped_closed, "dropped_closed")                                  \
  X(dropped_rate, "dropped_rate")                                      \
  X(dropped_queue_full, "dropped_queue_full")                          \
  X(dropped_max_events, "dropped_max_events")                          \
  X(dropped_no_memory, "dropped_no_memory")                            \
  X(wakeups, "wakeups")                                                \
  X(closed, "closed")                                                  \
  /* session limits: the options of Kino.Trace */                     \
  X(limit, "limit")                                                    \
  X(rate, "rate")                                                      \
  X(queue, "queue")                                                    \
  X(events, "events")                                                  \
  X(max_depth, "max_depth")                                            \
  X(max_items, "max_items")                                            \
  X(max_binary, "max_binary")                                          \
  X(max_bytes, "max_bytes")                                            \
  X(skip_returns, "skip_returns")

struct Atoms {
#define KINO_TRACE_ATOM_MEMBER(member, text) ERL_NIF_TERM member = 0;
  KINO_TRACE_ATOMS(KINO_TRACE_ATOM_MEMBER)
#undef KINO_TRACE_ATOM_MEMBER
};

inline Atoms atoms;

inline ERL_NIF_TERM make_atom(ErlNifEnv* env, const char* name) {
  ERL_NIF_TERM a;
  if (enif_make_existing_atom(env, name, &a, ERL_NIF_LATIN1)) return a;
  return enif_make_atom(env, name);
}

inline void init_atoms(ErlNifEnv* env) {
#define KINO_TRACE_ATOM_INIT(member, text) atoms.member = make_atom(env, text);
  KINO_TRACE_ATOMS(KINO_TRACE_ATOM_INIT)
#undef KINO_TRACE_ATOM_INIT
}

}  // namespace kino_trace::nif
