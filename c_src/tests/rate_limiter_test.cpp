// RateLimiter: exact burst, exact refill, side-effect-free would_admit, no limit when
// unconfigured, and no over-admission under concurrency.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "rate_limiter.hpp"

using kino_trace::RateLimiter;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

std::uint64_t admit_all(RateLimiter& r, std::int64_t now, std::uint64_t attempts) {
  std::uint64_t n = 0;
  for (std::uint64_t i = 0; i < attempts; ++i) n += r.try_admit(now) ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("RateLimiter: a fresh limiter is unlimited", "[rate]") {
  RateLimiter r;
  CHECK_FALSE(r.limited());
  CHECK(admit_all(r, 0, 100000) == 100000);
  CHECK(r.would_admit(0));
}

TEST_CASE("RateLimiter: count 0 or period 0 means no limit", "[rate]") {
  RateLimiter r;
  r.configure(0, kSecond);
  CHECK_FALSE(r.limited());
  CHECK(admit_all(r, 5, 10000) == 10000);
  r.configure(10, 0);
  CHECK_FALSE(r.limited());
  r.configure(10, -5);
  CHECK_FALSE(r.limited());
  CHECK(admit_all(r, 5, 10000) == 10000);
  // And a limit can be lifted after being set.
  r.configure(1, kSecond);
  CHECK(r.limited());
  r.configure(0, 0);
  CHECK_FALSE(r.limited());
  CHECK(admit_all(r, 0, 100) == 100);
}

TEST_CASE("RateLimiter: exact burst at t = 0", "[rate]") {
  for (std::uint64_t count : {1ull, 2ull, 7ull, 100ull, 1000ull}) {
    RateLimiter r;
    r.configure(count, kSecond);
    REQUIRE(r.limited());
    INFO("count " << count);
    for (std::uint64_t i = 0; i < count; ++i) {
      REQUIRE(r.would_admit(0));
      REQUIRE(r.try_admit(0));
    }
    CHECK_FALSE(r.would_admit(0));
    CHECK_FALSE(r.try_admit(0));
    CHECK_FALSE(r.try_admit(0));  // refusals take nothing, and give nothing back
  }
}

TEST_CASE("RateLimiter: refills one event per period/count, not before", "[rate]") {
  const std::uint64_t count = 10;
  const std::int64_t period = kSecond;
  const std::int64_t interval = period / static_cast<std::int64_t>(count);  // 100 ms
  RateLimiter r;
  r.configure(count, period);
  CHECK(admit_all(r, 0, 1000) == count);

  CHECK_FALSE(r.would_admit(interval - 1));
  CHECK_FALSE(r.try_admit(interval - 1));
  CHECK(r.would_admit(interval));
  CHECK(r.try_admit(interval));
  CHECK_FALSE(r.try_admit(interval));  // exactly one more

  // After a long pause the bucket is full again, but never fuller than `count`.
  CHECK(admit_all(r, 100 * period, 1000) == count);

  // Steady state: exactly one per interval.
  std::int64_t t = 200 * period;
  CHECK(admit_all(r, t, 1000) == count);
  for (int i = 1; i <= 50; ++i) {
    std::int64_t now = t + i * interval;
    CHECK_FALSE(r.try_admit(now - 1));
    CHECK(r.try_admit(now));
    CHECK_FALSE(r.try_admit(now));
  }
}

TEST_CASE("RateLimiter: over a long run the admitted count matches the rate", "[rate]") {
  const std::uint64_t count = 1000;
  RateLimiter r;
  r.configure(count, kSecond);
  // Offer an event every 100 us for 10 s (10x the rate): burst + 10 s of refill.
  std::uint64_t admitted = 0;
  for (std::int64_t now = 0; now <= 10 * kSecond; now += 100'000) admitted += r.try_admit(now) ? 1 : 0;
  CHECK(admitted == count + 10 * count);
}

TEST_CASE("RateLimiter: a rate faster than 1 per ns still gives the full burst", "[rate]") {
  RateLimiter r;
  r.configure(5000, 1000);  // interval rounds up to 1 ns
  CHECK(r.limited());
  CHECK(admit_all(r, 0, 100000) == 5000);
  CHECK(r.try_admit(1));
  CHECK_FALSE(r.try_admit(1));
}

TEST_CASE("RateLimiter: would_admit has no side effect", "[rate]") {
  RateLimiter r;
  r.configure(3, kSecond);
  for (int i = 0; i < 1000; ++i) CHECK(r.would_admit(0));
  CHECK(admit_all(r, 0, 10) == 3);  // still the full burst
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(r.would_admit(0));
  CHECK(r.would_admit(kSecond / 3));
  CHECK(r.would_admit(kSecond / 3));
  CHECK(r.try_admit(kSecond / 3));
  CHECK_FALSE(r.would_admit(kSecond / 3));
}

TEST_CASE("RateLimiter: concurrent try_admit never admits more than the bucket holds", "[rate][threads]") {
  const int threads = 4;
  const std::uint64_t count = 5000;
  RateLimiter r;
  r.configure(count, kSecond);

  for (int round = 0; round < 20; ++round) {
    // Each round is at a later fixed time; between rounds exactly `refill` tokens come back.
    const std::int64_t now = round * (kSecond / 10);
    const std::uint64_t expected = round == 0 ? count : count / 10;
    std::atomic<std::uint64_t> admitted{0};
    std::atomic<int> ready{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < threads) std::this_thread::yield();
        std::uint64_t mine = 0;
        for (std::uint64_t i = 0; i < count; ++i) mine += r.try_admit(now) ? 1 : 0;
        admitted.fetch_add(mine);
      });
    }
    for (auto& th : pool) th.join();
    INFO("round " << round);
    CHECK(admitted.load() == expected);
    CHECK_FALSE(r.would_admit(now));
  }
}

TEST_CASE("RateLimiter: take(n) takes what the bucket holds, and the bound is the same as one by one", "[rate]") {
  RateLimiter r;
  r.configure(10, kSecond);  // interval 100 ms
  CHECK(r.take(0, 4) == 4);
  CHECK(r.take(0, 4) == 4);
  CHECK(r.take(0, 4) == 2);  // only 2 left
  CHECK(r.take(0, 4) == 0);
  CHECK_FALSE(r.would_admit(0));
  CHECK(r.take(kSecond / 10 - 1, 4) == 0);
  CHECK(r.take(kSecond / 10, 4) == 1);  // one refilled
  CHECK(r.take(10 * kSecond, 100) == 10);  // never more than the burst
  // Over a long run, blocks of 3 take exactly what one by one would.
  RateLimiter a, b;
  a.configure(1000, kSecond);
  b.configure(1000, kSecond);
  std::uint64_t by_block = 0, by_one = 0;
  for (std::int64_t now = 20 * kSecond; now <= 30 * kSecond; now += 100'000) {
    by_block += a.take(now, 3);
    for (int i = 0; i < 3; ++i) by_one += b.try_admit(now) ? 1 : 0;
  }
  CHECK(by_block == by_one);
  CHECK(by_block == 1000 + 10 * 1000);
}
