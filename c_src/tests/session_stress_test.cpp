// SessionCore under concurrency: several producer threads (the traced processes on their
// schedulers) and one consumer (the session process) that drains only when woken, the
// way the real session does. Every event is delivered exactly once or counted as dropped.
//
// Sizes scale with KINO_TRACE_STRESS_EVENTS (total events of the main scenario); the
// default is smaller under sanitizers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <functional>
#include <thread>
#include <vector>

#include "sanitized.hpp"
#include "session_core.hpp"

using namespace kino_trace;

namespace {

constexpr int kProducers = 4;
constexpr std::int64_t kEpoch = 1'000'000;

std::uint64_t stress_events() {
  if (const char* env = std::getenv("KINO_TRACE_STRESS_EVENTS")) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(env, &end, 10);
    if (end != env && v >= kProducers) return v;
  }
#ifdef KINO_TRACE_TEST_SANITIZED
  return 2'000'000;
#else
  return 8'000'000;
#endif
}

std::int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Payload bytes are derived from (producer, seq) so the consumer can check them.
std::uint8_t payload_byte(std::uint64_t producer, std::uint64_t seq, std::size_t i) {
  return static_cast<std::uint8_t>(producer * 31 + seq * 7 + i);
}

Event make_event(std::uint64_t producer, std::uint64_t seq) {
  Event e;
  e.kind = EventKind::Call;
  e.pid = producer;
  e.module = seq;
  // Mostly inline payloads, every 16th on the heap.
  std::size_t size = seq % 16 == 0 ? 300 + seq % 200 : seq % 40;
  e.tag = size;  // the payload's size, for the consumer's check
  std::uint8_t* p = e.payload.extend(size);
  for (std::size_t i = 0; i < size; ++i) p[i] = payload_byte(producer, seq, i);
  return e;
}

// The session process's mailbox: commit() asking to wake the consumer is an enif_send.
class Mailbox {
 public:
  void send() {
    {
      std::lock_guard<std::mutex> lock(m_);
      ++pending_;
      ++sent_;
    }
    cv_.notify_one();
  }
  // Blocks for the next message; false once stopped with nothing pending. `recheck`:
  // also true, with no message taken, after a millisecond without one (the session's
  // drain a moment after its queue went to sleep: see SessionCore's header, "Wake-up").
  bool receive(bool recheck = false) {
    std::unique_lock<std::mutex> lock(m_);
    auto ready = [&] { return pending_ > 0 || stopped_; };
    if (recheck) {
      if (!cv_.wait_for(lock, std::chrono::milliseconds(1), ready)) return true;
    } else {
      cv_.wait(lock, ready);
    }
    if (pending_ == 0) return false;
    --pending_;
    return true;
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stopped_ = true;
    }
    cv_.notify_one();
  }
  std::uint64_t sent() {
    std::lock_guard<std::mutex> lock(m_);
    return sent_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::uint64_t pending_ = 0;
  std::uint64_t sent_ = 0;
  bool stopped_ = false;
};

// What the consumer saw. Written by the consumer thread only, read after join().
struct Seen {
  std::vector<std::uint64_t> count = std::vector<std::uint64_t>(kProducers, 0);
  std::vector<std::uint64_t> next_min = std::vector<std::uint64_t>(kProducers, 0);  // seqs only grow
  std::uint64_t out_of_order = 0;
  std::uint64_t gaps = 0;
  std::uint64_t bad_payloads = 0;
  std::uint64_t bad_producers = 0;
  std::uint64_t batches = 0;
  std::uint64_t empty_wakeups = 0;
  std::uint64_t max_batch = 0;
};

class Consumer {
 public:
  // `ready`: the consumer drains nothing until it returns true (e.g. until the queue has
  // overflowed once), so a test does not depend on which thread the OS runs first.
  Consumer(SessionCore& s, Mailbox& mb, std::size_t batch, std::uint64_t close_after = 0,
           std::function<bool()> ready = [] { return true; })
      : s_(s), mb_(mb), batch_(batch), close_after_(close_after), ready_(std::move(ready)), thread_([this] { run(); }) {}
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;
  ~Consumer() { stop(); }

  void stop() {
    if (thread_.joinable()) {
      mb_.stop();
      thread_.join();
    }
  }
  std::uint64_t delivered() const { return delivered_.load(std::memory_order_acquire); }
  const Seen& seen() const { return seen_; }  // after stop()

 private:
  void run() {
    std::vector<Event> buf(batch_);
    while (!ready_()) std::this_thread::yield();
    bool recheck = false;
    while (mb_.receive(recheck)) {
      if (closed_) continue;  // a closed session drains no more, as the real one is gone
      const bool rechecking = recheck;
      bool more = true;
      bool got_any = false;
      while (more) {  // drain until the core says there is nothing left to be told about
        std::size_t n = s_.drain(buf.data(), buf.size(), more, recheck);
        if (n == 0) {
          if (more) std::this_thread::yield();  // counted but not yet visible: try again
          continue;
        }
        got_any = true;
        ++seen_.batches;
        seen_.max_batch = std::max<std::uint64_t>(seen_.max_batch, n);
        for (std::size_t i = 0; i < n; ++i) check(buf[i]);
        delivered_.fetch_add(n, std::memory_order_release);
        if (close_after_ && !closed_ && delivered() >= close_after_) {
          s_.close();
          closed_ = true;
          more = false;
          recheck = false;
        }
      }
      if (!got_any && !rechecking) ++seen_.empty_wakeups;
    }
  }

  void check(const Event& e) {
    if (e.pid >= kProducers || e.kind != EventKind::Call) {
      ++seen_.bad_producers;
      return;
    }
    std::size_t p = e.pid;
    std::uint64_t seq = e.module;
    if (seq < seen_.next_min[p]) ++seen_.out_of_order;
    if (seq > seen_.next_min[p]) ++seen_.gaps;
    seen_.next_min[p] = seq + 1;
    ++seen_.count[p];
    bool ok = e.payload.size() == e.tag;
    for (std::size_t i = 0; ok && i < e.payload.size(); ++i) ok = e.payload.data()[i] == payload_byte(p, seq, i);
    if (!ok) ++seen_.bad_payloads;
  }

  SessionCore& s_;
  Mailbox& mb_;
  std::size_t batch_;
  std::uint64_t close_after_;
  bool closed_ = false;
  std::function<bool()> ready_;
  Seen seen_;
  std::atomic<std::uint64_t> delivered_{0};
  std::thread thread_;  // last: starts once everything above exists
};

// What one producer did.
struct Tally {
  std::uint64_t offered = 0;  // attempts that ended in a verdict (abandoned ones excluded)
  std::uint64_t verdicts[5] = {0, 0, 0, 0, 0};
  std::uint64_t wakes = 0;
  std::uint64_t limit_signals = 0;
};

enum class Mode { Lossless, Lossy, UntilClosed };

// One producer: offers `count` events like the VM would (enabled, then trace), on its
// own shard (producer p on shard p, as scheduler p + 1 would be). Lossless
// mode waits for room (peek) and retries the same event until it is accepted, so the
// consumer must see every sequence number; lossy mode is exactly the VM; UntilClosed is
// lossy and keeps going until the session is closed, then offers 2000 more.
void produce(SessionCore& s, Mailbox& mb, std::uint64_t producer, std::uint64_t count, Mode mode, bool real_time,
             std::atomic<int>& go, Tally& t) {
  while (go.load(std::memory_order_acquire) == 0) std::this_thread::yield();
  std::uint64_t last_abandoned = ~std::uint64_t{0};
  std::uint64_t after_close = 0;
  const std::size_t shard = producer;
  for (std::uint64_t seq = 0;;) {
    if (seq >= count && (mode != Mode::UntilClosed || after_close >= 2000)) break;
    if (mode == Mode::UntilClosed && s.closed()) ++after_close;
    std::int64_t now = real_time ? mono_ns() : kEpoch;
    if (mode == Mode::Lossless && s.peek(now, shard) != Verdict::Accept) {
      std::this_thread::yield();
      continue;
    }
    Verdict v = s.precheck(now, shard);
    if (v == Verdict::Accept) {
      v = s.admit(now, producer, shard);
      if (v == Verdict::Accept) {
        if (seq % 97 == 13 && last_abandoned != seq) {  // now and then encoding fails: abandon, retry once
          s.abandon(shard);
          last_abandoned = seq;
          continue;
        }
        Event e = make_event(producer, seq);  // encoding takes a while: close() may run meanwhile
        if (mode == Mode::UntilClosed && seq % 8 == 0) std::this_thread::yield();
        CommitResult r = s.commit(std::move(e), shard);
        v = r.verdict;
        if (r.wake_consumer) {
          ++t.wakes;
          mb.send();
        }
        if (r.limit_reached) ++t.limit_signals;
      }
    }
    ++t.offered;
    ++t.verdicts[static_cast<int>(v)];
    if (v == Verdict::Accept || mode != Mode::Lossless) ++seq;
    // A traced process does some work between calls: let the consumer in now and then.
    if (mode != Mode::Lossless && t.offered % 32 == 0) std::this_thread::yield();
  }
}

struct RunResult {
  std::vector<Tally> tallies = std::vector<Tally>(kProducers);
  Tally total;
  double seconds = 0;
};

RunResult run_producers(SessionCore& s, Mailbox& mb, std::uint64_t per_producer, Mode mode, bool real_time = false) {
  RunResult res;
  std::atomic<int> go{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p)
    threads.emplace_back(produce, std::ref(s), std::ref(mb), static_cast<std::uint64_t>(p), per_producer, mode,
                         real_time, std::ref(go), std::ref(res.tallies[static_cast<std::size_t>(p)]));
  auto t0 = std::chrono::steady_clock::now();
  go.store(1, std::memory_order_release);
  for (auto& th : threads) th.join();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Tally& t : res.tallies) {
    res.total.offered += t.offered;
    for (int i = 0; i < 5; ++i) res.total.verdicts[i] += t.verdicts[i];
    res.total.wakes += t.wakes;
    res.total.limit_signals += t.limit_signals;
  }
  return res;
}

// Waits (without ever draining itself) until the consumer has everything that was
// accepted: if a wake-up were lost, events would sit in the queue and this times out.
bool wait_until_delivered(const SessionCore& s, const Consumer& c, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    Counters k = s.counters();
    if (c.delivered() == k.accepted - k.discarded) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void check_books(const SessionCore& s, const RunResult& r) {
  Counters c = s.counters();
  CHECK(c.accepted == r.total.verdicts[static_cast<int>(Verdict::Accept)]);
  CHECK(c.dropped_closed == r.total.verdicts[static_cast<int>(Verdict::DropClosed)]);
  CHECK(c.dropped_rate == r.total.verdicts[static_cast<int>(Verdict::DropRate)]);
  CHECK(c.dropped_queue_full == r.total.verdicts[static_cast<int>(Verdict::DropQueueFull)]);
  CHECK(c.dropped_max_events == r.total.verdicts[static_cast<int>(Verdict::DropMaxEvents)]);
  CHECK(c.accepted + c.dropped_closed + c.dropped_rate + c.dropped_queue_full + c.dropped_max_events ==
        r.total.offered);
  CHECK(c.accepted == c.delivered + c.queued + c.discarded);
  CHECK(c.wakeups == r.total.wakes);
}

}  // namespace

TEST_CASE("stress: lossless multi-producer run delivers every event exactly once, in order", "[stress]") {
  const std::uint64_t total = stress_events();
  const std::uint64_t per = total / kProducers;
  Limits l;
  l.queue_events = 4096;
  SessionCore s(l, kEpoch, kProducers);
  Mailbox mb;
  Consumer consumer(s, mb, 256);
  RunResult r = run_producers(s, mb, per, Mode::Lossless);
  REQUIRE(wait_until_delivered(s, consumer, std::chrono::seconds(60)));
  consumer.stop();
  const Seen& seen = consumer.seen();
  WARN("lossless: " << per * kProducers << " events in " << r.seconds << " s, " << seen.batches << " batches, "
                    << r.total.wakes << " wake-ups, " << r.total.offered - per * kProducers << " refused attempts");

  for (int p = 0; p < kProducers; ++p) {
    INFO("producer " << p);
    CHECK(seen.count[static_cast<std::size_t>(p)] == per);
    CHECK(seen.next_min[static_cast<std::size_t>(p)] == per);
  }
  CHECK(seen.out_of_order == 0);
  CHECK(seen.gaps == 0);
  CHECK(seen.bad_payloads == 0);
  CHECK(seen.bad_producers == 0);
  CHECK(seen.max_batch <= 256);

  Counters c = s.counters();
  CHECK(c.accepted == per * kProducers);
  CHECK(c.delivered == per * kProducers);
  CHECK(c.queued == 0);
  CHECK(c.discarded == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(c.wakeups >= 1);
  CHECK(mb.sent() == c.wakeups);
  check_books(s, r);
}

TEST_CASE("stress: a small queue drops, counts every drop, and loses nothing silently", "[stress]") {
  const std::uint64_t per = std::max<std::uint64_t>(stress_events() / kProducers / 4, 1000);
  Limits l;
  l.queue_events = 64;
  l.queue_bytes = 24 * 1024;
  SessionCore s(l, kEpoch, kProducers);
  Mailbox mb;
  // Held back until the queue has overflowed once: drops are certain however the
  // threads are scheduled (under TSan the producers can be slower than the consumer).
  Consumer consumer(s, mb, 16, 0, [&s] { return s.counters().dropped_queue_full > 0; });
  RunResult r = run_producers(s, mb, per, Mode::Lossy);
  REQUIRE(wait_until_delivered(s, consumer, std::chrono::seconds(60)));
  consumer.stop();
  const Seen& seen = consumer.seen();
  Counters c = s.counters();
  WARN("lossy: " << r.total.offered << " offered, " << c.accepted << " accepted, " << c.dropped_queue_full
                 << " dropped (queue full) in " << r.seconds << " s");

  CHECK(r.total.offered == per * kProducers);
  for (int p = 0; p < kProducers; ++p) {
    INFO("producer " << p);
    auto i = static_cast<std::size_t>(p);
    // Exactly what this producer had accepted reached the consumer.
    CHECK(seen.count[i] == r.tallies[i].verdicts[static_cast<int>(Verdict::Accept)]);
  }
  CHECK(seen.out_of_order == 0);
  CHECK(seen.bad_payloads == 0);
  CHECK(seen.bad_producers == 0);
  CHECK(c.dropped_queue_full > 0);
  CHECK(c.dropped_rate == 0);
  CHECK(c.dropped_closed == 0);
  CHECK(c.dropped_max_events == 0);
  CHECK(c.delivered == c.accepted);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  check_books(s, r);
  // The caps are credit (blocks of 1 event here): the race neither lost nor made any.
  // Drained, the queue takes the whole event cap again, on any one shard.
  std::uint64_t again = 0;
  while (s.admit(kEpoch, 0, 1) == Verdict::Accept) {
    REQUIRE(s.commit(make_event(0, again), 1).verdict == Verdict::Accept);
    ++again;
  }
  CHECK(again == l.queue_events);
}

TEST_CASE("stress: racing producers reach max_events exactly once", "[stress]") {
  const std::uint64_t per = std::max<std::uint64_t>(stress_events() / kProducers / 8, 5000);
  const std::uint64_t max_events = per * kProducers / 3;
  Limits l;
  l.limit = max_events;
  l.queue_events = max_events * (kProducers + 1);  // never the limiting factor here, even split per shard
  l.queue_bytes = std::uint64_t{1} << 32;
  SessionCore s(l, kEpoch, kProducers);
  Mailbox mb;
  Consumer consumer(s, mb, 128);
  RunResult r = run_producers(s, mb, per, Mode::Lossy);
  REQUIRE(wait_until_delivered(s, consumer, std::chrono::seconds(60)));
  consumer.stop();
  Counters c = s.counters();
  CHECK(c.accepted == max_events);
  CHECK(c.delivered == max_events);
  CHECK(c.limit_reached);
  CHECK(c.closed);
  CHECK(r.total.limit_signals == 1);
  CHECK(c.dropped_closed + c.dropped_max_events == per * kProducers - max_events);
  std::uint64_t seen_total = 0;
  for (auto n : consumer.seen().count) seen_total += n;
  CHECK(seen_total == max_events);
  CHECK(consumer.seen().out_of_order == 0);
  check_books(s, r);
}

TEST_CASE("stress: close() racing producers leaves nothing queued", "[stress][close]") {
  const std::uint64_t per = std::max<std::uint64_t>(stress_events() / kProducers / 8, 5000);
  for (int round = 0; round < 5; ++round) {
    INFO("round " << round);
    Limits l;
    l.queue_events = 1000;
    SessionCore s(l, kEpoch, kProducers);
    Mailbox mb;
    // The consumer closes the session mid-run, while the producers are still committing.
    Consumer consumer(s, mb, 64, 200 + static_cast<std::uint64_t>(round) * 37);
    RunResult r = run_producers(s, mb, per, Mode::UntilClosed);
    consumer.stop();
    Counters c = s.counters();
    CHECK(c.closed);
    CHECK_FALSE(c.limit_reached);
    CHECK(c.queued == 0);
    CHECK(c.bytes_queued == 0);
    CHECK(c.accepted == c.delivered + c.discarded);
    CHECK(c.delivered == consumer.delivered());
    CHECK(c.dropped_closed > 0);
    CHECK(consumer.seen().out_of_order == 0);
    CHECK(consumer.seen().bad_payloads == 0);
    check_books(s, r);
    CHECK(s.precheck(kEpoch) == Verdict::DropClosed);
  }
}

TEST_CASE("stress: concurrent rate limiting never exceeds burst + refill", "[stress][rate]") {
  const std::uint64_t per = std::max<std::uint64_t>(stress_events() / kProducers / 16, 5000);
  const std::int64_t period = 10'000'000;  // 10 ms
  const std::uint64_t count = 1000;        // 1000 per 10 ms: 100k/s, well under what 4 threads offer
  Limits l;
  l.rate_count = count;
  l.rate_period_ns = period;
  l.queue_events = 1u << 20;
  const std::int64_t epoch = mono_ns();
  SessionCore s(l, epoch, kProducers);
  Mailbox mb;
  Consumer consumer(s, mb, 256);
  RunResult r = run_producers(s, mb, per, Mode::Lossy, /*real_time=*/true);
  const std::int64_t elapsed = mono_ns() - epoch;
  REQUIRE(wait_until_delivered(s, consumer, std::chrono::seconds(60)));
  consumer.stop();
  Counters c = s.counters();
  const std::int64_t interval = period / static_cast<std::int64_t>(count);
  const auto ceiling = count + static_cast<std::uint64_t>(elapsed / interval) + 1;
  WARN("rate: " << c.accepted << " accepted of " << r.total.offered << " in " << static_cast<double>(elapsed) / 1e6 << " ms (ceiling "
                << ceiling << ")");
  CHECK(c.accepted <= ceiling);
  CHECK(c.accepted >= count);  // at least the initial burst
  CHECK(c.accepted + c.dropped_rate == r.total.offered);  // the rate is the only limit here
  if (r.total.offered > ceiling) CHECK(c.dropped_rate > 0);
  CHECK_FALSE(c.closed);
  CHECK(c.delivered == c.accepted);
  check_books(s, r);
}

TEST_CASE("stress: close() with 1 M queued events (250 k sanitized) and producers still calling in", "[stress][close]") {
  // The session tears down under a full queue: close() frees everything natively, counts
  // it as discarded, and returns in bounded time while producers keep offering events;
  // drain() and counters() stay bounded meanwhile.
#ifdef KINO_TRACE_TEST_SANITIZED
  const std::uint64_t queued = 250'000;
#else
  const std::uint64_t queued = 1'000'000;
#endif
  Limits l;
  l.queue_events = 4 * queued;
  l.queue_bytes = std::uint64_t{4} << 30;
  SessionCore s(l, kEpoch);
  for (std::uint64_t i = 0; i < queued; ++i) {
    REQUIRE(s.admit(kEpoch) == Verdict::Accept);
    s.commit(make_event(0, i));
  }
  REQUIRE(s.counters().queued == queued);

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> offered{0}, committed{0};
  std::vector<std::thread> producers;
  for (int p = 1; p <= kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (std::uint64_t seq = 0; !stop.load(std::memory_order_relaxed); ++seq) {
        offered.fetch_add(1, std::memory_order_relaxed);
        if (s.admit(kEpoch) != Verdict::Accept) continue;
        s.commit(make_event(static_cast<std::uint64_t>(p), seq));
        committed.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  while (committed.load() < 1000) std::this_thread::yield();

  // While they flood: one bounded drain and a counters read, timed.
  Event batch[64];
  bool more = false;
  std::int64_t t0 = mono_ns();
  std::size_t got = s.drain(batch, 64, more);
  Counters during = s.counters();
  std::int64_t drain_ns = mono_ns() - t0;
  CHECK(got == 64);
  CHECK(more);
  CHECK(during.accepted == during.delivered + during.queued + during.discarded);

  t0 = mono_ns();
  s.close();
  std::int64_t close_ns = mono_ns() - t0;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // producers keep calling in
  stop = true;
  for (auto& t : producers) t.join();

  Counters c = s.counters();
  WARN("drain(64) + counters during the flood: " << drain_ns / 1000 << " us; close with " << during.queued
                                                 << " queued: " << close_ns / 1000000 << " ms");
  CHECK(close_ns < 30'000'000'000);  // generous: 1 M frees take well under a second unsanitized
  CHECK(c.closed);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(c.delivered == 64);
  CHECK(c.accepted == c.delivered + c.discarded);
  CHECK(c.discarded >= queued - 64);
  CHECK(c.dropped_closed > 0);
  CHECK(c.accepted + c.dropped_closed + c.dropped_queue_full == queued + offered.load());
  CHECK(s.drain(batch, 64, more) == 0);
}

namespace {

// Producers that migrate between many single-producer shards, as processes move between
// schedulers: thread t offers each event on some shard it locks for the event (one thread
// at a time per shard, as one scheduler runs one process at a time), now and then on the
// fallback. `spread(t, i)` picks the shard of its i-th event (past the shards: the
// fallback). Returns the tallies; the queue is drained at the end.
struct Migrating {
  static constexpr std::size_t kShards = 8;
  std::vector<std::mutex> locks = std::vector<std::mutex>(kShards);

  template <class Spread>
  Tally run(SessionCore& s, std::uint64_t per, bool real_time, Spread spread) {
    std::vector<Tally> tallies(kProducers);
    std::atomic<int> go{0};
    std::vector<std::thread> threads;
    for (int p = 0; p < kProducers; ++p)
      threads.emplace_back([&, p] {
        Tally& t = tallies[static_cast<std::size_t>(p)];
        while (go.load(std::memory_order_acquire) == 0) std::this_thread::yield();
        for (std::uint64_t i = 0; i < per; ++i) {
          std::size_t shard = spread(p, i);
          std::unique_lock<std::mutex> lock;
          if (shard < kShards) lock = std::unique_lock<std::mutex>(locks[shard]);
          const std::int64_t now = real_time ? mono_ns() : kEpoch;
          Verdict v = s.precheck(now, shard);
          if (v == Verdict::Accept) v = s.admit(now, static_cast<std::uint64_t>(p), shard);
          if (v == Verdict::Accept && i % 61 == 7) {  // encoding failed: the ticket goes back
            s.abandon(shard);
            continue;
          }
          if (v == Verdict::Accept) {
            CommitResult r = s.commit(make_event(static_cast<std::uint64_t>(p), i), shard);
            v = r.verdict;
            t.limit_signals += r.limit_reached;
          }
          ++t.offered;
          ++t.verdicts[static_cast<int>(v)];
        }
      });
    go.store(1, std::memory_order_release);
    for (auto& th : threads) th.join();
    Tally total;
    for (const Tally& t : tallies) {
      total.offered += t.offered;
      for (int i = 0; i < 5; ++i) total.verdicts[i] += t.verdicts[i];
      total.limit_signals += t.limit_signals;
    }
    std::vector<Event> buf(1024);
    bool more = true;
    while (more && s.drain(buf.data(), buf.size(), more) != 0) {
    }
    return total;
  }
};

void check_tally(const SessionCore& s, const Tally& t) {
  Counters c = s.counters();
  CHECK(c.accepted == t.verdicts[static_cast<int>(Verdict::Accept)]);
  CHECK(c.dropped_closed == t.verdicts[static_cast<int>(Verdict::DropClosed)]);
  CHECK(c.dropped_rate == t.verdicts[static_cast<int>(Verdict::DropRate)]);
  CHECK(c.dropped_max_events == t.verdicts[static_cast<int>(Verdict::DropMaxEvents)]);
  CHECK(c.accepted + c.dropped_closed + c.dropped_rate + c.dropped_queue_full + c.dropped_max_events == t.offered);
  CHECK(c.accepted == c.delivered + c.queued + c.discarded);
}

}  // namespace

TEST_CASE("stress: producers migrating over 8 shards get exactly max_events, reported once", "[stress][limits]") {
  const std::uint64_t per = std::max<std::uint64_t>(stress_events() / kProducers / 16, 4000);
  // First everyone wanders over all shards and the fallback (blocks get taken everywhere),
  // then the processes settle on shards 0 and 1: the blocks left on shards 2-7 must not
  // be lost. The limit falls in the second half.
  auto spread = [per](int p, std::uint64_t i) -> std::size_t {
    if (i < per / 2) return (static_cast<std::size_t>(p) * 3 + i * 7 + i / 5) % (Migrating::kShards + 1);
    return static_cast<std::size_t>(p) % 2;
  };
  for (std::uint64_t max_events : {std::uint64_t{37}, per * kProducers * 3 / 4, per * kProducers / 2 + 1}) {
    INFO("max_events " << max_events);
    Limits l;
    l.limit = max_events;
    l.queue_events = per * kProducers * 2 * (Migrating::kShards + 1);
    l.queue_bytes = std::uint64_t{1} << 40;
    SessionCore s(l, kEpoch, Migrating::kShards);
    Migrating m;
    Tally t = m.run(s, per, false, spread);
    Counters c = s.counters();
    CHECK(c.accepted == max_events);
    CHECK(t.limit_signals == 1);
    CHECK(c.limit_reached);
    CHECK(c.closed);
    CHECK(c.delivered == max_events);
    check_tally(s, t);
  }
}

TEST_CASE("stress: producers migrating over 8 shards stay within the global rate", "[stress][rate]") {
  const std::uint64_t per = std::max<std::uint64_t>(stress_events() / kProducers / 16, 5000);
  const std::int64_t period = 10'000'000;  // 10 ms
  const std::uint64_t count = 2000;        // blocks of 2000 / (8 * 9) = 27, at most 16
  Limits l;
  l.rate_count = count;
  l.rate_period_ns = period;
  l.queue_events = std::uint64_t{1} << 30;
  l.queue_bytes = std::uint64_t{1} << 40;
  const std::int64_t epoch = mono_ns();
  SessionCore s(l, epoch, Migrating::kShards);
  Migrating m;
  Tally t = m.run(s, per, true, [](int p, std::uint64_t i) -> std::size_t {
    return (static_cast<std::size_t>(p) + i / 3) % (Migrating::kShards + 1);
  });
  const std::int64_t elapsed = mono_ns() - epoch;
  Counters c = s.counters();
  const std::int64_t interval = period / static_cast<std::int64_t>(count);
  const auto ceiling = count + static_cast<std::uint64_t>(elapsed / interval) + 1;
  WARN("rate on 8 shards: " << c.accepted << " accepted of " << t.offered << " in " << static_cast<double>(elapsed) / 1e6
                            << " ms (ceiling " << ceiling << ")");
  CHECK(c.accepted <= ceiling);
  CHECK(c.accepted >= count);
  CHECK(c.accepted + c.dropped_rate == t.offered);
  CHECK_FALSE(c.closed);
  check_tally(s, t);
}
