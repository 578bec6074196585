// Allocation fault injection, for tests: makes the calling thread's allocations fail on
// demand, so a test can check that running out of memory is a counted drop or a clean
// error (never std::terminate, never a crash).
//
// Compiled in only with KINO_TRACE_FAULT_INJECTION (the Catch2 suite, and the NIF that
// `mix test` builds: CMake's KINO_TRACE_FAULT_INJECTION option); otherwise fail_now() is
// a constant false and costs nothing. The fault points: SmallBuffer's heap block, and in
// the NIF every operator new (c_src/nif/alloc_faults.cpp replaces them), which is where
// the std containers' memory and the queue's blocks come from.
//
// The state is the calling thread's own: arm(n) lets its next n allocations succeed and
// fails every one after them until disarm(); other threads (other schedulers running
// traced processes) are not affected.
#pragma once

#include <cstdint>

namespace kino_trace::faults {

#ifdef KINO_TRACE_FAULT_INJECTION
inline constexpr bool kEnabled = true;

struct State {
  bool armed = false;
  std::uint64_t allowed = 0;  // allocations left to succeed while armed
  std::uint64_t failed = 0;   // allocations failed since arm()
};

inline thread_local State state;

// The calling thread's next `allowed` allocations succeed, every later one fails.
inline void arm(std::uint64_t allowed) { state = State{true, allowed, 0}; }

// Stops failing; returns how many allocations failed since arm().
inline std::uint64_t disarm() {
  std::uint64_t failed = state.failed;
  state = State{};
  return failed;
}

// At an allocation: true when it must fail (then counted).
inline bool fail_now() {
  State& s = state;
  if (!s.armed) return false;
  if (s.allowed > 0) {
    --s.allowed;
    return false;
  }
  ++s.failed;
  return true;
}
#else
inline constexpr bool kEnabled = false;
inline void arm(std::uint64_t) {}
inline std::uint64_t disarm() { return 0; }
constexpr bool fail_now() { return false; }
#endif

// Arms on construction, disarms when it goes (or at disarm(), which says how many failed).
class Armed {
 public:
  explicit Armed(std::uint64_t allowed) { arm(allowed); }
  ~Armed() { faults::disarm(); }
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;
  std::uint64_t disarm() { return faults::disarm(); }
};

}  // namespace kino_trace::faults
