// LoopGuard (issue 36.5): off until modules are named, holds a process at kThreshold
// open calls of them, lets returns count down, and the session's release resets or
// exempts one process without touching another.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "loop_guard.hpp"

using kino_trace::LoopGuard;

namespace {

constexpr std::uint64_t kModule = 0x1234B;  // any word: the guard compares them
constexpr std::uint64_t kOther = 0x5678B;

// Calls until `who` is held; how many it took.
std::uint32_t calls_until_held(LoopGuard& g, std::uint64_t who) {
  std::uint32_t n = 0;
  while (!g.held(who) && n < 2 * LoopGuard::kThreshold) {
    ++n;
    g.call(who);
  }
  return n;
}

}  // namespace

TEST_CASE("LoopGuard: off until modules are named", "[loop]") {
  LoopGuard g;
  CHECK_FALSE(g.on());
  CHECK_FALSE(g.watches(kModule));
  CHECK_FALSE(g.held(0x10));
  std::vector<std::uint64_t> modules{kModule};
  g.set_modules(modules.begin(), modules.end());
  CHECK(g.on());
  CHECK(g.watches(kModule));
  CHECK_FALSE(g.watches(kOther));
  std::vector<std::uint64_t> none;
  g.set_modules(none.begin(), none.end());
  CHECK_FALSE(g.on());
}

TEST_CASE("LoopGuard: a process is held at kThreshold open calls, once", "[loop]") {
  LoopGuard g;
  std::vector<std::uint64_t> modules{kModule};
  g.set_modules(modules.begin(), modules.end());
  const std::uint64_t p = 0x1230, q = 0x4560;
  int told = 0;
  for (std::uint32_t i = 0; i < LoopGuard::kThreshold - 1; ++i) told += g.call(p) ? 1 : 0;
  CHECK(told == 0);
  CHECK_FALSE(g.held(p));
  CHECK(g.call(p));  // the kThreshold-th: tell the session
  CHECK(g.held(p));
  CHECK_FALSE(g.call(p));  // told once
  CHECK_FALSE(g.held(q));
  CHECK(g.open_calls(p) == LoopGuard::kThreshold);
}

TEST_CASE("LoopGuard: returns count down, so a recursion that returns is never held", "[loop]") {
  LoopGuard g;
  std::vector<std::uint64_t> modules{kModule};
  g.set_modules(modules.begin(), modules.end());
  const std::uint64_t p = 0x1230;
  for (int round = 0; round < 10; ++round) {
    for (std::uint32_t i = 0; i < LoopGuard::kThreshold - 1; ++i) CHECK_FALSE(g.call(p));
    for (std::uint32_t i = 0; i < LoopGuard::kThreshold - 1; ++i) g.returned(p);
  }
  CHECK_FALSE(g.held(p));
  CHECK(g.open_calls(p) == 0);
  g.returned(p);  // no underflow
  CHECK(g.open_calls(p) == 0);
}

TEST_CASE("LoopGuard: release resets or exempts one process", "[loop]") {
  LoopGuard g;
  std::vector<std::uint64_t> modules{kModule};
  g.set_modules(modules.begin(), modules.end());
  const std::uint64_t p = 0x1230, q = 0x4560;
  CHECK(calls_until_held(g, p) == LoopGuard::kThreshold);
  for (int i = 0; i < 10; ++i) g.call(q);
  g.release(p, false);
  CHECK_FALSE(g.held(p));
  CHECK(g.open_calls(q) == 10);
  CHECK(calls_until_held(g, p) == LoopGuard::kThreshold);
  g.release(p, true);
  for (std::uint32_t i = 0; i < 3 * LoopGuard::kThreshold; ++i) CHECK_FALSE(g.call(p));
  CHECK_FALSE(g.held(p));
}

TEST_CASE("LoopGuard: many processes are counted apart", "[loop]") {
  LoopGuard g;
  std::vector<std::uint64_t> modules{kModule};
  g.set_modules(modules.begin(), modules.end());
  // pid-like words: consecutive process numbers
  std::vector<std::uint64_t> pids;
  for (std::uint64_t i = 0; i < 512; ++i) pids.push_back((i << 4) | 0x3);
  for (std::uint32_t step = 0; step < 100; ++step)
    for (auto p : pids) g.call(p);
  std::size_t exact = 0;
  for (auto p : pids) exact += g.open_calls(p) == 100 ? 1 : 0;
  CHECK(exact == pids.size());
}
