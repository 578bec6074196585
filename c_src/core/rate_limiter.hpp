// Lock-free token bucket ("generic cell rate algorithm"): at most `count` events in a
// burst, refilled at `count` per `period`. One atomic word, no locks; callers pass the
// time so tests can drive it exactly.
//
// Blocks (issue 26): take(now, n) takes up to n tokens in one CAS, for a caller that
// keeps them (SessionCore's per-scheduler shards). The bucket's bound holds for what is
// taken: over [0, t] at most count + t / interval tokens leave it, however they are taken.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace kino_trace {

class RateLimiter {
 public:
  RateLimiter() = default;

  // count == 0 or period_ns == 0 means: no rate limit.
  void configure(std::uint64_t count, std::int64_t period_ns) {
    if (count == 0 || period_ns <= 0) {
      interval_ns_ = 0;
      return;
    }
    interval_ns_ = std::max<std::int64_t>(1, period_ns / static_cast<std::int64_t>(count));
    burst_ns_ = interval_ns_ * static_cast<std::int64_t>(count);
  }

  bool limited() const { return interval_ns_ != 0; }

  // Would an event at `now_ns` be admitted? No side effect (for the VM's `enabled`).
  bool would_admit(std::int64_t now_ns) const {
    if (!limited()) return true;
    std::int64_t tat = tat_ns_.load(std::memory_order_relaxed);
    return std::max(tat, now_ns) + interval_ns_ - now_ns <= burst_ns_;
  }

  // Takes one token if there is one.
  bool try_admit(std::int64_t now_ns) { return take(now_ns, 1) == 1; }

  // Takes up to `max` (at least 1) tokens at `now_ns`, as many as the bucket holds;
  // returns how many (0: none). Unlimited: `max`.
  std::uint64_t take(std::int64_t now_ns, std::uint64_t max) {
    if (!limited()) return max;
    std::int64_t tat = tat_ns_.load(std::memory_order_relaxed);
    for (;;) {
      const std::int64_t base = std::max(tat, now_ns);
      const std::int64_t room = burst_ns_ - (base - now_ns);  // what the bucket holds, in ns
      if (room < interval_ns_) return 0;
      const std::uint64_t n = std::min<std::uint64_t>(max, static_cast<std::uint64_t>(room / interval_ns_));
      if (tat_ns_.compare_exchange_weak(tat, base + static_cast<std::int64_t>(n) * interval_ns_,
                                        std::memory_order_relaxed))
        return n;
    }
  }

 private:
  std::int64_t interval_ns_ = 0;
  std::int64_t burst_ns_ = 0;
  std::atomic<std::int64_t> tat_ns_{0};  // theoretical arrival time of the next event
};

}  // namespace kino_trace
