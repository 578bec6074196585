// Admission order: ReorderBuffer on its own, then SessionCore handing events out in
// admission order (seq) while processes move between producer threads, and the drop
// marks that tell the consumer a process may have lost events.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include "reorder_buffer.hpp"
#include "sanitized.hpp"
#include "session_core.hpp"

using namespace kino_trace;

namespace {

constexpr std::uint64_t kMigratingEvents = test::kSanitized ? 400'000 : 2'000'000;

Event numbered(std::uint64_t seq, std::size_t payload = 0) {
  Event e;
  e.seq = seq;
  e.module = seq;
  std::uint8_t* p = e.payload.extend(payload);
  for (std::size_t i = 0; i < payload; ++i) p[i] = static_cast<std::uint8_t>(seq + i);
  return e;
}

Event from(std::uint64_t pid, std::uint64_t nth) {
  Event e;
  e.kind = EventKind::Call;
  e.pid = pid;
  e.module = nth;
  std::size_t size = nth % 16 == 0 ? 200 : nth % 24;  // now and then on the heap
  e.arity = static_cast<std::uint32_t>(size);
  std::uint8_t* p = e.payload.extend(size);
  for (std::size_t i = 0; i < size; ++i) p[i] = static_cast<std::uint8_t>(pid * 13 + nth + i);
  return e;
}

bool payload_ok(const Event& e) {
  if (e.payload.size() != e.arity) return false;
  for (std::size_t i = 0; i < e.payload.size(); ++i)
    if (e.payload.data()[i] != static_cast<std::uint8_t>(e.pid * 13 + e.module + i)) return false;
  return true;
}

// The full path of one event from process `pid`, as the NIF runs it.
Verdict offer(SessionCore& s, std::uint64_t pid, std::uint64_t nth, CommitResult* r = nullptr) {
  Verdict v = s.precheck(0);
  if (v != Verdict::Accept) return v;
  v = s.admit(0, pid);
  if (v != Verdict::Accept) return v;
  CommitResult c = s.commit(from(pid, nth));
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

TEST_CASE("ReorderBuffer: hands out consecutive numbers only, whatever the arrival order", "[reorder]") {
  ReorderBuffer buffer;
  CHECK(buffer.empty());
  CHECK_FALSE(buffer.ready());
  for (std::uint64_t seq : {5, 3, 4, 2}) buffer.put(numbered(seq));
  CHECK(buffer.size() == 4);
  CHECK_FALSE(buffer.ready());  // 0 and 1 missing
  buffer.put(numbered(0));
  REQUIRE(buffer.ready());
  CHECK(buffer.take().seq == 0);
  CHECK_FALSE(buffer.ready());
  buffer.skip();  // 1 handed out directly
  std::vector<std::uint64_t> out;
  while (buffer.ready()) out.push_back(buffer.take().seq);
  CHECK(out == std::vector<std::uint64_t>{2, 3, 4, 5});
  CHECK(buffer.empty());
  CHECK(buffer.next() == 6);
}

TEST_CASE("ReorderBuffer: grows past its size with payloads intact, trims when empty", "[reorder]") {
  ReorderBuffer buffer;
  const std::uint64_t n = 20'000;
  for (std::uint64_t seq = n; seq-- > 1;) buffer.put(numbered(seq, seq % 7 == 0 ? 300 : seq % 50));
  CHECK(buffer.size() == n - 1);
  CHECK(buffer.capacity() >= n - 1);
  buffer.put(numbered(0, 3));
  for (std::uint64_t seq = 0; seq < n; ++seq) {
    REQUIRE(buffer.ready());
    Event e = buffer.take();
    REQUIRE(e.seq == seq);
    std::size_t size = seq == 0 ? 3 : seq % 7 == 0 ? 300 : seq % 50;
    REQUIRE(e.payload.size() == size);
    for (std::size_t i = 0; i < size; ++i) REQUIRE(e.payload.data()[i] == static_cast<std::uint8_t>(seq + i));
  }
  buffer.trim();
  CHECK(buffer.capacity() == 0);
}

TEST_CASE("ReorderBuffer: clear frees what waits for a gap and moves past it", "[reorder]") {
  ReorderBuffer buffer;
  for (std::uint64_t seq : {1, 2, 7}) buffer.put(numbered(seq, 400));
  std::size_t seen = 0;
  buffer.clear([&](const Event& e) { seen += e.payload.size(); });
  CHECK(seen == 1200);
  CHECK(buffer.empty());
  CHECK(buffer.next() == 8);
}

TEST_CASE("SessionCore: events are numbered in admission order", "[session][order]") {
  SessionCore s(Limits{}, 0);
  for (std::uint64_t i = 0; i < 100; ++i) REQUIRE(offer(s, 1, i) == Verdict::Accept);
  std::vector<Event> got = drain_all(s);
  REQUIRE(got.size() == 100);
  for (std::uint64_t i = 0; i < 100; ++i) CHECK(got[i].seq == i);
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
// by whichever of kThreads producer threads takes it next, as the VM moves processes
// between schedulers, so one process's consecutive events go into different producer
// sub-queues. The consumer drains only when woken, and must see every process's
// events in its own order, and the numbers (seq) dense and increasing.
TEST_CASE("stress: processes moving between producer threads come out in their own order", "[stress][order]") {
  constexpr int kThreads = 4;
  constexpr std::size_t kProcs = 16;
  const std::uint64_t total = kMigratingEvents;
  Limits l;
  l.queue_events = 1u << 16;
  SessionCore s(l, 0);

  struct Proc {
    std::atomic<bool> busy{false};
    std::uint64_t next = 0;  // written only by the thread holding `busy`
  };
  std::vector<Proc> procs(kProcs);
  std::atomic<std::uint64_t> claimed{0};
  std::atomic<std::uint64_t> wakes{0};
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<bool> stop{false};

  // The consumer: woken by commit()'s wake_consumer (a counter standing for the
  // session's mailbox), then drains while `more`.
  std::uint64_t next_seq = 0, seq_breaks = 0, order_breaks = 0, bad_payloads = 0;
  std::size_t max_buffer = 0;
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
        max_buffer = std::max(max_buffer, s.reordering());
        for (std::size_t i = 0; i < n; ++i) {
          const Event& e = buf[i];
          if (e.seq != next_seq) ++seq_breaks;
          next_seq = e.seq + 1;
          if (e.pid >= kProcs || e.module != expect[e.pid]) ++order_breaks;
          if (e.pid < kProcs) expect[e.pid] = e.module + 1;
          if (!payload_ok(e)) ++bad_payloads;
        }
        delivered.fetch_add(n, std::memory_order_release);
        if (n == 0 && more) std::this_thread::yield();
      }
    }
  });

  auto producer = [&](unsigned seed) {
    std::uint64_t x = seed * 2654435761u + 1;
    for (;;) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      std::size_t p = (x >> 33) % kProcs;
      if (procs[p].busy.exchange(true, std::memory_order_acquire)) continue;  // running elsewhere
      if (claimed.fetch_add(1, std::memory_order_relaxed) >= total) {
        procs[p].busy.store(false, std::memory_order_release);
        return;
      }
      // A few events in a row on this thread, then the process moves on.
      for (int k = 0; k < 1 + static_cast<int>((x >> 20) % 3); ++k) {
        CommitResult r;
        while (offer(s, p, procs[p].next, &r) != Verdict::Accept) std::this_thread::yield();  // lossless
        if (r.wake_consumer) wakes.fetch_add(1, std::memory_order_release);
        ++procs[p].next;
        if (k > 0) claimed.fetch_add(1, std::memory_order_relaxed);
      }
      procs[p].busy.store(false, std::memory_order_release);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(producer, static_cast<unsigned>(t + 1));
  for (auto& t : threads) t.join();

  Counters c = s.counters();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (delivered.load(std::memory_order_acquire) < c.accepted && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop.store(true, std::memory_order_release);
  consumer.join();

  c = s.counters();
  WARN("migrating: " << c.accepted << " events, " << c.wakeups << " wake-ups, at most " << max_buffer
                     << " held back for order");
  CHECK(delivered.load() == c.accepted);  // no event left behind without a wake-up
  CHECK(seq_breaks == 0);
  CHECK(order_breaks == 0);
  CHECK(bad_payloads == 0);
  CHECK(next_seq == c.accepted);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(c.accepted == c.delivered + c.queued + c.discarded);
  CHECK(max_buffer <= l.queue_events);
}

// Events from two producer threads, drained in part, then closed: what waited in the
// buffer is discarded and counted like what was still queued.
TEST_CASE("SessionCore: close frees the events held back for order, books exact", "[session][close][order]") {
  SessionCore s(Limits{}, 0);
  std::uint64_t refused = 0;
  auto burst = [&](std::uint64_t pid, std::uint64_t n) {
    std::thread t([&] {  // no Catch2 assertion off the main thread
      for (std::uint64_t i = 0; i < n; ++i) refused += offer(s, pid, i) != Verdict::Accept;
    });
    t.join();
  };
  burst(1, 300);
  burst(2, 300);
  burst(1, 300);
  REQUIRE(refused == 0);
  std::vector<Event> buf(100);
  bool more = false;
  std::size_t n = s.drain(buf.data(), buf.size(), more);
  CHECK(more);
  for (std::size_t i = 0; i < n; ++i) CHECK(buf[i].seq == i);
  s.close();
  Counters c = s.counters();
  CHECK(c.accepted == 900);
  CHECK(c.delivered == n);
  CHECK(c.discarded == 900 - n);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(s.reordering() == 0);
  CHECK(s.drain(buf.data(), buf.size(), more) == 0);
  CHECK_FALSE(more);
}
