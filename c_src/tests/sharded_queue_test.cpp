// ShardedQueue (issue 26): per-shard single-producer queues merged by timestamp in causal
// order, per-shard counters summed by the reader, the shared fallback shard; and, under
// TSan, processes that migrate between the shards' threads come out in their own order.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "sanitized.hpp"
#include "session_event.hpp"
#include "sharded_queue.hpp"

using namespace kino_trace;

namespace {

using Queue = ShardedQueue<Event>;

constexpr std::uint64_t kEventsPerProcess = test::kSanitized ? 20'000 : 100'000;

Event at(std::int64_t time_ns, std::uint64_t pid, std::uint64_t nth, std::size_t payload = 0) {
  Event e;
  e.time_ns = time_ns;
  e.pid = pid;
  e.function = nth;
  std::uint8_t* p = e.payload.extend(payload);
  for (std::size_t i = 0; i < payload; ++i) p[i] = static_cast<std::uint8_t>(pid + nth + i);
  return e;
}

std::vector<Event> pop_all(Queue& q) {
  std::vector<Event> got;
  Event buf[16];
  bool more = true;
  while (more) {
    std::size_t n = q.pop(buf, 16, more);
    for (std::size_t i = 0; i < n; ++i) got.push_back(std::move(buf[i]));
  }
  return got;
}

}  // namespace

TEST_CASE("ShardedQueue: one shard hands its items out in FIFO order", "[sharded]") {
  Queue q(2);
  {
    Queue::Producer p(q, 0);
    for (std::uint64_t i = 0; i < 100; ++i) REQUIRE(p.push(at(static_cast<std::int64_t>(i), 7, i, i % 3 ? 8 : 200)));
    CHECK(p.held() == 100);
  }
  std::vector<Event> got = pop_all(q);
  REQUIRE(got.size() == 100);
  for (std::uint64_t i = 0; i < 100; ++i) {
    CHECK(got[i].function == i);
    CHECK(got[i].payload.size() == (i % 3 ? 8u : 200u));
  }
  CHECK(q.released(0) == 100);
  CHECK(q.staged() == 0);
}

TEST_CASE("ShardedQueue: shards are merged by timestamp", "[sharded]") {
  Queue q(3);
  // Shard i holds the timestamps congruent to i mod 4 (3 is the fallback's).
  for (std::size_t s = 0; s < q.shard_count(); ++s) {
    Queue::Producer p(q, s);
    for (std::int64_t t = static_cast<std::int64_t>(s); t < 400; t += 4) REQUIRE(p.push(at(t, s, 0)));
  }
  std::vector<Event> got = pop_all(q);
  REQUIRE(got.size() == 400);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i].time_ns == static_cast<std::int64_t>(i));
}

TEST_CASE("ShardedQueue: a timestamp below the shard's last is raised to it", "[sharded]") {
  Queue q(1);
  {
    Queue::Producer p(q, 0);
    REQUIRE(p.push(at(50, 1, 0)));
    REQUIRE(p.push(at(40, 1, 1)));  // e.g. a clock read before the mutex of the fallback
  }
  std::vector<Event> got = pop_all(q);
  REQUIRE(got.size() == 2);
  CHECK(got[0].function == 0);
  CHECK(got[1].function == 1);
  CHECK(got[1].time_ns == 50);
}

TEST_CASE("ShardedQueue: an index past the single-producer shards is the fallback", "[sharded]") {
  Queue q(2);
  CHECK(q.fallback() == 2);
  { Queue::Producer(q, 99).push(at(1, 1, 0)); }
  CHECK(q.released(2) == 0);
  pop_all(q);
  CHECK(q.released(2) == 1);
}

TEST_CASE("ShardedQueue: counters are per shard, summed by the reader", "[sharded]") {
  Queue q(2);
  {
    Queue::Producer a(q, 0);
    a.bump(0);
    a.bump(3, 5);
  }
  {
    Queue::Producer b(q, 1);
    b.bump(0, 2);
  }
  { Queue::Producer(q, q.fallback()).bump(3); }
  CHECK(q.total(0) == 3);
  CHECK(q.total(3) == 6);
  CHECK(q.total(1) == 0);
}

// Once armed, the first time a hook reaches shard 0: a process pushes e1 on shard 0, then
// migrates and pushes e2 on shard 1. `Self` names the hook (after_first_pass, after_look).
template <class Self>
struct MigrateOnce : ShardedQueueNoHooks {
  ShardedQueue<Event, Self>* q = nullptr;
  bool armed = false;
  void migrate(std::size_t shard) {
    if (!armed || shard != 0) return;
    armed = false;
    typename ShardedQueue<Event, Self>::Producer(*q, 0).push(at(5, 1, 0));
    typename ShardedQueue<Event, Self>::Producer(*q, 1).push(at(6, 1, 1));
  }
};

// The migration just after the refill's first pass staged shard 0, before that pass
// reaches shard 1: e2 is staged first.
struct MigrateDuringRefill : MigrateOnce<MigrateDuringRefill> {
  void after_first_pass(std::size_t shard) { migrate(shard); }
};

TEST_CASE("ShardedQueue: an item found by the catch-up holds back its successor found before it", "[sharded]") {
  ShardedQueue<Event, MigrateDuringRefill> q(2);
  q.hooks().q = &q;
  q.hooks().armed = true;
  Event buf[4];
  bool more = false;
  // e2 was staged by the first pass, e1 by the catch-up: e1 is not confirmed yet and e2
  // (later) waits for it.
  CHECK(q.pop(buf, 4, more) == 0);
  CHECK(more);
  CHECK(q.staged() == 2);
  REQUIRE(q.pop(buf, 4, more) == 2);
  CHECK(buf[0].function == 0);
  CHECK(buf[1].function == 1);
  CHECK_FALSE(more);
}

// Pushes one more item on shard 0, stamped like the one already there, between the
// refill's two passes: the catch-up finds it.
struct PushAlikeDuringRefill : ShardedQueueNoHooks {
  ShardedQueue<Event, PushAlikeDuringRefill>* q = nullptr;
  bool armed = false;
  void after_first_pass(std::size_t shard) {
    if (!armed || shard != 0) return;
    armed = false;
    ShardedQueue<Event, PushAlikeDuringRefill>::Producer(*q, 0).push(at(5, 1, 1));
  }
};

TEST_CASE("ShardedQueue: a confirmed item stamped like the watermark passes it", "[sharded]") {
  ShardedQueue<Event, PushAlikeDuringRefill> q(2);
  q.hooks().q = &q;
  ShardedQueue<Event, PushAlikeDuringRefill>::Producer(q, 0).push(at(5, 1, 0));
  // A later item of another process on shard 1: two shards hold items, so the pop
  // merges (a refill) and does not take the one-shard path.
  ShardedQueue<Event, PushAlikeDuringRefill>::Producer(q, 1).push(at(9, 2, 2));
  q.hooks().armed = true;
  Event buf[4];
  bool more = false;
  // The first item is confirmed, the second (found by the catch-up) sets the watermark
  // at the same time: nothing can precede the first, so it goes out now.
  REQUIRE(q.pop(buf, 4, more) == 1);
  CHECK(buf[0].function == 0);
  CHECK(more);
  CHECK(q.staged() == 2);  // the refill ran: the catch-up's item and shard 1's wait
  REQUIRE(q.pop(buf, 4, more) == 2);
  CHECK(buf[0].function == 1);
  CHECK(buf[1].function == 2);
  CHECK_FALSE(more);
}

// The migration just after the one-shard path's first look found shard 0 empty: that look
// then finds e2 on shard 1, which seems the only one with items, but e1 must come out
// first.
struct MigrateDuringLook : MigrateOnce<MigrateDuringLook> {
  void after_look(std::size_t shard) { migrate(shard); }
};

TEST_CASE("ShardedQueue: the one-shard path looks at the other shards again before it hands out", "[sharded]") {
  ShardedQueue<Event, MigrateDuringLook> q(2);
  q.hooks().q = &q;
  q.hooks().armed = true;
  Event buf[4];
  bool more = true;
  std::vector<std::uint64_t> order;
  for (int i = 0; i < 4 && more; ++i) {
    const std::size_t n = q.pop(buf, 4, more);
    for (std::size_t k = 0; k < n; ++k) order.push_back(buf[k].function);
  }
  CHECK(order == std::vector<std::uint64_t>{0, 1});
}

TEST_CASE("ShardedQueue: items of one shard only are handed out in its order without staging", "[sharded]") {
  Queue q(3);
  {
    Queue::Producer p(q, 1);
    for (std::uint64_t i = 0; i < 100; ++i) REQUIRE(p.push(at(static_cast<std::int64_t>(100 - i), 1, i)));
  }
  Event buf[64];
  bool more = false;
  REQUIRE(q.pop(buf, 64, more) == 64);
  CHECK(q.staged() == 0);
  CHECK(more);
  for (std::uint64_t i = 0; i < 64; ++i) CHECK(buf[i].function == i);
  CHECK(q.released(1) == 64);
  REQUIRE(q.pop(buf, 64, more) == 36);
  CHECK_FALSE(more);
  CHECK(buf[35].function == 99);
  CHECK(q.empty());
}

TEST_CASE("ShardedQueue: a pop stages about what it hands out, however long the queues", "[sharded]") {
  Queue q(2);
  {
    Queue::Producer p(q, 0);
    for (std::uint64_t i = 0; i < 10000; ++i) REQUIRE(p.push(at(static_cast<std::int64_t>(i), 1, i)));
  }
  {
    Queue::Producer p(q, 1);
    for (std::uint64_t i = 0; i < 10000; ++i) REQUIRE(p.push(at(static_cast<std::int64_t>(i), 2, i)));
  }
  Event buf[16];
  bool more = false;
  REQUIRE(q.pop(buf, 16, more) == 16);
  CHECK(more);
  CHECK(q.staged() <= 2 * 64);  // not the 20 000 pushed
  std::vector<Event> rest = pop_all(q);
  CHECK(rest.size() == 20000 - 16);
  CHECK(q.staged() == 0);
}

TEST_CASE("ShardedQueue: a partial pop leaves the rest staged, merged on the next pops", "[sharded]") {
  // (The catch-up's watermark needs a producer between the refill's two passes: the
  // migrating stress test below exercises it.)
  Queue q(2);
  {
    Queue::Producer p(q, 1);
    for (int i = 0; i < 10; ++i) REQUIRE(p.push(at(10 + i, 2, static_cast<std::uint64_t>(i))));
  }
  {
    Queue::Producer p(q, 0);
    for (int i = 0; i < 10; ++i) REQUIRE(p.push(at(i, 1, static_cast<std::uint64_t>(i))));
  }
  Event buf[4];
  bool more = false;
  REQUIRE(q.pop(buf, 4, more) == 4);
  CHECK(more);
  CHECK(buf[0].time_ns == 0);
  CHECK(buf[3].time_ns == 3);
  CHECK(q.staged() == 16);
  std::vector<Event> rest = pop_all(q);
  REQUIRE(rest.size() == 16);
  for (std::size_t i = 0; i < rest.size(); ++i) CHECK(rest[i].time_ns == static_cast<std::int64_t>(i + 4));
}

TEST_CASE("ShardedQueue: discard frees staged and queued items and counts them released", "[sharded]") {
  Queue q(2);
  {
    Queue::Producer p(q, 0);
    for (int i = 0; i < 50; ++i) REQUIRE(p.push(at(i, 1, 0, 300)));
  }
  Event buf[10];
  bool more = false;
  REQUIRE(q.pop(buf, 10, more) == 10);
  {
    Queue::Producer p(q, 1);
    for (int i = 0; i < 30; ++i) REQUIRE(p.push(at(100 + i, 2, 0, 300)));
  }
  std::size_t seen = 0;
  CHECK(q.discard([&](const Event& e) { seen += e.payload.size() == 300; }) == 70);
  CHECK(seen == 70);
  CHECK(q.released(0) == 50);
  CHECK(q.released(1) == 30);
  CHECK(q.pop(buf, 10, more) == 0);
  CHECK_FALSE(more);
}

// Processes as tokens passed between threads through a run queue under a mutex (as the
// VM's run queues order a migration): each thread owns one shard; the fallback shard's
// threads share theirs. A process's events carry its own count and a timestamp from a
// shared logical clock (strictly increasing); the consumer pops concurrently and checks
// that every process's events come out complete and in its order.
TEST_CASE("stress: processes migrating between shards come out in their own order", "[sharded][stress]") {
  constexpr std::size_t kShards = 3;
  constexpr std::size_t kFallbackThreads = 2;
  constexpr std::size_t kProcesses = 8;
  Queue q(kShards);

  struct Process {
    std::uint64_t pid;
    std::uint64_t next = 0;
  };
  std::vector<Process> processes;
  for (std::uint64_t i = 0; i < kProcesses; ++i) processes.push_back({i + 1});
  std::mutex run_queue_mutex;
  std::vector<Process*> run_queue;
  for (Process& p : processes) run_queue.push_back(&p);
  std::atomic<std::int64_t> clock{1};
  std::atomic<std::size_t> finished{0};
  std::atomic<bool> push_failed{false};  // Catch2's assertions are not for other threads

  auto scheduler = [&](std::size_t shard) {
    for (std::uint64_t turn = 0;; ++turn) {
      Process* p = nullptr;
      {
        std::lock_guard<std::mutex> lock(run_queue_mutex);
        if (finished.load() == kProcesses) return;
        if (!run_queue.empty()) {
          p = run_queue.back();  // LIFO now and then FIFO: processes keep moving
          run_queue.pop_back();
          if (turn % 2 && !run_queue.empty()) std::swap(p, run_queue.front());
        }
      }
      if (!p) {
        std::this_thread::yield();
        continue;
      }
      {
        Queue::Producer producer(q, shard);
        std::uint64_t burst = 1 + (p->pid + turn) % 5;
        for (std::uint64_t i = 0; i < burst && p->next < kEventsPerProcess; ++i) {
          std::int64_t t = clock.fetch_add(1);
          if (!producer.push(at(t, p->pid, p->next, p->next % 7 == 0 ? 150 : 4))) push_failed = true;
          producer.bump(0);
          ++p->next;
        }
      }
      std::lock_guard<std::mutex> lock(run_queue_mutex);
      if (p->next == kEventsPerProcess) {
        finished.fetch_add(1);
      } else {
        run_queue.push_back(p);
      }
    }
  };

  std::vector<std::uint64_t> expected(kProcesses + 1, 0);
  std::uint64_t popped = 0;
  bool in_order = true;
  std::int64_t last_time = 0;
  std::uint64_t time_inversions = 0;  // across processes: allowed, counted for the record
  std::thread consumer([&] {
    Event buf[64];
    bool more = true;
    while (more || finished.load() < kProcesses || popped < kProcesses * kEventsPerProcess) {
      std::size_t n = q.pop(buf, 64, more);
      for (std::size_t i = 0; i < n; ++i) {
        const Event& e = buf[i];
        if (e.function != expected[e.pid]) in_order = false;
        expected[e.pid] = e.function + 1;
        if (e.time_ns < last_time) ++time_inversions;
        last_time = e.time_ns;
        buf[i] = Event{};
      }
      popped += n;
      if (n == 0) std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (std::size_t s = 0; s < kShards; ++s) threads.emplace_back(scheduler, s);
  for (std::size_t i = 0; i < kFallbackThreads; ++i) threads.emplace_back(scheduler, q.fallback());
  for (std::thread& t : threads) t.join();
  consumer.join();

  CHECK_FALSE(push_failed);
  CHECK(in_order);
  CHECK(popped == kProcesses * kEventsPerProcess);
  for (std::uint64_t pid = 1; pid <= kProcesses; ++pid) CHECK(expected[pid] == kEventsPerProcess);
  CHECK(q.total(0) == kProcesses * kEventsPerProcess);
  CHECK(q.pushed() == kProcesses * kEventsPerProcess);
  CHECK(q.staged() == 0);
  INFO("time inversions across processes: " << time_inversions);
  SUCCEED();
}
