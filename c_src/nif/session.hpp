// The session resource: the tracer state of one trace, shared by the erl_tracer
// callbacks (tracer_callbacks.cpp) and the session NIFs (session_nifs.cpp).
#pragma once

#include <erl_nif.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "monotonic_clock.hpp"
#include "resource.hpp"
#include "loop_guard.hpp"
#include "session_core.hpp"

namespace kino_trace::nif {

namespace kt = kino_trace;

// enabled's rate pre-check reads the coarse clock, well ahead (see monotonic_clock.hpp);
// the authoritative check in trace uses the VM's precise clock.
inline const std::int64_t coarse_lead_ns = kt::clock::lead_ns();

inline std::int64_t coarse_clock_ns() { return kt::clock::coarse_ns() + coarse_lead_ns; }

// The VM's normal schedulers: one SessionCore shard each.
inline std::size_t normal_schedulers() {
  ErlNifSysInfo info;
  enif_system_info(&info, sizeof info);
  return info.scheduler_threads > 0 ? static_cast<std::size_t>(info.scheduler_threads) : 0;
}

// The calling thread's scheduler id as the first trace callback on it read it from its
// options (0: none yet, or not a normal scheduler). `enabled` has no options to read it
// from, and the id of a thread never changes.
inline thread_local int thread_scheduler_id = 0;

// The SessionCore shard of the calling thread as thread_scheduler_id knows it: its
// scheduler's, or the fallback while the id is not known (or it is not a normal one).
inline std::size_t thread_shard() {
  return thread_scheduler_id ? static_cast<std::size_t>(thread_scheduler_id - 1) : kt::SessionCore::kAnyThread;
}

// The SessionCore shard of the calling thread, given the scheduler id the VM passed
// (0 when it passed none): scheduler id - 1 on a normal scheduler thread, else the
// fallback (a dirty scheduler or any other thread, whatever id it reports).
inline std::size_t shard_of(int scheduler_id) {
  if (scheduler_id <= 0 || enif_thread_type() != ERL_NIF_THR_NORMAL_SCHEDULER) return kt::SessionCore::kAnyThread;
  return static_cast<std::size_t>(scheduler_id - 1);
}

struct Session {
  Session(const kt::Limits& limits, ErlNifPid owner_pid, std::uint64_t session_id)
      : core(limits, enif_monotonic_time(ERL_NIF_NSEC), normal_schedulers()),
        owner(owner_pid),
        id(session_id),
        coarse_to_vm_ns(enif_monotonic_time(ERL_NIF_NSEC) - kt::clock::precise_ns()) {}

  kt::SessionCore core;
  ErlNifPid owner;
  std::uint64_t id;
  bool skip_returns = false;  // exception_trace without return values: returns are not wanted
  kt::LoopGuard loop;         // tail-call loops of modules with no object code (loop_guard.hpp)
  ErlNifMonitor owner_monitor{};
  const std::int64_t coarse_to_vm_ns;  // the OS monotonic clock -> the VM's monotonic time

  std::int64_t approximate_vm_now() const { return coarse_clock_ns() + coarse_to_vm_ns; }
};

inline ErlNifResourceType* session_type = nullptr;
inline std::atomic<std::uint64_t> next_session_id{1};

inline void session_dtor(ErlNifEnv* env, void* obj) noexcept { destroy_resource<Session>(env, obj); }

// The owner died: close, so every tracee drops this tracer at its next trace_status.
// (Closing frees what is queued and allocates nothing; should it throw all the same, the
// session is shut, and the resource's destructor frees the rest.)
inline void session_down(ErlNifEnv*, void* obj, ErlNifPid*, ErlNifMonitor*) noexcept {
  kt::SessionCore& core = static_cast<Session*>(obj)->core;
  core.shut();
  try {
    core.close();
  } catch (...) {
  }
}

inline Session* get_session(ErlNifEnv* env, ERL_NIF_TERM term) {
  void* obj = nullptr;
  if (!enif_get_resource(env, term, session_type, &obj)) return nullptr;
  return static_cast<Session*>(obj);
}

}  // namespace kino_trace::nif
