// Order: SessionCore hands each process's events out in its own order while processes
// move between the shards' threads (per-scheduler shards, issue 26), and the drop marks
// tell the consumer a process may have lost events.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "sanitized.hpp"
#include "session_core.hpp"

using namespace kino_trace;

namespace {

constexpr std::uint64_t kMigratingEvents = test::kSanitized ? 400'000 : 2'000'000;

Event from(std::uint64_t pid, std::uint64_t nth) {
  Event e;
  e.kind = EventKind::Call;
  e.pid = pid;
  e.module = nth;
  std::size_t size = nth % 16 == 0 ? 200 : nth % 24;  // now and then on the heap
  e.tag = size;  // the payload's size, for the consumer's check
  std::uint8_t* p = e.payload.extend(size);
  for (std::size_t i = 0; i < size; ++i) p[i] = static_cast<std::uint8_t>(pid * 13 + nth + i);
  return e;
}

bool payload_ok(const Event& e) {
  if (e.payload.size() != e.tag) return false;
  for (std::size_t i = 0; i < e.payload.size(); ++i)
    if (e.payload.data()[i] != static_cast<std::uint8_t>(e.pid * 13 + e.module + i)) return false;
  return true;
}

// The full path of one event from process `pid`, as the NIF runs it, on `shard` at
// time `t`.
Verdict offer(SessionCore& s, std::uint64_t pid, std::uint64_t nth, CommitResult* r = nullptr,
              std::size_t shard = SessionCore::kAnyThread, std::int64_t t = 0) {
  Verdict v = s.precheck(0, shard);
  if (v != Verdict::Accept) return v;
  v = s.admit(0, pid, shard);
  if (v != Verdict::Accept) return v;
  Event e = from(pid, nth);
  e.time_ns = t;
  CommitResult c = s.commit(std::move(e), shard);
  if (r) *r = c;
  return c.verdict;
}

std::vector<Event> drain_all(SessionCore& s) {
  std::vector<Event> got;
  std::vector<Event> buf(64);
  bool more = true;
  for (int idle = 0; more && idle < 1000;) {
    std::size_t n = s.drain(buf.data(), buf.size(), more);
    for (std::size_t i = 0; i < n; ++i) got.push_back(std::move(buf[i]));
    idle = n ? 0 : idle + 1;
  }
  return got;
}

}  // namespace

TEST_CASE("SessionCore: events of several shards come out merged by timestamp", "[session][order]") {
  SessionCore s(Limits{}, 0, 2);
  // Process 1 runs on shard 1 at times 10, 11, then moves to shard 0 (12, 13); process 2
  // on the fallback at 5 and 14.
  REQUIRE(offer(s, 2, 0, nullptr, SessionCore::kAnyThread, 5) == Verdict::Accept);
  REQUIRE(offer(s, 1, 0, nullptr, 1, 10) == Verdict::Accept);
  REQUIRE(offer(s, 1, 1, nullptr, 1, 11) == Verdict::Accept);
  REQUIRE(offer(s, 1, 2, nullptr, 0, 12) == Verdict::Accept);
  REQUIRE(offer(s, 1, 3, nullptr, 0, 13) == Verdict::Accept);
  REQUIRE(offer(s, 2, 1, nullptr, SessionCore::kAnyThread, 14) == Verdict::Accept);
  std::vector<Event> got = drain_all(s);
  REQUIRE(got.size() == 6);
  std::vector<std::int64_t> times;
  for (const Event& e : got) times.push_back(e.time_ns);
  CHECK(times == std::vector<std::int64_t>{5, 10, 11, 12, 13, 14});
  CHECK(got[0].shard == 2);
  CHECK(got[1].shard == 1);
  CHECK(got[3].shard == 0);
  Counters c = s.counters();
  CHECK(c.accepted == 6);
  CHECK(c.delivered == 6);
  CHECK(c.bytes_queued == 0);
}

TEST_CASE("SessionCore: a drop in trace() changes the drop mark of its process's next event", "[session][drops]") {
  Limits l;
  l.queue_events = 2;
  SessionCore s(l, 0);
  REQUIRE(offer(s, 7, 0) == Verdict::Accept);
  REQUIRE(offer(s, 8, 0) == Verdict::Accept);
  // Refused in enabled (precheck): the VM generates nothing, so nothing to mark.
  CHECK(offer(s, 7, 1) == Verdict::DropQueueFull);
  std::vector<Event> first = drain_all(s);
  REQUIRE(first.size() == 2);
  REQUIRE(offer(s, 7, 2) == Verdict::Accept);
  REQUIRE(offer(s, 8, 1) == Verdict::Accept);
  std::vector<Event> second = drain_all(s);
  REQUIRE(second.size() == 2);
  CHECK(second[0].drops == first[0].drops);

  // Dropped at admit() (a return: the VM reports returns without asking enabled).
  REQUIRE(offer(s, 7, 3) == Verdict::Accept);
  REQUIRE(offer(s, 8, 2) == Verdict::Accept);
  CHECK(s.admit(0, 7) == Verdict::DropQueueFull);
  std::vector<Event> third = drain_all(s);
  REQUIRE(third.size() == 2);
  REQUIRE(offer(s, 7, 4) == Verdict::Accept);
  REQUIRE(offer(s, 8, 3) == Verdict::Accept);
  std::vector<Event> fourth = drain_all(s);
  REQUIRE(fourth.size() == 2);
  CHECK(third[0].drops == second[0].drops);
  CHECK(fourth[0].drops != third[0].drops);  // pid 7 lost an event in between
  CHECK(fourth[1].drops == third[1].drops);  // pid 8 did not (another slot)

  // Dropped at commit() (over the byte cap) marks too.
  Limits b;
  b.queue_bytes = 1;  // an empty queue takes any one event; a second one is over
  SessionCore t(b, 0);
  REQUIRE(offer(t, 7, 0) == Verdict::Accept);
  REQUIRE(t.admit(0, 7) == Verdict::Accept);
  CHECK(t.commit(from(7, 1)).verdict == Verdict::DropQueueFull);
  std::vector<Event> one = drain_all(t);
  REQUIRE(offer(t, 7, 2) == Verdict::Accept);
  std::vector<Event> two = drain_all(t);
  REQUIRE(one.size() == 1);
  REQUIRE(two.size() == 1);
  CHECK(two[0].drops != one[0].drops);
}

// Processes (not threads) are what must stay in order: each of kProcs processes is run
// by whichever of kThreads producer threads takes it next from a run queue under a mutex
// (as the VM's run queues order a migration), so one process's consecutive events go to
// different shards. Each thread owns one shard, two more share the fallback. Timestamps
// come from a shared logical clock (strictly increasing). The consumer drains only when
// woken, and must see every process's events in its own order, all of them.
TEST_CASE("stress: processes moving between shards come out in their own order", "[stress][order]") {
  constexpr std::size_t kShards = 3;
  constexpr std::size_t kFallbackThreads = 2;
  constexpr std::size_t kProcs = 16;
  const std::uint64_t total = kMigratingEvents;
  Limits l;
  l.queue_events = 1u << 16;
  SessionCore s(l, 0, kShards);

  struct Proc {
    std::uint64_t pid;
    std::uint64_t next = 0;  // written only by the thread running it
  };
  std::vector<Proc> procs;
  for (std::uint64_t i = 0; i < kProcs; ++i) procs.push_back({i});
  std::mutex run_queue_mutex;
  std::vector<Proc*> run_queue;
  for (Proc& p : procs) run_queue.push_back(&p);
  std::uint64_t started = 0;  // under run_queue_mutex
  std::atomic<std::int64_t> clock{1};
  std::atomic<std::uint64_t> wakes{0};
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<bool> stop{false};

  // The consumer: woken by commit()'s wake_consumer (a counter standing for the
  // session's mailbox), then drains while `more`.
  std::uint64_t order_breaks = 0, bad_payloads = 0;
  std::vector<std::uint64_t> expect(kProcs, 0);
  std::thread consumer([&] {
    std::vector<Event> buf(256);
    std::uint64_t handled = 0;
    while (!stop.load(std::memory_order_acquire)) {
      if (wakes.load(std::memory_order_acquire) == handled) {
        std::this_thread::yield();
        continue;
      }
      handled = wakes.load(std::memory_order_acquire);
      bool more = true;
      while (more) {
        std::size_t n = s.drain(buf.data(), buf.size(), more);
        for (std::size_t i = 0; i < n; ++i) {
          const Event& e = buf[i];
          if (e.pid >= kProcs || e.module != expect[e.pid]) ++order_breaks;
          if (e.pid < kProcs) expect[e.pid] = e.module + 1;
          if (!payload_ok(e)) ++bad_payloads;
        }
        delivered.fetch_add(n, std::memory_order_release);
        if (n == 0 && more) std::this_thread::yield();
      }
    }
  });

  auto scheduler = [&](std::size_t shard) {
    for (std::uint64_t turn = 0;; ++turn) {
      Proc* p = nullptr;
      std::uint64_t burst = 0;
      {
        std::lock_guard<std::mutex> lock(run_queue_mutex);
        if (started >= total) return;
        if (!run_queue.empty()) {
          p = run_queue.back();  // LIFO now and then FIFO: processes keep moving
          run_queue.pop_back();
          if (turn % 2 && !run_queue.empty()) std::swap(p, run_queue.front());
          burst = std::min<std::uint64_t>(1 + (p->pid + turn) % 3, total - started);
          started += burst;
        }
      }
      if (!p) {
        std::this_thread::yield();
        continue;
      }
      for (std::uint64_t k = 0; k < burst; ++k) {
        CommitResult r;
        // lossless: a refused event is offered again
        while (offer(s, p->pid, p->next, &r, shard, clock.fetch_add(1)) != Verdict::Accept) std::this_thread::yield();
        if (r.wake_consumer) wakes.fetch_add(1, std::memory_order_release);
        ++p->next;
      }
      std::lock_guard<std::mutex> lock(run_queue_mutex);
      run_queue.push_back(p);
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kShards; ++t) threads.emplace_back(scheduler, t);
  for (std::size_t t = 0; t < kFallbackThreads; ++t) threads.emplace_back(scheduler, SessionCore::kAnyThread);
  for (auto& t : threads) t.join();

  Counters c = s.counters();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (delivered.load(std::memory_order_acquire) < c.accepted && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop.store(true, std::memory_order_release);
  consumer.join();

  c = s.counters();
  WARN("migrating: " << c.accepted << " events, " << c.wakeups << " wake-ups");
  CHECK(c.accepted == total);
  CHECK(delivered.load() == c.accepted);  // no event left behind without a wake-up
  CHECK(order_breaks == 0);
  CHECK(bad_payloads == 0);
  std::uint64_t sum = 0;
  for (const Proc& p : procs) sum += p.next;
  CHECK(sum == total);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(c.accepted == c.delivered + c.queued + c.discarded);
}

// Events from three shards, drained in part, then closed: what the consumer had staged
// is discarded and counted like what was still queued.
TEST_CASE("SessionCore: close frees the events staged for the merge, books exact", "[session][close][order]") {
  SessionCore s(Limits{}, 0, 2);
  std::uint64_t refused = 0;
  std::int64_t t = 0;
  auto burst = [&](std::uint64_t pid, std::uint64_t n, std::size_t shard) {
    std::thread th([&] {  // no Catch2 assertion off the main thread
      for (std::uint64_t i = 0; i < n; ++i) refused += offer(s, pid, i, nullptr, shard, ++t) != Verdict::Accept;
    });
    th.join();
  };
  burst(1, 300, 0);
  burst(2, 300, 1);
  burst(3, 300, SessionCore::kAnyThread);
  REQUIRE(refused == 0);
  std::vector<Event> buf(100);
  bool more = false;
  std::size_t n = s.drain(buf.data(), buf.size(), more);
  CHECK(n == 100);
  CHECK(more);
  for (std::size_t i = 0; i < n; ++i) CHECK(buf[i].time_ns == static_cast<std::int64_t>(i + 1));
  s.close();
  Counters c = s.counters();
  CHECK(c.accepted == 900);
  CHECK(c.delivered == n);
  CHECK(c.discarded == 900 - n);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(s.drain(buf.data(), buf.size(), more) == 0);
  CHECK_FALSE(more);
}
