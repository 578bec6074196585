// SessionCore when its queue cannot allocate: a shard's push finds no block, which must be
// a counted drop, never an event counted as accepted that no one will deliver, nor
// something the consumer waits for forever.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "session_core.hpp"
#include "spsc_queue.hpp"

using namespace kino_trace;

namespace {

constexpr std::int64_t kEpoch = 7'000'000'000;

// A block as SpscQueue asks for it: aligned to `align` (a block's size is a multiple of
// its alignment, as aligned_alloc wants).
void* aligned_block(std::size_t size, std::size_t align) { return std::aligned_alloc(align, size); }

// Tiny blocks (2 events, so a few events need a new block) and an allocator that fails
// while `fail` is set.
constexpr std::size_t kTinyBlock = 2;
struct FailingAlloc {
  static inline std::atomic<bool> fail{false};
  static void* allocate(std::size_t size, std::size_t align) { return fail.load() ? nullptr : aligned_block(size, align); }
  static void deallocate(void* ptr, std::size_t) { std::free(ptr); }
};

using Core = BasicSessionCore<kTinyBlock, FailingAlloc>;

// Fails the queue's allocations while in scope.
struct NoMemory {
  NoMemory() { FailingAlloc::fail = true; }
  ~NoMemory() { FailingAlloc::fail = false; }
  NoMemory(const NoMemory&) = delete;
  NoMemory& operator=(const NoMemory&) = delete;
};

Limits roomy() {
  Limits l;
  l.queue_events = 1u << 20;
  l.queue_bytes = std::uint64_t{1} << 32;
  return l;
}

// The NIF's path for one event: precheck (enabled), admit, commit (trace).
CommitResult offer(Core& s, std::uint64_t id, std::size_t shard = Core::kAnyThread) {
  CommitResult r;
  r.verdict = s.precheck(kEpoch);
  if (r.verdict != Verdict::Accept) return r;
  r.verdict = s.admit(kEpoch, id, shard);
  if (r.verdict != Verdict::Accept) return r;
  Event e;
  e.kind = EventKind::Call;
  e.pid = id;
  e.module = id;  // which offer this was
  return s.commit(std::move(e), shard);
}

// Drains until the session says nothing remains, at most `rounds` times (a session
// that keeps saying `more` forever fails the test instead of hanging it).
std::vector<Event> drain_until_done(Core& s, bool& more, int rounds = 1000) {
  std::vector<Event> got;
  Event buf[8];
  more = true;
  for (int i = 0; i < rounds && more; ++i) {
    std::size_t n = s.drain(buf, 8, more);
    for (std::size_t k = 0; k < n; ++k) got.push_back(std::move(buf[k]));
  }
  return got;
}

}  // namespace

TEST_CASE("SessionCore: an enqueue that cannot allocate is a counted drop, and later events still flow",
          "[session][alloc]") {
  Core s(roomy(), kEpoch);
  std::vector<std::uint64_t> accepted;
  std::uint64_t no_memory = 0;
  const std::uint64_t offered = 60;
  for (std::uint64_t id = 0; id < offered; ++id) {
    // Events 20 to 39 find no memory: each needs a new block (or would, after the
    // first failure), as the consumer frees none meanwhile.
    std::unique_ptr<NoMemory> guard = id >= 20 && id < 40 ? std::make_unique<NoMemory>() : nullptr;
    CommitResult r = offer(s, id);
    if (r.verdict == Verdict::Accept) {
      accepted.push_back(id);
    } else {
      CHECK(r.verdict == Verdict::DropNoMemory);
      ++no_memory;
    }
  }
  REQUIRE(no_memory > 0);             // the allocator did fail
  REQUIRE(accepted.size() >= 40);     // events before and after the failures were taken

  Counters c = s.counters();
  CHECK(c.accepted == accepted.size());
  CHECK(c.dropped_no_memory == no_memory);
  CHECK(c.accepted + c.dropped_no_memory == offered);
  CHECK(c.queued == accepted.size());
  CHECK(c.bytes_queued == accepted.size() * sizeof(Event));

  bool more = true;
  std::vector<Event> got = drain_until_done(s, more);
  CHECK_FALSE(more);
  REQUIRE(got.size() == accepted.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i].module == accepted[i]);
  c = s.counters();
  CHECK(c.delivered == accepted.size());
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(c.accepted == c.delivered + c.queued + c.discarded);
}

TEST_CASE("SessionCore: a failed push does not wake the idle consumer, and the next event does",
          "[session][alloc][wake]") {
  // Shard 0 takes the first events; the fallback shard's first push then needs its first
  // block (both shard queues allocate a shard's blocks on demand; moodycamel then keeps
  // them, so a drained shard would reuse its block instead).
  Core s(roomy(), kEpoch, 1);
  REQUIRE(offer(s, 1, 0).verdict == Verdict::Accept);
  bool more = true;
  REQUIRE(drain_until_done(s, more).size() == 1);
  REQUIRE_FALSE(more);  // the consumer is idle: the next event must wake it
  REQUIRE(offer(s, 2, 0).verdict == Verdict::Accept);
  REQUIRE(drain_until_done(s, more).size() == 1);
  REQUIRE_FALSE(more);

  CommitResult lost;
  {
    NoMemory guard;
    lost = offer(s, 3);
  }
  CHECK(lost.verdict == Verdict::DropNoMemory);
  CHECK_FALSE(lost.wake_consumer);  // nothing to drain: no wake-up

  CommitResult next = offer(s, 4);
  REQUIRE(next.verdict == Verdict::Accept);
  CHECK(next.wake_consumer);  // the consumer still sleeps: this one wakes it
  std::vector<Event> got = drain_until_done(s, more);
  REQUIRE(got.size() == 1);
  CHECK(got[0].module == 4);
  CHECK_FALSE(more);
  Counters c = s.counters();
  CHECK(c.accepted == 3);
  CHECK(c.delivered == 3);
  CHECK(c.dropped_no_memory == 1);
  CHECK(c.queued == 0);
  CHECK(c.wakeups == 3);
}

TEST_CASE("SessionCore: a failed enqueue keeps its max_events ticket, and the limit still closes the session",
          "[session][alloc][limits]") {
  Limits l = roomy();
  l.limit = 4;
  Core s(l, kEpoch);
  REQUIRE(offer(s, 1).verdict == Verdict::Accept);
  REQUIRE(offer(s, 2).verdict == Verdict::Accept);  // the first block is full
  CommitResult lost;
  {
    NoMemory guard;
    lost = offer(s, 3);
  }
  CHECK(lost.verdict == Verdict::DropNoMemory);
  CommitResult last = offer(s, 4);
  CHECK(last.verdict == Verdict::Accept);
  CHECK(last.limit_reached);
  CHECK(s.closed());
  CHECK(offer(s, 5).verdict == Verdict::DropClosed);
  bool more = true;
  std::vector<Event> got = drain_until_done(s, more);
  REQUIRE(got.size() == 3);
  CHECK(got[2].module == 4);
  CHECK_FALSE(more);
  Counters c = s.counters();
  CHECK(c.accepted == 3);
  CHECK(c.dropped_no_memory == 1);
  CHECK(c.limit_reached);
}

namespace {

// Once armed, every third allocation of a block fails.
struct FlakyAlloc {
  static inline std::atomic<bool> armed{false};
  static inline std::atomic<std::uint64_t> calls{0};
  static void* allocate(std::size_t size, std::size_t align) {
    return armed.load() && calls.fetch_add(1) % 3 == 2 ? nullptr : aligned_block(size, align);
  }
  static void deallocate(void* ptr, std::size_t) { std::free(ptr); }
};

}  // namespace

TEST_CASE("stress: producers whose enqueues fail now and then: every event delivered or counted, in order",
          "[stress][alloc]") {
  using Flaky = BasicSessionCore<kTinyBlock, FlakyAlloc>;
  constexpr std::uint64_t kProducers = 4;
  constexpr std::uint64_t kEach = 20000;
  FlakyAlloc::calls = 0;
  Flaky s(roomy(), kEpoch, kProducers - 2);  // two single-producer shards, and two producers share the fallback
  FlakyAlloc::armed = true;
  std::atomic<std::uint64_t> running{kProducers};
  std::vector<std::uint64_t> taken(kProducers, 0);
  std::vector<std::thread> producers;
  for (std::uint64_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      const std::size_t shard = p < kProducers - 2 ? p : Flaky::kAnyThread;
      for (std::uint64_t i = 0; i < kEach; ++i) {
        if (s.admit(kEpoch, p, shard) != Verdict::Accept) continue;
        Event e;
        e.pid = p;
        e.module = p;
        e.function = i;
        e.time_ns = static_cast<std::int64_t>(i);
        if (s.commit(std::move(e), shard).verdict == Verdict::Accept) ++taken[p];
      }
      running.fetch_sub(1);
    });
  }
  // The consumer, pausing now and then so the queue grows and needs new blocks.
  std::vector<std::uint64_t> got(kProducers, 0);
  std::vector<std::int64_t> last(kProducers, -1);
  bool ordered = true;
  Event buf[64];
  bool more = true;
  for (std::uint64_t round = 0; round < 10'000'000; ++round) {
    bool done = running.load() == 0;  // read before draining: the drain sees all they did
    std::size_t n = s.drain(buf, 64, more);
    for (std::size_t k = 0; k < n; ++k) {
      std::uint64_t p = buf[k].module;
      ordered = ordered && static_cast<std::int64_t>(buf[k].function) > last[p];
      last[p] = static_cast<std::int64_t>(buf[k].function);
      ++got[p];
    }
    if (done && !more) break;
    if (round % 512 == 511) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (auto& t : producers) t.join();
  FlakyAlloc::armed = false;
  CHECK_FALSE(more);
  CHECK(ordered);
  CHECK(got == taken);
  Counters c = s.counters();
  CHECK(c.dropped_no_memory > 0);
  CHECK(c.accepted + c.dropped_no_memory == kProducers * kEach);
  CHECK(c.accepted == c.delivered);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
}

namespace {

// The queue's allocator parks the calling thread while `hold` is set: a producer that
// needs a block stops inside its push, after it checked the session open, until the
// test lets it go.
struct ParkingAlloc {
  static inline std::atomic<bool> hold{false};
  static inline std::atomic<int> parked{0};
  static void* allocate(std::size_t size, std::size_t align) {
    if (hold.load()) {
      parked.fetch_add(1);
      while (hold.load()) std::this_thread::yield();
      parked.fetch_sub(1);
    }
    return aligned_block(size, align);
  }
  static void deallocate(void* ptr, std::size_t) { std::free(ptr); }
};

}  // namespace

TEST_CASE("SessionCore: close() waits for an event in flight, then discards it", "[session][close]") {
  BasicSessionCore<kTinyBlock, ParkingAlloc> s(roomy(), kEpoch, 1);
  // Two events on shard 1 (the fallback); shard 0 has no block yet: its first push
  // allocates (and a drained shard may reuse its block, so it is a fresh one).
  for (int i = 0; i < 2; ++i) {
    REQUIRE(s.admit(kEpoch, 1, 1) == Verdict::Accept);
    REQUIRE(s.commit(Event{}, 1).verdict == Verdict::Accept);
  }
  bool more = true;
  Event out[4];
  REQUIRE(s.drain(out, 4, more) == 2);
  ParkingAlloc::hold = true;
  CommitResult r;
  std::thread producer([&] {
    Verdict v = s.admit(kEpoch, 1, 0);
    Event e;
    e.kind = EventKind::Call;
    e.pid = 1;
    r = v == Verdict::Accept ? s.commit(std::move(e), 0) : CommitResult{v, false, false};
  });
  while (ParkingAlloc::parked.load() == 0) std::this_thread::yield();
  s.shut();
  // The event saw the session open and its push is under way: it will be queued, so
  // the session is not done closing until it is, and then it is discarded.
  CHECK_FALSE(s.discard(100));
  CHECK_FALSE(s.discard(100));
  CHECK(s.counters().queued == 0);  // not pushed yet, so not accepted yet
  ParkingAlloc::hold = false;
  producer.join();
  CHECK(r.verdict == Verdict::Accept);
  int calls = 0;
  while (!s.discard(100)) REQUIRE(++calls < 1000);
  Counters c = s.counters();
  CHECK(c.accepted == 3);
  CHECK(c.delivered == 2);
  CHECK(c.discarded == 1);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(c.dropped_closed == 0);
  CHECK(s.drain(out, 4, more) == 0);
  CHECK_FALSE(more);
}

namespace {

// Records what SpscQueue asks for: every block's alignment and where it went.
struct RecordingAlloc {
  static inline std::vector<std::size_t> aligns;
  static inline std::vector<std::uintptr_t> blocks;
  static void* allocate(std::size_t size, std::size_t align) {
    aligns.push_back(align);
    void* p = aligned_block(size, align);
    blocks.push_back(reinterpret_cast<std::uintptr_t>(p));
    return p;
  }
  static void deallocate(void* ptr, std::size_t align) {
    aligns.push_back(align);
    std::free(ptr);
  }
};

}  // namespace

TEST_CASE("SpscQueue: blocks are allocated line-aligned, so the slots of a line-aligned event are", "[queue][alloc]") {
  RecordingAlloc::aligns.clear();
  RecordingAlloc::blocks.clear();
  {
    SpscQueue<Event, kTinyBlock, RecordingAlloc> q;
    for (std::uint64_t i = 0; i < 7; ++i) {  // four blocks of two
      Event e;
      e.pid = i;
      e.payload.append(&i, sizeof i);
      REQUIRE(q.push(std::move(e)));
    }
    Event out[8];
    REQUIRE(q.pop(out, 8) == 7);
    for (std::uint64_t i = 0; i < 7; ++i) {
      CHECK(out[i].pid == i);
      CHECK(out[i].payload.size() == sizeof i);
    }
  }
  REQUIRE(RecordingAlloc::blocks.size() >= 4);
  for (std::uintptr_t b : RecordingAlloc::blocks) CHECK(b % 64 == 0);
  for (std::size_t a : RecordingAlloc::aligns) CHECK(a >= 64);  // allocations and frees alike
}
