// SpscQueue: FIFO across blocks, the spare block going back to the producer, items left
// at destruction freed (ASan), and one producer against one consumer (TSan).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "spsc_queue.hpp"

using namespace kino_trace;

TEST_CASE("SpscQueue: FIFO across many blocks, popped in uneven batches", "[spsc]") {
  SpscQueue<std::uint64_t, 4> q;
  std::uint64_t next_in = 0, next_out = 0;
  std::uint64_t buf[7];
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < round % 11; ++i) REQUIRE(q.push(std::uint64_t{next_in++}));
    std::size_t n = q.pop(buf, 1 + round % 7);
    for (std::size_t i = 0; i < n; ++i) CHECK(buf[i] == next_out++);
  }
  for (std::size_t n; (n = q.pop(buf, 7)) != 0;)
    for (std::size_t i = 0; i < n; ++i) CHECK(buf[i] == next_out++);
  CHECK(next_out == next_in);
  CHECK(q.pushed() == next_in);
}

TEST_CASE("SpscQueue: items still queued are destroyed with it", "[spsc]") {
  auto alive = std::make_shared<int>(0);
  {
    SpscQueue<std::shared_ptr<int>, 4> q;
    for (int i = 0; i < 10; ++i) REQUIRE(q.push(std::shared_ptr<int>(alive)));
    std::shared_ptr<int> out[3];
    REQUIRE(q.pop(out, 3) == 3);
    CHECK(alive.use_count() == 11);
  }
  CHECK(alive.use_count() == 1);
}

TEST_CASE("SpscQueue: one producer, one consumer, nothing lost or reordered", "[spsc][stress]") {
  constexpr std::uint64_t kItems = 300'000;
  SpscQueue<std::vector<std::uint64_t>, 8> q;  // a heap payload: moves must be complete
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kItems; ++i) {
      while (!q.push(std::vector<std::uint64_t>(1 + i % 3, i))) {
      }
      if (i % 1000 == 0) std::this_thread::yield();
    }
  });
  std::uint64_t expected = 0;
  bool ok = true;
  std::vector<std::uint64_t> buf[16];
  while (expected < kItems) {
    std::size_t n = q.pop(buf, 16);
    for (std::size_t i = 0; i < n; ++i, ++expected)
      ok = ok && buf[i].size() == 1 + expected % 3 && buf[i][0] == expected;
    if (n == 0) std::this_thread::yield();
  }
  producer.join();
  CHECK(ok);
  CHECK(q.pushed() == kItems);
}

namespace {
// Counts the blocks the queue allocates and frees, and those allocated while `producing`.
struct CountingAlloc {
  static inline std::size_t allocated = 0;
  static inline std::size_t freed = 0;
  static inline std::size_t by_producer = 0;
  static inline bool producing = false;
  static void* allocate(std::size_t size, std::size_t align) {
    ++allocated;
    if (producing) ++by_producer;
    return std::aligned_alloc(align, size);
  }
  static void deallocate(void* p, std::size_t) {
    ++freed;
    std::free(p);
  }
};
using CountedQueue = SpscQueue<std::uint64_t, 4, CountingAlloc>;

struct Counted {
  CountedQueue q;
  std::uint64_t next_in = 0, next_out = 0;
  Counted() { CountingAlloc::allocated = CountingAlloc::freed = CountingAlloc::by_producer = 0; }
  void push(std::size_t items) {
    CountingAlloc::producing = true;
    for (std::size_t i = 0; i < items; ++i) REQUIRE(q.push(std::uint64_t{next_in++}));
    CountingAlloc::producing = false;
  }
  // pops up to `items` (all by default), checking the order
  void pop(std::size_t items = SIZE_MAX) {
    std::uint64_t buf[8];
    for (std::size_t n; items > 0 && (n = q.pop(buf, std::min<std::size_t>(8, items))) != 0; items -= n)
      for (std::size_t i = 0; i < n; ++i) REQUIRE(buf[i] == next_out++);
  }
};
}  // namespace

// Issue 40: a paced consumer lets the queue grow by tens of blocks between drains. With one
// spare block, each drain freed the rest, and the producer (the traced process) allocated
// them again, touching pages the allocator had given back: a page fault per 4 KiB.
TEST_CASE("SpscQueue: a queue drained after growing many blocks keeps them for the producer", "[spsc][alloc]") {
  {
    Counted c;
    const std::size_t depth = 4 * (CountedQueue::kSpares / 2);  // half the spares' worth of blocks
    c.push(depth);
    c.pop();
    for (int round = 0; round < 10; ++round) {
      CountingAlloc::by_producer = 0;
      c.push(depth);
      CHECK(CountingAlloc::by_producer == 0);  // the blocks come back
      c.pop();
    }
    // deeper than the spares hold: the rest are freed, nothing is lost or reordered
    c.push(4 * CountedQueue::kSpares * 3);
    c.pop();
    CHECK(c.next_out == c.next_in);
    CHECK(CountingAlloc::freed > 0);
    CHECK(CountingAlloc::allocated - CountingAlloc::freed <= CountedQueue::kSpares + 2);  // bounded
  }
  CHECK(CountingAlloc::freed == CountingAlloc::allocated);  // the spares too, at destruction
}

// Issue 40: a producer ahead of its consumer needs new blocks; the consumer allocates them
// (and touches their pages) at its pops, so the producer does not.
TEST_CASE("SpscQueue: the consumer prepares blocks for a producer ahead of it", "[spsc][alloc]") {
  {
    Counted c;
    c.push(4 * 20);  // 20 blocks ahead
    CHECK(CountingAlloc::by_producer >= 20);
    c.pop(1);  // the consumer sees the backlog
    CountingAlloc::by_producer = 0;
    c.push(4 * 19);  // that many blocks more: prepared
    CHECK(CountingAlloc::by_producer == 0);
    c.pop();
    // with no backlog, nothing is prepared: an idle queue holds no new blocks
    const std::size_t before = CountingAlloc::allocated;
    c.push(2);
    c.pop();
    CHECK(CountingAlloc::allocated == before);
    CHECK(c.next_out == c.next_in);
  }
  CHECK(CountingAlloc::freed == CountingAlloc::allocated);
}
