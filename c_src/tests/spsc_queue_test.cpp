// SpscQueue: FIFO across blocks, the spare block going back to the producer, items left
// at destruction freed (ASan), and one producer against one consumer (TSan).
#include <catch2/catch.hpp>

#include <cstdint>
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
