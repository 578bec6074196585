// The benchmark's cost floor: an erl_tracer whose callbacks do as little as a NIF tracer
// can. With the state `discard`, enabled*/3 answers `discard` (so the VM builds no trace
// term) and `trace` for trace_status (so the session stays). With the state `accept`,
// enabled*/3 answers `trace` and trace*/5 returns at once: the cost of a NIF tracer that
// takes every event and copies nothing.
//
// Benchmark support only (KinoTraceBench.FloorTracer, built for MIX_ENV=bench).
#include <erl_nif.h>

namespace {

ERL_NIF_TERM atom_ok, atom_trace, atom_discard, atom_remove, atom_trace_status, atom_accept;

ERL_NIF_TERM enabled(ErlNifEnv*, int, const ERL_NIF_TERM argv[]) {
  if (argv[0] == atom_trace_status) return atom_trace;
  return argv[1] == atom_accept ? atom_trace : atom_discard;
}

ERL_NIF_TERM trace(ErlNifEnv*, int, const ERL_NIF_TERM[]) { return atom_ok; }

int load(ErlNifEnv* env, void**, ERL_NIF_TERM) {
  atom_ok = enif_make_atom(env, "ok");
  atom_trace = enif_make_atom(env, "trace");
  atom_discard = enif_make_atom(env, "discard");
  atom_remove = enif_make_atom(env, "remove");
  atom_trace_status = enif_make_atom(env, "trace_status");
  atom_accept = enif_make_atom(env, "accept");
  return 0;
}

int upgrade(ErlNifEnv* env, void** priv, void**, ERL_NIF_TERM info) { return load(env, priv, info); }

ErlNifFunc nif_funcs[] = {
    {"enabled", 3, enabled, 0},       {"enabled_call", 3, enabled, 0},   {"enabled_send", 3, enabled, 0},
    {"enabled_receive", 3, enabled, 0}, {"enabled_procs", 3, enabled, 0}, {"trace", 5, trace, 0},
    {"trace_call", 5, trace, 0},      {"trace_send", 5, trace, 0},       {"trace_receive", 5, trace, 0},
    {"trace_procs", 5, trace, 0},
};

}  // namespace

ERL_NIF_INIT(Elixir.KinoTraceBench.FloorTracer, nif_funcs, load, nullptr, upgrade, nullptr)
