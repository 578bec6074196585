// The two monotonic clocks of the tracer callbacks, on any platform (no erl_nif).
//
//   precise_ns()  the OS's monotonic clock: CLOCK_MONOTONIC where there is one
//                 (Linux, the BSDs, macOS), else std::chrono::steady_clock (Windows,
//                 where it reads QueryPerformanceCounter).
//   coarse_ns()   the same clock, cheaper and coarser: CLOCK_MONOTONIC_COARSE (Linux)
//                 or CLOCK_MONOTONIC_FAST (FreeBSD) cost a few ns (no hardware counter
//                 read) at 1-4 ms resolution. Fallback elsewhere (macOS, Windows...):
//                 precise_ns() itself, correct, only dearer (a counter read, ~20-40 ns).
//                 Both clocks count from the same origin, so one offset maps either to
//                 the VM's monotonic time.
//   lead_ns()     how far ahead of coarse_ns() the time may be: four of its ticks, at
//                 least 50 ms. `enabled`'s rate pre-check reads coarse_ns() + lead_ns(),
//                 so it never refuses what the precise check in `trace` would accept
//                 (near a refill it lets a few terms be built for nothing).
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>

namespace kino_trace::clock {

#if defined(CLOCK_MONOTONIC_COARSE)
inline constexpr const char* kCoarseName = "CLOCK_MONOTONIC_COARSE";
#define KINO_TRACE_COARSE_CLOCK CLOCK_MONOTONIC_COARSE
#elif defined(CLOCK_MONOTONIC_FAST)
inline constexpr const char* kCoarseName = "CLOCK_MONOTONIC_FAST";
#define KINO_TRACE_COARSE_CLOCK CLOCK_MONOTONIC_FAST
#else
inline constexpr const char* kCoarseName = "the precise clock (no coarse clock here)";
#endif

// A timespec in nanoseconds.
inline std::int64_t to_ns(const timespec& ts) { return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec; }

inline std::int64_t precise_ns() {
#if defined(CLOCK_MONOTONIC)
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return to_ns(ts);
#else
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
#endif
}

inline std::int64_t coarse_ns() {
#if defined(KINO_TRACE_COARSE_CLOCK)
  timespec ts;
  clock_gettime(KINO_TRACE_COARSE_CLOCK, &ts);
  return to_ns(ts);
#else
  return precise_ns();
#endif
}

// The coarse clock's tick (its resolution), or 10 ms when the OS does not say.
inline std::int64_t coarse_tick_ns() {
#if defined(KINO_TRACE_COARSE_CLOCK)
  timespec res;
  if (clock_getres(KINO_TRACE_COARSE_CLOCK, &res) == 0) return to_ns(res);
#endif
  return 10000000;
}

// (Computed on each call: a caller on a hot path keeps it, as session.hpp does.)
inline std::int64_t lead_ns() {
  const std::int64_t tick = coarse_tick_ns();
  return tick * 4 > 50000000 ? tick * 4 : 50000000;
}

}  // namespace kino_trace::clock
