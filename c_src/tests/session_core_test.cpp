// SessionCore, single-threaded: limits, verdicts, accounting, wake-ups, draining, close.
#include <catch2/catch.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "session_core.hpp"

using namespace kino_trace;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kEpoch = 7 * kSecond;  // sessions start at a non-zero monotonic time

Event make_event(std::uint64_t seq, std::size_t payload_bytes = 0) {
  Event e;
  e.kind = EventKind::Call;
  e.pid = seq;
  e.module = 1000 + seq;
  e.tag = payload_bytes;  // the payload's size, for the consumer's check
  e.time_ns = static_cast<std::int64_t>(seq);
  std::uint8_t* p = e.payload.extend(payload_bytes);
  for (std::size_t i = 0; i < payload_bytes; ++i) p[i] = static_cast<std::uint8_t>(seq + i);
  return e;
}

bool payload_matches(const Event& e) {
  if (e.payload.size() != e.tag) return false;
  for (std::size_t i = 0; i < e.payload.size(); ++i)
    if (e.payload.data()[i] != static_cast<std::uint8_t>(e.pid + i)) return false;
  return true;
}

// The full path of one event, as the NIF runs it: enabled (precheck), trace (admit,
// encode, commit).
struct Offer {
  Verdict verdict = Verdict::Accept;
  CommitResult commit;
};

template <class Core>
Offer offer(Core& s, std::int64_t now, std::uint64_t seq, std::size_t payload = 0) {
  Offer o;
  o.verdict = s.precheck(now);
  if (o.verdict != Verdict::Accept) return o;
  o.verdict = s.admit(now);
  if (o.verdict != Verdict::Accept) return o;
  o.commit = s.commit(make_event(seq, payload));
  o.verdict = o.commit.verdict;
  return o;
}

std::uint64_t total_dropped(const Counters& c) {
  return c.dropped_closed + c.dropped_rate + c.dropped_queue_full + c.dropped_max_events + c.dropped_no_memory;
}

template <class Core>
void check_balance(const Core& s) {
  Counters c = s.counters();
  CHECK(c.accepted == c.delivered + c.queued + c.discarded);
}

std::vector<Event> drain_all(SessionCore& s, std::size_t batch = 64) {
  std::vector<Event> got;
  std::vector<Event> buf(batch);
  bool more = true;
  while (more) {
    std::size_t n = s.drain(buf.data(), buf.size(), more);
    for (std::size_t i = 0; i < n; ++i) got.push_back(std::move(buf[i]));
    if (n == 0) break;
  }
  return got;
}

// After n + 20 offers with max_events n: n accepted, one said so, the 20 others dropped
// as closed, the n delivered.
void check_limit_end(SessionCore& s, std::uint64_t n, std::uint64_t accepted, std::uint64_t limit_signals) {
  CHECK(accepted == n);
  CHECK(limit_signals == 1);
  Counters c = s.counters();
  CHECK(c.accepted == n);
  CHECK(c.closed);
  CHECK(c.limit_reached);
  CHECK(c.dropped_closed == 20);
  CHECK(total_dropped(c) == 20);
  // The events accepted before the limit are still delivered.
  auto got = drain_all(s);
  CHECK(got.size() == n);
  CHECK(s.counters().delivered == n);
  check_balance(s);
}

Limits no_limits() {
  Limits l;
  l.queue_events = 1u << 30;
  l.queue_bytes = std::uint64_t{1} << 40;
  return l;
}

}  // namespace

TEST_CASE("SessionCore: a fresh session accepts, counts and delivers", "[session]") {
  SessionCore s(no_limits(), kEpoch);
  CHECK_FALSE(s.closed());
  CHECK_FALSE(s.rate_limited());
  Counters c0 = s.counters();
  CHECK(c0.accepted == 0);
  CHECK(c0.queued == 0);
  CHECK(c0.bytes_queued == 0);

  Offer o = offer(s, kEpoch, 1, 10);
  CHECK(o.verdict == Verdict::Accept);
  CHECK(o.commit.wake_consumer);
  CHECK_FALSE(o.commit.limit_reached);
  Counters c = s.counters();
  CHECK(c.accepted == 1);
  CHECK(c.queued == 1);
  CHECK(c.bytes_queued == sizeof(Event));
  CHECK(c.wakeups == 1);

  auto got = drain_all(s);
  REQUIRE(got.size() == 1);
  CHECK(got[0].pid == 1);
  CHECK(got[0].kind == EventKind::Call);
  CHECK(payload_matches(got[0]));
  c = s.counters();
  CHECK(c.delivered == 1);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(total_dropped(c) == 0);
}

TEST_CASE("SessionCore: max_events accepts exactly N, then closes", "[session][limits]") {
  for (std::uint64_t n : {1ull, 2ull, 5ull, 100ull}) {
    INFO("max_events " << n);
    Limits l = no_limits();
    l.limit = n;
    SessionCore s(l, kEpoch);
    std::uint64_t accepted = 0, limit_signals = 0;
    for (std::uint64_t i = 0; i < n + 20; ++i) {
      Offer o = offer(s, kEpoch + static_cast<std::int64_t>(i), i);
      if (o.verdict == Verdict::Accept) {
        ++accepted;
        CHECK(i < n);
      } else {
        CHECK(o.verdict == Verdict::DropClosed);
      }
      if (o.commit.limit_reached) {
        ++limit_signals;
        CHECK(i == n - 1);  // the N-th event says so
      }
    }
    check_limit_end(s, n, accepted, limit_signals);
  }
}

TEST_CASE("SessionCore: max_events tickets: in-flight events count, abandon gives one back", "[session][limits]") {
  Limits l = no_limits();
  l.limit = 3;
  SessionCore s(l, kEpoch);
  REQUIRE(s.admit(kEpoch) == Verdict::Accept);
  REQUIRE(s.admit(kEpoch) == Verdict::Accept);
  REQUIRE(s.admit(kEpoch) == Verdict::Accept);
  // All tickets are out, but none committed: not closed yet, so the drop is MaxEvents.
  CHECK_FALSE(s.closed());
  CHECK(s.peek(kEpoch) == Verdict::DropMaxEvents);
  CHECK(s.precheck(kEpoch) == Verdict::DropMaxEvents);
  CHECK(s.admit(kEpoch) == Verdict::DropMaxEvents);
  CHECK(s.counters().dropped_max_events == 2);  // peek counts nothing

  s.abandon();
  CHECK(s.peek(kEpoch) == Verdict::Accept);
  REQUIRE(s.admit(kEpoch) == Verdict::Accept);

  CHECK(s.commit(make_event(1)).verdict == Verdict::Accept);
  CHECK(s.commit(make_event(2)).verdict == Verdict::Accept);
  CHECK_FALSE(s.closed());
  CommitResult last = s.commit(make_event(3));
  CHECK(last.verdict == Verdict::Accept);
  CHECK(last.limit_reached);
  CHECK(s.closed());
  CHECK(s.precheck(kEpoch) == Verdict::DropClosed);
  CHECK(s.admit(kEpoch) == Verdict::DropClosed);
  Counters c = s.counters();
  CHECK(c.accepted == 3);
  CHECK(c.dropped_max_events == 2);
  CHECK(c.dropped_closed == 2);
  CHECK(c.limit_reached);
}

// The path of one event on shard `shard` (a scheduler's), as offer() on the fallback.
Offer offer_on(SessionCore& s, std::size_t shard, std::int64_t now, std::uint64_t seq) {
  Offer o;
  o.verdict = s.precheck(now, shard);
  if (o.verdict != Verdict::Accept) return o;
  o.verdict = s.admit(now, seq, shard);
  if (o.verdict != Verdict::Accept) return o;
  o.commit = s.commit(make_event(seq), shard);
  o.verdict = o.commit.verdict;
  return o;
}

TEST_CASE("SessionCore: max_events on shards: the tickets an idle shard's block holds are not lost", "[session][limits]") {
  // A process runs a little on shards 0-2 (each takes a block of tickets and uses one),
  // then migrates to shard 3 for good: it must still get all max_events events, the last
  // one saying so, and nothing after.
  for (std::uint64_t n : {1ull, 2ull, 5ull, 100ull, 129ull, 1000ull, 5000ull}) {
    INFO("max_events " << n);
    Limits l = no_limits();
    l.limit = n;
    SessionCore s(l, kEpoch, 4);
    std::uint64_t accepted = 0, limit_signals = 0, seq = 0;
    for (std::size_t shard = 0; shard < 3; ++shard) {
      Offer o = offer_on(s, shard, kEpoch, seq++);
      accepted += o.verdict == Verdict::Accept;
      limit_signals += o.commit.limit_reached;
    }
    for (; seq < n + 20; ++seq) {
      Offer o = offer_on(s, 3, kEpoch, seq);
      if (o.verdict == Verdict::Accept) {
        ++accepted;
        CHECK(accepted <= n);
      } else {
        CHECK(o.verdict == Verdict::DropClosed);
      }
      if (o.commit.limit_reached) {
        ++limit_signals;
        CHECK(accepted == n);  // the n-th event says so
      }
    }
    check_limit_end(s, n, accepted, limit_signals);
  }
}

TEST_CASE("SessionCore: max_events on shards: in-flight tickets count, abandon gives one back", "[session][limits]") {
  Limits l = no_limits();
  l.limit = 3;
  SessionCore s(l, kEpoch, 2);
  REQUIRE(s.admit(kEpoch, 1, 0) == Verdict::Accept);
  REQUIRE(s.admit(kEpoch, 2, 1) == Verdict::Accept);
  REQUIRE(s.admit(kEpoch, 3, 1) == Verdict::Accept);
  for (std::size_t shard : {std::size_t{0}, std::size_t{1}, SessionCore::kAnyThread}) {
    CHECK(s.peek(kEpoch, shard) == Verdict::DropMaxEvents);
    CHECK(s.admit(kEpoch, 4, shard) == Verdict::DropMaxEvents);
  }
  s.abandon(1);  // its ticket can go to any shard
  CHECK(s.peek(kEpoch, 0) == Verdict::Accept);
  REQUIRE(s.admit(kEpoch, 5, 0) == Verdict::Accept);
  CHECK(s.admit(kEpoch, 6, SessionCore::kAnyThread) == Verdict::DropMaxEvents);
  CHECK_FALSE(s.commit(make_event(1), 0).limit_reached);
  CHECK_FALSE(s.commit(make_event(2), 1).limit_reached);
  CHECK_FALSE(s.closed());
  CHECK(s.commit(make_event(5), 0).limit_reached);
  CHECK(s.closed());
  Counters c = s.counters();
  CHECK(c.accepted == 3);
  CHECK(c.dropped_max_events == 4);
  CHECK(c.limit_reached);
}

TEST_CASE("SessionCore: rate on shards: global at any one time, and a shard's tokens expire with their period", "[session][limits]") {
  Limits l = no_limits();
  l.rate_count = 160;  // blocks of 160 / (8 * 3 shards) = 6 tokens
  l.rate_period_ns = kSecond;
  SessionCore s(l, kEpoch, 2);
  std::uint64_t seq = 0;
  // At one instant the shards together get the burst, exactly.
  auto burst = [&](std::int64_t now) {
    std::uint64_t accepted = 0;
    for (int i = 0; i < 300; ++i) {
      const std::size_t shard = i % 3 == 2 ? SessionCore::kAnyThread : static_cast<std::size_t>(i % 3);
      accepted += offer_on(s, shard, now, seq++).verdict == Verdict::Accept;
    }
    return accepted;
  };
  CHECK(burst(kEpoch) == 160);
  CHECK(s.counters().dropped_rate == 140);
  // Shard 0 takes a block at 2 s and uses one token of it, then idles for a period: the
  // rest of its block expires with the period, and the bucket alone (full again) admits.
  REQUIRE(offer_on(s, 0, kEpoch + 2 * kSecond, seq++).verdict == Verdict::Accept);
  CHECK(burst(kEpoch + 3 * kSecond) == 160);
  // Within the period a shard's block is its own: peek sees it, the bucket being empty.
  REQUIRE(offer_on(s, 0, kEpoch + 5 * kSecond, seq++).verdict == Verdict::Accept);
  CHECK(burst(kEpoch + 5 * kSecond) == 159);
  CHECK(s.peek(kEpoch + 5 * kSecond, 0) == Verdict::DropRate);
  check_balance(s);
}

TEST_CASE("SessionCore: rate drops are counted and the session keeps running", "[session][limits]") {
  Limits l = no_limits();
  l.rate_count = 4;
  l.rate_period_ns = kSecond;
  SessionCore s(l, kEpoch);
  CHECK(s.rate_limited());
  std::uint64_t seq = 0;
  int accepted = 0;
  for (int i = 0; i < 10; ++i) accepted += offer(s, kEpoch, seq++).verdict == Verdict::Accept;
  CHECK(accepted == 4);
  Counters c = s.counters();
  CHECK(c.dropped_rate == 6);
  CHECK_FALSE(c.closed);
  CHECK_FALSE(c.limit_reached);

  // A quarter second later exactly one more token is there, and not a nanosecond earlier.
  CHECK(offer(s, kEpoch + kSecond / 4 - 1, seq++).verdict == Verdict::DropRate);
  CHECK(offer(s, kEpoch + kSecond / 4, seq++).verdict == Verdict::Accept);
  CHECK(offer(s, kEpoch + kSecond / 4, seq++).verdict == Verdict::DropRate);
  // admit() alone also counts its rate drop, once.
  CHECK(s.admit(kEpoch + kSecond / 4) == Verdict::DropRate);
  c = s.counters();
  CHECK(c.accepted == 5);
  CHECK(c.dropped_rate == 9);
  CHECK(total_dropped(c) == 9);
  // peek neither counts nor takes a token.
  for (int i = 0; i < 10; ++i) CHECK(s.peek(kEpoch + kSecond / 2) == Verdict::Accept);
  CHECK(s.counters().dropped_rate == 9);
  CHECK(offer(s, kEpoch + kSecond / 2, seq++).verdict == Verdict::Accept);
  check_balance(s);
}

TEST_CASE("SessionCore: the rate is measured from the session's epoch", "[session][limits]") {
  Limits l = no_limits();
  l.rate_count = 2;
  l.rate_period_ns = kSecond;
  SessionCore s(l, 1000 * kSecond);  // a large monotonic clock value at creation
  CHECK(offer(s, 1000 * kSecond, 0).verdict == Verdict::Accept);
  CHECK(offer(s, 1000 * kSecond, 1).verdict == Verdict::Accept);
  CHECK(offer(s, 1000 * kSecond, 2).verdict == Verdict::DropRate);
  CHECK(offer(s, 1000 * kSecond + kSecond / 2, 3).verdict == Verdict::Accept);
}

TEST_CASE("SessionCore: queue cap in events", "[session][limits]") {
  Limits l = no_limits();
  l.queue_events = 3;
  SessionCore s(l, kEpoch);
  for (std::uint64_t i = 0; i < 3; ++i) CHECK(offer(s, kEpoch, i).verdict == Verdict::Accept);
  CHECK(offer(s, kEpoch, 3).verdict == Verdict::DropQueueFull);
  CHECK(s.admit(kEpoch) == Verdict::DropQueueFull);
  CHECK(s.counters().dropped_queue_full == 2);

  std::vector<Event> one(1);
  bool more = false;
  REQUIRE(s.drain(one.data(), 1, more) == 1);
  CHECK(one[0].pid == 0);
  CHECK(more);
  CHECK(offer(s, kEpoch, 4).verdict == Verdict::Accept);  // a slot came back
  CHECK(offer(s, kEpoch, 5).verdict == Verdict::DropQueueFull);

  SECTION("reserved slots count before commit, abandon gives them back") {
    auto all = drain_all(s);
    CHECK(all.size() == 3);
    REQUIRE(s.admit(kEpoch) == Verdict::Accept);
    REQUIRE(s.admit(kEpoch) == Verdict::Accept);
    REQUIRE(s.admit(kEpoch) == Verdict::Accept);
    CHECK(s.peek(kEpoch) == Verdict::DropQueueFull);
    s.abandon();
    CHECK(s.peek(kEpoch) == Verdict::Accept);
    s.abandon();
    s.abandon();
    Counters c = s.counters();
    CHECK(c.accepted == 4);  // abandoned events never were
    CHECK(c.dropped_queue_full == 3);
  }
}

TEST_CASE("SessionCore: the caps are credit: one shard may use all of it, all shards no more", "[session][limits]") {
  Limits l = no_limits();
  l.queue_events = 6;                 // 2 shards and the fallback: blocks of 1, exact
  l.queue_bytes = 9 * sizeof(Event);
  SessionCore s(l, kEpoch, 2);
  auto on = [&](std::size_t shard, std::uint64_t seq, std::size_t payload = 0) {
    Verdict v = s.precheck(kEpoch, shard);
    if (v != Verdict::Accept) return v;
    v = s.admit(kEpoch, seq, shard);
    if (v != Verdict::Accept) return v;
    return s.commit(make_event(seq, payload), shard).verdict;
  };
  // A skewed load: shard 0 takes the whole cap while the others are idle.
  for (std::uint64_t i = 0; i < 6; ++i) CHECK(on(0, i) == Verdict::Accept);
  CHECK(on(0, 6) == Verdict::DropQueueFull);
  CHECK(s.admit(kEpoch, 7, 0) == Verdict::DropQueueFull);
  // The cap is global: no other shard, nor the fallback, finds room.
  CHECK(on(1, 8) == Verdict::DropQueueFull);
  CHECK(on(SessionCore::kAnyThread, 9) == Verdict::DropQueueFull);
  CHECK(on(99, 10) == Verdict::DropQueueFull);  // past the shards: the fallback
  Counters c = s.counters();
  CHECK(c.queued == 6);
  CHECK(c.dropped_queue_full == 5);
  // Draining gives the credit back, to whichever shard needs it.
  bool more = false;
  std::vector<Event> buf(8);
  REQUIRE(s.drain(buf.data(), 2, more) == 2);
  CHECK(on(1, 11) == Verdict::Accept);
  CHECK(on(SessionCore::kAnyThread, 12) == Verdict::Accept);
  CHECK(on(0, 13) == Verdict::DropQueueFull);
  // An abandoned admission gives its event back.
  REQUIRE(s.drain(buf.data(), 1, more) == 1);
  REQUIRE(s.admit(kEpoch, 14, 0) == Verdict::Accept);
  CHECK(on(1, 15) == Verdict::DropQueueFull);
  s.abandon(0);
  CHECK(on(1, 16) == Verdict::Accept);
  check_balance(s);
}

TEST_CASE("SessionCore: the byte cap is credit too, and an empty queue takes any one event", "[session][limits]") {
  Limits l = no_limits();
  l.queue_bytes = 4 * sizeof(Event);
  SessionCore s(l, kEpoch, 2);
  auto on = [&](std::size_t shard, std::uint64_t seq, std::size_t payload = 0) {
    Verdict v = s.admit(kEpoch, seq, shard);
    if (v != Verdict::Accept) return v;
    return s.commit(make_event(seq, payload), shard).verdict;
  };
  for (std::uint64_t i = 0; i < 4; ++i) CHECK(on(1, i) == Verdict::Accept);  // one shard, all the bytes
  CHECK(on(1, 4) == Verdict::DropQueueFull);
  CHECK(s.precheck(kEpoch, 1) == Verdict::DropQueueFull);
  // The process moves to shard 0, which holds nothing: the queue is full all the same
  // (tracer_test's "queue cap in bytes" passed the cap by an event this way).
  CHECK(s.precheck(kEpoch, 0) == Verdict::DropQueueFull);
  CHECK(on(0, 5) == Verdict::DropQueueFull);
  CHECK(on(0, 6, 16 * sizeof(Event)) == Verdict::DropQueueFull);
  CHECK(s.counters().bytes_queued == 4 * sizeof(Event));
  bool more = false;
  std::vector<Event> buf(8);
  REQUIRE(s.drain(buf.data(), 8, more) == 4);
  // Empty: one event takes whatever its bytes, and then nothing more fits.
  CHECK(on(0, 7, 16 * sizeof(Event)) == Verdict::Accept);
  CHECK(on(0, 8) == Verdict::DropQueueFull);
  CHECK(on(1, 9) == Verdict::DropQueueFull);
  REQUIRE(s.drain(buf.data(), 8, more) == 1);
  // Once the big event is drained the books are even again: the cap holds 4 small events.
  for (std::uint64_t i = 10; i < 14; ++i) CHECK(on(i % 2, i) == Verdict::Accept);
  CHECK(on(0, 14) == Verdict::DropQueueFull);
  CHECK(on(1, 15) == Verdict::DropQueueFull);
  check_balance(s);
}

TEST_CASE("SessionCore: credit stranded in idle shards is less than a block each", "[session][limits]") {
  Limits l = no_limits();
  const std::size_t shards = 3;
  const std::uint64_t block = 10;
  l.queue_events = 64 * (shards + 1) * block;  // blocks of 10
  SessionCore s(l, kEpoch, shards);
  // Shards 0 and 1 take one event each, drawing a block they leave mostly unused.
  REQUIRE(s.admit(kEpoch, 0, 0) == Verdict::Accept);
  REQUIRE(s.commit(make_event(0), 0).verdict == Verdict::Accept);
  REQUIRE(s.admit(kEpoch, 1, 1) == Verdict::Accept);
  REQUIRE(s.commit(make_event(1), 1).verdict == Verdict::Accept);
  // Shard 2 fills the rest.
  std::uint64_t taken = 0;
  for (std::uint64_t i = 2; s.admit(kEpoch, i, 2) == Verdict::Accept; ++i) {
    REQUIRE(s.commit(make_event(i), 2).verdict == Verdict::Accept);
    ++taken;
  }
  CHECK(taken == l.queue_events - 2 - 2 * (block - 1));
  // Shards 0 and 1 still have their credit.
  CHECK(s.admit(kEpoch, 99, 0) == Verdict::Accept);
  CHECK(s.commit(make_event(99), 0).verdict == Verdict::Accept);
  CHECK(s.counters().queued == taken + 3);
  check_balance(s);
}

TEST_CASE("SessionCore: queue cap in bytes", "[session][limits]") {
  Limits l = no_limits();
  l.queue_bytes = 2 * sizeof(Event);
  SessionCore s(l, kEpoch);

  SECTION("inline payloads cost sizeof(Event)") {
    CHECK(offer(s, kEpoch, 0).verdict == Verdict::Accept);
    CHECK(offer(s, kEpoch, 1).verdict == Verdict::Accept);
    CHECK(s.counters().bytes_queued == 2 * sizeof(Event));
    CHECK(offer(s, kEpoch, 2).verdict == Verdict::DropQueueFull);  // by precheck
    // Without precheck, commit() refuses it and gives back the slot.
    REQUIRE(s.admit(kEpoch) == Verdict::Accept);
    CommitResult r = s.commit(make_event(3));
    CHECK(r.verdict == Verdict::DropQueueFull);
    CHECK_FALSE(r.wake_consumer);
    Counters c = s.counters();
    CHECK(c.dropped_queue_full == 2);
    CHECK(c.accepted == 2);
    CHECK(c.bytes_queued == 2 * sizeof(Event));
    drain_all(s);
    CHECK(s.counters().bytes_queued == 0);
    CHECK(offer(s, kEpoch, 4).verdict == Verdict::Accept);
  }
  SECTION("heap payloads count their capacity") {
    CHECK(offer(s, kEpoch, 0, 4000).verdict == Verdict::Accept);  // an empty queue takes any one event
    Counters c = s.counters();
    CHECK(c.bytes_queued > 4000);
    CHECK(c.bytes_queued > l.queue_bytes);
    CHECK(offer(s, kEpoch, 1).verdict == Verdict::DropQueueFull);
    REQUIRE(s.admit(kEpoch) == Verdict::Accept);
    CHECK(s.commit(make_event(2)).verdict == Verdict::DropQueueFull);
    auto got = drain_all(s);
    REQUIRE(got.size() == 1);
    CHECK(payload_matches(got[0]));
    CHECK(s.counters().bytes_queued == 0);
  }
  SECTION("a commit that would overflow the bytes is refused even after the slot check") {
    CHECK(offer(s, kEpoch, 0).verdict == Verdict::Accept);
    REQUIRE(s.admit(kEpoch) == Verdict::Accept);
    CommitResult r = s.commit(make_event(1, 500));
    CHECK(r.verdict == Verdict::DropQueueFull);
    CHECK(s.counters().bytes_queued == sizeof(Event));
    CHECK(offer(s, kEpoch, 2).verdict == Verdict::Accept);  // an inline one still fits
  }
}

TEST_CASE("SessionCore: precheck reserves nothing, admit reserves, abandon releases", "[session]") {
  Limits l = no_limits();
  l.queue_events = 1;
  SessionCore s(l, kEpoch);
  for (int i = 0; i < 10; ++i) CHECK(s.precheck(kEpoch) == Verdict::Accept);
  Counters c = s.counters();
  CHECK(c.accepted == 0);
  CHECK(total_dropped(c) == 0);

  REQUIRE(s.admit(kEpoch) == Verdict::Accept);
  CHECK(s.peek(kEpoch) == Verdict::DropQueueFull);
  CHECK(s.counters().dropped_queue_full == 0);
  CHECK(s.precheck(kEpoch) == Verdict::DropQueueFull);
  CHECK(s.counters().dropped_queue_full == 1);
  s.abandon();
  c = s.counters();
  CHECK(c.accepted == 0);
  CHECK(total_dropped(c) == 1);
  CHECK(s.precheck(kEpoch) == Verdict::Accept);
  REQUIRE(s.admit(kEpoch) == Verdict::Accept);
  CHECK(s.commit(make_event(1)).verdict == Verdict::Accept);
  CHECK(s.counters().accepted == 1);
}

TEST_CASE("SessionCore: wake_consumer only on empty to non-empty", "[session][wake]") {
  SessionCore s(no_limits(), kEpoch);
  std::vector<Event> buf(4);
  bool more = false;

  CHECK(offer(s, kEpoch, 0).commit.wake_consumer);
  CHECK_FALSE(offer(s, kEpoch, 1).commit.wake_consumer);
  CHECK_FALSE(offer(s, kEpoch, 2).commit.wake_consumer);
  CHECK(s.counters().wakeups == 1);

  // A partial drain leaves events: `more`, and no new wake-up for further events.
  REQUIRE(s.drain(buf.data(), 2, more) == 2);
  CHECK(more);
  CHECK_FALSE(offer(s, kEpoch, 3).commit.wake_consumer);
  REQUIRE(s.drain(buf.data(), 4, more) == 2);
  CHECK_FALSE(more);
  CHECK(buf[0].pid == 2);
  CHECK(buf[1].pid == 3);

  // Drained to empty with more == false: the next commit wakes again.
  CHECK(offer(s, kEpoch, 4).commit.wake_consumer);
  CHECK(s.counters().wakeups == 2);

  // An empty drain changes nothing.
  REQUIRE(s.drain(buf.data(), 4, more) == 1);
  CHECK_FALSE(more);
  REQUIRE(s.drain(buf.data(), 4, more) == 0);
  CHECK_FALSE(more);
  CHECK(offer(s, kEpoch, 5).commit.wake_consumer);

  // Drops never wake.
  Limits l = no_limits();
  l.queue_events = 0;
  SessionCore full(l, kEpoch);
  CHECK(offer(full, kEpoch, 0).verdict == Verdict::DropQueueFull);
  CHECK(full.counters().wakeups == 0);
}

// A producer's read of `sleeping_` that overtakes its own push (no fence on its path):
// armed, it reads 0, as if it read before the consumer's drain went to sleep.
struct StaleSleepingRead {
  bool armed = false;
  std::uint32_t sleeping_seen(std::uint32_t v) {
    if (!armed) return v;
    armed = false;
    return 0;
  }
};

TEST_CASE("SessionCore: a missed wake-up is caught by the recheck of the drain that went to sleep",
          "[session][wake]") {
  BasicSessionCore<64, SpscNewDelete, StaleSleepingRead> s(no_limits(), kEpoch);
  std::vector<Event> buf(4);
  bool more = true;
  bool recheck = false;

  // Idle from the start: an empty drain makes no change, so it asks for no recheck.
  REQUIRE(s.drain(buf.data(), 4, more, recheck) == 0);
  CHECK_FALSE(more);
  CHECK_FALSE(recheck);

  // Woken, the drain that empties the queue goes to sleep (0 to 1): recheck.
  CHECK(offer(s, kEpoch, 0).commit.wake_consumer);
  REQUIRE(s.drain(buf.data(), 4, more, recheck) == 1);
  CHECK_FALSE(more);
  CHECK(recheck);

  // The next producer's read of `sleeping_` overtakes its push: it sees 0 and sends no
  // wake-up, and the consumer's look after its fence missed the push. The event waits.
  s.hooks().armed = true;
  Offer missed = offer(s, kEpoch, 1);
  REQUIRE(missed.verdict == Verdict::Accept);
  CHECK_FALSE(missed.commit.wake_consumer);
  CHECK(s.counters().wakeups == 1);
  CHECK(s.counters().queued == 1);

  // The recheck finds it. `sleeping_` was 1 already: no further recheck.
  REQUIRE(s.drain(buf.data(), 4, more, recheck) == 1);
  CHECK(buf[0].pid == 1);
  CHECK_FALSE(more);
  CHECK_FALSE(recheck);

  // Asleep since the first drain: any later producer sees it and wakes the consumer.
  CHECK(offer(s, kEpoch, 2).commit.wake_consumer);
  REQUIRE(s.drain(buf.data(), 4, more, recheck) == 1);
  CHECK(recheck);
  REQUIRE(s.drain(buf.data(), 4, more, recheck) == 0);
  CHECK_FALSE(recheck);
  check_balance(s);
}

TEST_CASE("SessionCore: a drain that finds events after its fence stays awake, the next one goes to sleep",
          "[session][wake]") {
  SessionCore s(no_limits(), kEpoch);
  std::vector<Event> buf(4);
  bool more = false;
  bool recheck = true;
  CHECK(offer(s, kEpoch, 0).commit.wake_consumer);
  CHECK_FALSE(offer(s, kEpoch, 1).commit.wake_consumer);
  // A partial drain: more, no recheck.
  REQUIRE(s.drain(buf.data(), 1, more, recheck) == 1);
  CHECK(more);
  CHECK_FALSE(recheck);
  REQUIRE(s.drain(buf.data(), 4, more, recheck) == 1);
  CHECK_FALSE(more);
  CHECK(recheck);
  // After close, nothing to recheck.
  CHECK(offer(s, kEpoch, 2).commit.wake_consumer);
  s.close();
  REQUIRE(s.drain(buf.data(), 4, more, recheck) == 0);
  CHECK_FALSE(more);
  CHECK_FALSE(recheck);
}

TEST_CASE("SessionCore: drain hands out events in batches, in order", "[session]") {
  SessionCore s(no_limits(), kEpoch);
  for (std::uint64_t i = 0; i < 10; ++i) REQUIRE(offer(s, kEpoch, i, i * 30).verdict == Verdict::Accept);
  std::vector<Event> buf(3);
  std::vector<std::size_t> sizes;
  std::vector<bool> mores;
  std::uint64_t next = 0;
  bool more = true;
  while (more) {
    std::size_t n = s.drain(buf.data(), buf.size(), more);
    sizes.push_back(n);
    mores.push_back(more);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(buf[i].pid == next++);
      CHECK(payload_matches(buf[i]));
    }
    Counters c = s.counters();
    CHECK(c.delivered == next);
    CHECK(c.queued == 10 - next);
  }
  CHECK(sizes == std::vector<std::size_t>{3, 3, 3, 1});
  CHECK(mores == std::vector<bool>{true, true, true, false});
  CHECK(s.counters().bytes_queued == 0);
}

TEST_CASE("SessionCore: close discards and counts what is queued", "[session][close]") {
  SessionCore s(no_limits(), kEpoch);
  for (std::uint64_t i = 0; i < 200; ++i)  // more than close()'s 64-event scratch batch
    REQUIRE(offer(s, kEpoch, i, i % 3 ? 0 : 1000).verdict == Verdict::Accept);
  std::vector<Event> buf(20);
  bool more = false;
  REQUIRE(s.drain(buf.data(), 20, more) == 20);
  s.close();
  Counters c = s.counters();
  CHECK(c.closed);
  CHECK_FALSE(c.limit_reached);
  CHECK(c.accepted == 200);
  CHECK(c.delivered == 20);
  CHECK(c.discarded == 180);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);

  CHECK(s.drain(buf.data(), 20, more) == 0);
  CHECK_FALSE(more);
  CHECK(s.precheck(kEpoch) == Verdict::DropClosed);
  CHECK(s.admit(kEpoch) == Verdict::DropClosed);
  CHECK(s.peek(kEpoch) == Verdict::DropClosed);
  CHECK(s.counters().dropped_closed == 2);

  s.close();  // again: harmless
  Counters c2 = s.counters();
  CHECK(c2.discarded == 180);
  CHECK(c2.dropped_closed == 2);
}

TEST_CASE("SessionCore: shut then discard in slices: nothing admitted, books exact at every step", "[session][close]") {
  SessionCore s(no_limits(), kEpoch);
  for (std::uint64_t i = 0; i < 1000; ++i)
    REQUIRE(offer(s, kEpoch, i, i % 3 ? 0 : 500).verdict == Verdict::Accept);
  s.shut();
  CHECK(s.closed());
  CHECK(s.admit(kEpoch) == Verdict::DropClosed);
  CHECK(s.counters().queued == 1000);  // shut() frees nothing by itself
  check_balance(s);
  int slices = 0;
  while (!s.discard(300)) {
    ++slices;
    Counters c = s.counters();
    CHECK(c.accepted == c.discarded + c.queued);
    CHECK(c.discarded >= 300u * static_cast<unsigned>(slices));
    REQUIRE(slices < 10);
  }
  CHECK(slices == 3);  // 320 (bulks of 64), 640, 960 freed; the 4th call frees 40 and finds it empty
  Counters c = s.counters();
  CHECK(c.discarded == 1000);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(s.discard(300));  // nothing left: true at once
}

TEST_CASE("SessionCore: an event admitted before close and committed after is not left queued", "[session][close]") {
  SessionCore s(no_limits(), kEpoch);
  REQUIRE(offer(s, kEpoch, 0).verdict == Verdict::Accept);
  REQUIRE(s.admit(kEpoch) == Verdict::Accept);  // a trace callback is encoding...
  s.close();                                     // ...while the session closes
  CommitResult r = s.commit(make_event(1, 300));
  CHECK(r.verdict != Verdict::Accept);
  Counters c = s.counters();
  CHECK(c.accepted == 1);
  CHECK(c.discarded == 1);
  CHECK(c.queued == 0);
  CHECK(c.bytes_queued == 0);
  CHECK(c.dropped_closed == 1);
  check_balance(s);
}

TEST_CASE("SessionCore: the destructor frees queued events", "[session][close]") {
  // Heap payloads left in the queue: LeakSanitizer fails the ASan build if they leak.
  for (int round = 0; round < 3; ++round) {
    auto s = std::make_unique<SessionCore>(no_limits(), kEpoch);
    for (std::uint64_t i = 0; i < 1000; ++i) REQUIRE(offer(*s, kEpoch, i, 200 + i).verdict == Verdict::Accept);
    std::vector<Event> buf(10);
    bool more = false;
    REQUIRE(s->drain(buf.data(), 10, more) == 10);
    CHECK(s->counters().queued == 990);
    s.reset();
  }
}

TEST_CASE("SessionCore: random single-threaded sequences keep the books balanced", "[session][model]") {
  std::mt19937 rng(8);
  for (int run = 0; run < 40; ++run) {
    Limits l = no_limits();
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    if (pick(0, 1)) l.limit = static_cast<std::uint64_t>(pick(1, 300));
    if (pick(0, 1)) {
      l.rate_count = static_cast<std::uint64_t>(pick(1, 50));
      l.rate_period_ns = 1'000'000;
    }
    l.queue_events = static_cast<std::uint64_t>(pick(0, 40));
    l.queue_bytes = static_cast<std::uint64_t>(pick(1, 30)) * sizeof(Event);
    SessionCore s(l, kEpoch);

    std::int64_t now = kEpoch;
    std::uint64_t seq = 0, offered = 0, accepted = 0, delivered = 0;
    std::uint64_t by_reason[5] = {0, 0, 0, 0, 0};  // indexed by Verdict
    std::deque<std::uint64_t> model;  // seqs in the queue, in order
    std::vector<Event> buf(16);
    bool closed_by_us = false;
    for (int step = 0; step < 2000; ++step) {
      int op = pick(0, 9);
      if (op <= 4) {  // a whole event
        std::size_t payload = pick(0, 4) == 0 ? static_cast<std::size_t>(pick(100, 3000)) : 0;
        ++offered;
        Offer o = offer(s, now, seq, payload);
        ++by_reason[static_cast<int>(o.verdict)];
        if (o.verdict == Verdict::Accept) {
          ++accepted;
          CHECK(o.commit.wake_consumer == model.empty());
          model.push_back(seq);
        }
        ++seq;
      } else if (op == 5) {  // an event admitted without precheck, whose encoding fails
        Verdict v = s.admit(now);
        if (v == Verdict::Accept) {
          s.abandon();  // never was: not offered
        } else {
          ++offered;
          ++by_reason[static_cast<int>(v)];
        }
      } else if (op <= 7) {
        bool more = false;
        std::size_t n = s.drain(buf.data(), static_cast<std::size_t>(pick(1, 16)), more);
        for (std::size_t i = 0; i < n; ++i) {
          REQUIRE_FALSE(model.empty());
          CHECK(buf[i].pid == model.front());
          CHECK(payload_matches(buf[i]));
          model.pop_front();
        }
        delivered += n;
        CHECK(more == !model.empty());
      } else if (op == 8) {
        now += pick(0, 200'000);
      } else if (pick(0, 60) == 0) {
        s.close();
        closed_by_us = true;
        model.clear();
      }
      Counters c = s.counters();
      REQUIRE(c.accepted == accepted);
      REQUIRE(c.delivered == delivered);
      REQUIRE(c.queued == model.size());
      REQUIRE(c.accepted == c.delivered + c.queued + c.discarded);
      // Every offered event: accepted, or dropped with exactly one reason.
      REQUIRE(c.accepted + total_dropped(c) == offered);
      REQUIRE(c.queued <= l.queue_events);
      if (l.limit) REQUIRE(c.accepted <= l.limit);
      REQUIRE(c.limit_reached == (l.limit != 0 && c.accepted == l.limit));
      REQUIRE(c.closed == (closed_by_us || c.limit_reached));
    }
    // Each drop is counted under the reason the caller was given.
    Counters c = s.counters();
    CHECK(c.accepted == by_reason[static_cast<int>(Verdict::Accept)]);
    CHECK(c.dropped_closed == by_reason[static_cast<int>(Verdict::DropClosed)]);
    CHECK(c.dropped_rate == by_reason[static_cast<int>(Verdict::DropRate)]);
    CHECK(c.dropped_queue_full == by_reason[static_cast<int>(Verdict::DropQueueFull)]);
    CHECK(c.dropped_max_events == by_reason[static_cast<int>(Verdict::DropMaxEvents)]);
  }
}

TEST_CASE("CommitResult: pack/unpack keep each field", "[session]") {
  for (Verdict v : {Verdict::Accept, Verdict::DropClosed, Verdict::DropQueueFull, Verdict::DropNoMemory}) {
    for (int bits = 0; bits < 4; ++bits) {
      CommitResult r = CommitResult::unpack(CommitResult::pack(v, (bits & 1) != 0, (bits & 2) != 0));
      CHECK(r.verdict == v);
      CHECK(r.wake_consumer == ((bits & 1) != 0));
      CHECK(r.limit_reached == ((bits & 2) != 0));
    }
  }
}
