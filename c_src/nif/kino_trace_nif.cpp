// kino_trace's native tracer: the NIFs of kino_trace_tracer (src/kino_trace_tracer.erl),
// an Erlang module so that a node without Elixir can load it; KinoTrace.Tracer is its
// Elixir facade.
//
// The parts:
//   atoms.hpp              the atoms, made once at load
//   structs.hpp            the Elixir structs the NIF builds (Kino.Trace.Cut, ArgumentError)
//   terms.hpp              the codec's erl_nif adapters (EnifSource, EnifBuilder)
//   layout_check.hpp       the load-time check of ERTS's term layout (erts_layout.hpp)
//   session.hpp            the session resource
//   tracer_callbacks.cpp   enabled*/3 and trace*/5, called by the VM in traced processes
//   session_nifs.cpp       new_session/2, drain/2, counters/1, close/1, roundtrip/2, ...
//   decoder.hpp            the native decoder resource
//   decoder_nifs.cpp       new_decoder/2, drain_events/3, decode_events/2, ...
//   this file              setup (shared by load and upgrade) and the function table
#include <erl_nif.h>

#include <fmt/format.h>

#include <cstring>
#include <string>

#include "atoms.hpp"
#include "decoder.hpp"
#include "layout_check.hpp"
#include "nifs.hpp"
#include "session.hpp"
#include "structs.hpp"
#include "terms.hpp"

namespace kino_trace::nif {
namespace {

// Why a load failed, sent to the loading process (kino_trace_tracer's on_load keeps it):
// erl_nif only lets load return a number.
void report_load_error(ErlNifEnv* env, const std::string& why) {
  ErlNifPid self;
  if (!enif_self(env, &self)) return;
  ERL_NIF_TERM text;
  unsigned char* bytes = enif_make_new_binary(env, why.size(), &text);
  std::memcpy(bytes, why.data(), why.size());
  enif_send(env, &self, nullptr, enif_make_tuple2(env, make_atom(env, "kino_trace_load_error"), text));
}

// The layout name given as the load info (a binary), or "" (load info 0: choose).
std::string forced_layout(ErlNifEnv* env, ERL_NIF_TERM load_info) {
  ErlNifBinary name;
  if (!enif_inspect_binary(env, load_info, &name)) return {};
  return std::string(reinterpret_cast<const char*>(name.data), name.size);
}

// What load and upgrade both do: atoms, structs, the term layout checks, the resource
// type (`flags`: create it, or also take over the previous module's).
int setup(ErlNifEnv* env, ErlNifResourceFlags flags, ERL_NIF_TERM load_info) {
  init_atoms(env);
  structs.init(env);
  std::string unsupported = check_immediates(env);
  if (!unsupported.empty()) {
    report_load_error(env, "unsupported term layout: " + unsupported +
                               " (the tracer needs the 64-bit term layout of OTP 27 to 29, see c_src/core/erts_layout.hpp)");
    return 2;
  }
  std::string why;
  kt::erts::ChosenLayout chosen = check_readers(env, forced_layout(env, load_info), why);
  if (!chosen.layout) {
    report_load_error(env, fmt::format("unsupported term layout: ERTS {} (OTP {}) lays out funs, bitstrings or big "
                                       "integers as no known release does ({}); see c_src/core/erts_layout.hpp",
                                       erts_version(), running_otp_release(), why));
    return 3;
  }
  chosen_layout = chosen;
  ErlNifResourceTypeInit init{};
  init.dtor = session_dtor;
  init.down = session_down;
  init.members = 3;
  session_type = enif_init_resource_type(env, "kino_trace_session", &init, flags, nullptr);
  if (!session_type) {
    report_load_error(env, "could not make the session resource type");
    return 1;
  }
  ErlNifResourceTypeInit decoder_init{};
  decoder_init.dtor = decoder_dtor;
  decoder_init.members = 1;
  decoder_type = enif_init_resource_type(env, "kino_trace_decoder", &decoder_init, flags, nullptr);
  if (!decoder_type) {
    report_load_error(env, "could not make the decoder resource type");
    return 1;
  }
  return 0;
}

int load(ErlNifEnv* env, void**, ERL_NIF_TERM load_info) { return setup(env, ERL_NIF_RT_CREATE, load_info); }

int upgrade(ErlNifEnv* env, void**, void**, ERL_NIF_TERM load_info) {
  return setup(env, static_cast<ErlNifResourceFlags>(ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER), load_info);
}

// term_layout/0: the layout chosen at load, #{name => <<"OTP 29">>, otp_release => 29,
// chosen_by => release | check} (check: no layout is named for the running release,
// this one read the probe terms right).
ERL_NIF_TERM term_layout(ErlNifEnv* env, int, const ERL_NIF_TERM[]) {
  ERL_NIF_TERM name;
  std::size_t n = std::strlen(chosen_layout.layout->name);
  std::memcpy(enif_make_new_binary(env, n, &name), chosen_layout.layout->name, n);
  ERL_NIF_TERM keys[] = {make_atom(env, "name"), make_atom(env, "otp_release"), make_atom(env, "chosen_by")};
  ERL_NIF_TERM values[] = {name, enif_make_uint(env, chosen_layout.layout->otp_release),
                           make_atom(env, chosen_layout.by_release ? "release" : "check")};
  ERL_NIF_TERM map;
  enif_make_map_from_arrays(env, keys, values, 3, &map);
  return map;
}

ErlNifFunc nif_funcs[] = {
    {"enabled", 3, enabled, 0},
    {"enabled_call", 3, enabled, 0},
    {"enabled_send", 3, enabled, 0},
    {"enabled_receive", 3, enabled, 0},
    {"enabled_procs", 3, enabled, 0},
    {"trace", 5, trace, 0},
    {"trace_call", 5, trace, 0},
    {"trace_send", 5, trace, 0},
    {"trace_receive", 5, trace, 0},
    {"trace_procs", 5, trace, 0},
    {"new_session", 2, new_session, 0},
    {"session_id", 1, session_id, 0},
    {"drain", 2, drain, 0},
    {"counters", 1, counters, 0},
    {"close", 1, close_session, 0},
    {"roundtrip", 2, roundtrip, 0},
    {"set_loop_modules", 2, set_loop_modules, 0},
    {"loop_release", 3, loop_release, 0},
    {"nif_loaded", 0, nif_loaded, 0},
    {"term_layout", 0, term_layout, 0},
    {"struct_keys", 0, struct_keys, 0},
    {"new_decoder", 2, new_decoder, 0},
    {"decoder_no_returns", 2, decoder_no_returns, 0},
    {"decoder_unpair", 2, decoder_unpair, 0},
    {"decoder_take_callers", 1, decoder_take_callers, 0},
    {"decoder_put_names", 2, decoder_put_names, 0},
    {"drain_events", 3, drain_events, 0},
    {"decode_events", 2, decode_events, 0},
};

}  // namespace
}  // namespace kino_trace::nif

ERL_NIF_INIT(kino_trace_tracer, kino_trace::nif::nif_funcs, kino_trace::nif::load, nullptr, kino_trace::nif::upgrade,
             nullptr)
