// The erl_tracer callbacks: the VM calls enabled*/3 and trace*/5 inside the traced
// process, on scheduler threads. Bounded: enabled*/3 rejects events before the VM builds
// a trace term; trace*/5 copies the term with caps into a self-contained Event and
// pushes it to its scheduler's shard of the session's queue (see SessionCore; threads
// that are not normal schedulers share a fallback shard under a mutex); the owner is
// woken with one message when it found the queue empty.
#include <erl_nif.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "atoms.hpp"
#include "erts_layout.hpp"
#include "nifs.hpp"
#include "session.hpp"
#include "tags.hpp"
#include "term_codec.hpp"
#include "terms.hpp"

namespace kino_trace::nif {

// ---------------------------------------------------------------------------------------
// erl_tracer callbacks

namespace {

// The loop guard's count (loop_guard.hpp) for a call, return or exception of a watched
// module: before any drop, as the VM has pushed (or popped) the frame whatever the queue
// says. The call that makes the process held tells the session once:
// {kino_trace, Id, {loop, Pid, {M, F, Arity}}}. Allocates nothing (the slots exist once
// the session named the modules).
void count_for_loop_guard(ErlNifEnv* env, Session* s, const ERL_NIF_TERM argv[]) noexcept {
  const ERL_NIF_TERM tag = argv[0];
  const bool call = tag == atoms.call;
  if (!call && tag != atoms.return_from && tag != atoms.exception_from) return;
  int arity = 0;
  const ERL_NIF_TERM* mfa = nullptr;
  if (!enif_get_tuple(env, argv[3], &arity, &mfa) || arity != 3 || !s->loop.watches(mfa[0])) return;
  const ERL_NIF_TERM who = argv[2];
  if (!call) {
    s->loop.returned(who);
  } else if (s->loop.call(who)) {
    s->core.mark_lost(who);
    unsigned n = 0;
    int a = 0;
    ERL_NIF_TERM a_term = enif_get_list_length(env, mfa[2], &n) ? enif_make_uint(env, n)
                          : enif_get_int(env, mfa[2], &a)      ? enif_make_int(env, a)
                                                               : atoms.undefined;
    ERL_NIF_TERM what = enif_make_tuple3(env, atoms.loop, who, enif_make_tuple3(env, mfa[0], mfa[1], a_term));
    enif_send(env, &s->owner, nullptr, enif_make_tuple3(env, atoms.kino_trace, enif_make_uint64(env, s->id), what));
  }
}

// The payload of `event` (kind set): the call's arguments or the term, then the extra
// term. May throw std::bad_alloc (the payload's heap block).
void encode(ErlNifEnv* env, kt::Event& event, ERL_NIF_TERM term, ERL_NIF_TERM opts, const kt::TermCaps& caps) {
  EnifSource source{env};
  kt::TermWriter writer(event.payload, caps);
  kt::TermEncoder<EnifSource> encoder(source, writer);

  int arity = 0;
  const ERL_NIF_TERM* mfa = nullptr;
  bool has_mfa = (event.kind == kt::EventKind::Call || event.kind == kt::EventKind::ReturnFrom ||
                  event.kind == kt::EventKind::ExceptionFrom || event.kind == kt::EventKind::ReturnTo) &&
                 enif_get_tuple(env, term, &arity, &mfa) && arity == 3;
  if (has_mfa) {
    event.module = mfa[0];
    event.function = mfa[1];
    unsigned len = 0;
    if (enif_get_list_length(env, mfa[2], &len) && event.kind == kt::EventKind::Call) {
      // Args: the list's length is the arity (enif_get_list_length is O(arity), bounded by 255).
      event.arity = static_cast<std::uint8_t>(len);
      encoder.encode_list(mfa[2], 0);
    } else {
      int a = 0;
      enif_get_int(env, mfa[2], &a);
      event.arity = static_cast<std::uint8_t>(a);  // an arity: at most 255
      writer.immediate(atoms.undefined);
    }
  } else {
    encoder.encode(term, 0);
  }

  // Second payload term: extra (return value, exception, receiver, spawn MFA...) or,
  // for calls, the match spec's message (the caller when asked for).
  // A call carries only the match spec's message, and so does a receive (the marker of a
  // receive...after that timed out: KinoTrace.Plan.MessagePattern); the other events only
  // `extra` (one lookup in the opts map per event, not two).
  ERL_NIF_TERM extra;
  bool ms_result = event.kind == kt::EventKind::Call || event.kind == kt::EventKind::Receive;
  ERL_NIF_TERM extra_key = ms_result ? atoms.match_spec_result : atoms.extra;
  if (enif_get_map_value(env, opts, extra_key, &extra)) {
    encoder.encode(extra, 0);
  } else {
    writer.immediate(atoms.undefined);
  }

  event.payload.shrink_to_fit();  // its footprint in the queue is what it holds
}

}  // namespace

// enabled(TraceTag, TracerState, Tracee) and its enabled_* variants.
ERL_NIF_TERM enabled(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) noexcept {
  Session* s = get_session(env, argv[1]);
  if (!s) return atoms.remove;
  kt::SessionCore& core = s->core;
  if (argv[0] == atoms.trace_status) {
    return core.closed() ? atoms.remove : atoms.trace;
  }

  // A process the loop guard holds: no frame for its calls (the VM asks this before it
  // runs the match spec), until the session moves or resets it.
  if (s->loop.on() && argv[0] == atoms.call && s->loop.held(argv[2])) return atoms.discard;

  std::int64_t now = core.rate_limited() ? s->approximate_vm_now() : 0;
  return core.precheck(now, thread_shard()) == kt::Verdict::Accept ? atoms.trace : atoms.discard;
}

// trace(TraceTag, TracerState, Tracee, TraceTerm, Opts) and its trace_* variants.
ERL_NIF_TERM trace(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) noexcept {
  Session* s = get_session(env, argv[1]);
  if (!s) return atoms.ok;
  if (s->loop.on()) count_for_loop_guard(env, s, argv);
  // Returns the user did not ask for (exception_trace reports them too) are not offered.
  // The VM reports returns without asking enabled*/3 first, so this is the place.
  if (s->skip_returns && argv[0] == atoms.return_from) return atoms.ok;
  kt::SessionCore& core = s->core;
  const ERL_NIF_TERM tag = argv[0];
  const ERL_NIF_TERM term = argv[3];
  const ERL_NIF_TERM opts = argv[4];

  // The shard: this thread's (see shard_of), which `enabled` on this thread uses too.
  // A normal scheduler's id never changes, so once a trace callback on this thread has
  // read it from its options, the lookup (a quarter of trace's own time) is skipped.
  int sched_id = thread_scheduler_id;
  std::size_t shard = thread_shard();
  if (!sched_id) {
    ERL_NIF_TERM sched;
    if (enif_get_map_value(env, opts, atoms.scheduler_id, &sched)) enif_get_int(env, sched, &sched_id);
    shard = shard_of(sched_id);
    if (shard != kt::SessionCore::kAnyThread) thread_scheduler_id = sched_id;
  }

  std::int64_t now = enif_monotonic_time(ERL_NIF_NSEC);
  if (core.admit(now, argv[2], shard) != kt::Verdict::Accept) return atoms.ok;

  kt::Event event;
  event.kind = kind_of(tag);
  event.tag = tag;
  event.time_ns = now;
  event.pid = kt::erts::is_immediate(argv[2]) ? argv[2] : atoms.undefined;
  event.scheduler = static_cast<std::uint16_t>(sched_id);  // 0..1024: the VM's +S bound

  // Encoding allocates only for a payload past the inline bytes of the event; no memory
  // for it (std::bad_alloc) makes the event a counted no_memory drop.
  try {
    encode(env, event, term, opts, core.limits().caps);
  } catch (...) {
    core.abandon_no_memory(argv[2], shard);
    return atoms.ok;
  }
  kt::CommitResult r = core.commit(std::move(event), shard);
  if (r.limit_reached) {
    enif_send(env, &s->owner, nullptr,
              enif_make_tuple3(env, atoms.kino_trace, enif_make_uint64(env, s->id), atoms.limit_reached));
  }
  if (r.wake_consumer) {
    enif_send(env, &s->owner, nullptr,
              enif_make_tuple3(env, atoms.kino_trace, enif_make_uint64(env, s->id), atoms.ready));
  }
  return atoms.ok;
}

}  // namespace kino_trace::nif
