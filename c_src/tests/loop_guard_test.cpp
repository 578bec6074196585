// LoopGuard (issue 36.5): off until modules are named, holds a process at kThreshold
// open calls of them, lets returns count down, and the session's release resets or
// exempts one process without touching another.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <thread>
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

TEST_CASE("LoopGuard: schedulers count their processes while the session releases", "[loop]") {
  LoopGuard g;
  std::vector<std::uint64_t> modules{kModule};
  g.set_modules(modules.begin(), modules.end());
  constexpr int kThreads = 4;
  std::atomic<int> held{0};  // how often a process was held (not checked: releases race)
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&g, &held, t] {
      const std::uint64_t p = (static_cast<std::uint64_t>(t + 1) << 8) | 0x3;
      for (std::uint32_t i = 0; i < 2 * LoopGuard::kThreshold; ++i) {
        if (g.held(p)) continue;
        if (g.call(p)) held.fetch_add(1);
      }
    });
  }
  std::thread session([&g] {
    for (int i = 0; i < 1000; ++i) g.release((static_cast<std::uint64_t>(i % kThreads + 1) << 8) | 0x3, false);
  });
  for (auto& th : threads) th.join();
  session.join();
  // a count never passes the threshold (a held process's calls are not counted)
  for (int t = 0; t < kThreads; ++t) CHECK(g.open_calls((static_cast<std::uint64_t>(t + 1) << 8) | 0x3) <= LoopGuard::kThreshold);
}
