// The shards' queues (shard_lanes.hpp), each implementation and the two together: per-lane FIFO across
// blocks, a failed allocation is a false push that leaves the item intact, items still
// queued are destroyed with the lanes, and a pop never goes past the published tail.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "sanitized.hpp"
#include "shard_lanes.hpp"

using namespace kino_trace;

namespace {

struct LanesFailingAlloc {
  static inline std::atomic<bool> fail{false};
  static void* allocate(std::size_t size, std::size_t align) {
    return fail.load() ? nullptr : ::operator new(size, std::align_val_t{align}, std::nothrow);
  }
  static void deallocate(void* p, std::size_t align) { ::operator delete(p, std::align_val_t{align}); }
};

}  // namespace

TEMPLATE_TEST_CASE("ShardLanes: each lane is FIFO across blocks, lanes apart", "[lanes]",
                   (MoodycamelLanes<std::uint64_t, 4, SpscNewDelete>), (SpscLanes<std::uint64_t, 4, SpscNewDelete>),
                   (ShardLanes<std::uint64_t, 4, SpscNewDelete>)) {
  TestType lanes(3);
  for (std::uint64_t i = 0; i < 50; ++i) {
    REQUIRE(lanes.push(i % 3, std::uint64_t{i}));
  }
  for (std::size_t l = 0; l < 3; ++l) {
    CHECK(lanes.pushed(l) == (l < 2 ? 17u : 16u));
    std::vector<std::uint64_t> got;
    std::uint64_t buf[5];
    for (std::size_t n; (n = lanes.pop(l, buf, 5)) != 0;) got.insert(got.end(), buf, buf + n);
    REQUIRE(got.size() == lanes.pushed(l));
    for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k] == l + 3 * k);
  }
}

TEMPLATE_TEST_CASE("ShardLanes: a push that finds no memory is false and leaves the item intact", "[lanes][alloc]",
                   (MoodycamelLanes<std::shared_ptr<int>, 2, LanesFailingAlloc>),
                   (SpscLanes<std::shared_ptr<int>, 2, LanesFailingAlloc>),
                   (ShardLanes<std::shared_ptr<int>, 2, LanesFailingAlloc>)) {
  TestType lanes(1);
  auto item = std::make_shared<int>(7);
  LanesFailingAlloc::fail = true;
  CHECK_FALSE(lanes.push(0, std::move(item)));  // the lane's first block
  LanesFailingAlloc::fail = false;
  REQUIRE(item);
  CHECK(*item == 7);
  CHECK(lanes.pushed(0) == 0);
  REQUIRE(lanes.push(0, std::move(item)));
  CHECK(lanes.pushed(0) == 1);
  std::shared_ptr<int> out[2];
  REQUIRE(lanes.pop(0, out, 2) == 1);
  CHECK(*out[0] == 7);
}

TEMPLATE_TEST_CASE("ShardLanes: items still queued are destroyed with the lanes", "[lanes]",
                   (MoodycamelLanes<std::shared_ptr<int>, 2, SpscNewDelete>),
                   (SpscLanes<std::shared_ptr<int>, 2, SpscNewDelete>),
                   (ShardLanes<std::shared_ptr<int>, 2, SpscNewDelete>)) {
  auto item = std::make_shared<int>(1);
  {
    TestType lanes(2);
    for (int i = 0; i < 9; ++i) REQUIRE(lanes.push(static_cast<std::size_t>(i % 2), std::shared_ptr<int>(item)));
    std::shared_ptr<int> out[3];
    REQUIRE(lanes.pop(0, out, 3) == 3);
    CHECK(item.use_count() == 10);
  }
  CHECK(item.use_count() == 1);
}

TEMPLATE_TEST_CASE("ShardLanes: one producer, one consumer: nothing lost or reordered, never past the tail",
                   "[lanes][stress]", (MoodycamelLanes<std::uint64_t, 8, SpscNewDelete>),
                   (SpscLanes<std::uint64_t, 8, SpscNewDelete>)) {
  constexpr std::uint64_t kItems = 200000;
  TestType lanes(1);
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kItems; ++i) REQUIRE(lanes.push(0, std::uint64_t{i}));
  });
  std::uint64_t next = 0;
  bool ok = true;
  std::uint64_t buf[16];
  while (next < kItems && ok) {
    const std::uint64_t tail = lanes.pushed(0);
    const std::size_t n = lanes.pop(0, buf, 16);
    ok = next + n <= tail || lanes.pushed(0) >= next + n;  // what was popped had been published
    for (std::size_t k = 0; k < n; ++k) ok = ok && buf[k] == next++;
  }
  producer.join();
  CHECK(ok);
  CHECK(next == kItems);
}

#ifdef KINO_TRACE_TEST_TSAN
// Issue 40: with every shard on moodycamel a TSan stress test ran past 9 minutes. TSan
// reported each item written into a reused block's slot against the consumer's read of
// the one before (moodycamel orders them with standalone fences, which TSan does not
// model): about 3 reports for 4 items, each one, though suppressed, a report TSan built
// under its global mutex, and now and then one whose stack TSan could no longer restore,
// which no suppression matches (a failure). shard_lanes.hpp's annotation orders the
// slots for TSan, so this run raises no report. Bounded in items and in time.
TEST_CASE("MoodycamelLanes under TSan: items through reused blocks raise no race report", "[lanes][tsan]") {
  constexpr std::uint64_t kItems = 20000;
  struct Item {
    std::array<std::uint64_t, 16> words{};
  };
  MoodycamelLanes<Item, 64, SpscNewDelete> lanes(1);
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kItems && !stop.load(); ++i) {
      Item item;
      item.words.fill(i);
      if (!lanes.push(0, std::move(item))) stop.store(true);
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::uint64_t next = 0, wrong = 0;
  Item buf[16];
  while (next < kItems && !stop.load() && std::chrono::steady_clock::now() < deadline) {
    const std::size_t n = lanes.pop(0, buf, 16);
    for (std::size_t k = 0; k < n; ++k, ++next) wrong += buf[k].words[0] != next || buf[k].words[15] != next;
  }
  stop.store(true);  // stops the producer if the consumer gave up
  producer.join();
  CHECK(next == kItems);
  CHECK(wrong == 0);
}
#endif
