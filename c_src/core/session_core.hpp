// One trace session's native state, free of erl_nif: its limits, its event queue and
// its accounting. Many scheduler threads produce (the traced processes), one consumer
// drains (the session process).
//
// Shards (issue 26): the queue is a ShardedQueue, one single-producer shard per normal
// scheduler and a shared fallback shard (dirty schedulers, other threads). Every call of
// the producer's side takes the shard of the calling thread: `shard` is the scheduler id
// minus one for a normal scheduler thread, and anything at or past shard_count() - 1 (or
// the default, kAnyThread) means the fallback. At most one thread at a time may use a
// given single-producer shard (a scheduler runs one callback at a time); any number the
// fallback. A shard's counters (reservations, bytes in, drops by reason, wake-ups, its
// push in progress) are written only by its producer, with a relaxed load and store (the
// fallback's with a relaxed fetch_add), and summed by the reader.
//
// Life of an event:
//   precheck()  in the VM's `enabled` callbacks: cheap, no side effect but counting the
//               drop, so a rejected event costs almost nothing (no trace term is built);
//   admit()     in `trace`: takes a rate token, a reservation in its shard and a
//               max_events ticket;
//   commit()    after encoding: checks the byte cap and pushes to its shard (or abandon());
//   drain()     in the session process: hands out events in batches, merged by timestamp.
//
// Order: each process's events come out in its own order, however it moves between
// schedulers, and so do causally related events (a send before its receive): see
// ShardedQueue's invariant. Unrelated events of different shards may come out in another
// order than their timestamps.
//
// Caps: queue_events and queue_bytes are split evenly between the shards (at least 1
// each unless the cap is 0), and each shard checks what it holds (pushed + reserved -
// released, bytes in - bytes out) against its part, reading no other shard's line: the
// sum bounds memory as a global cap would, but a skewed load (one scheduler doing all the
// tracing) drops once its shard's part is full, before the queue holds the whole cap. A
// shard holding nothing takes any one event, whatever its bytes.
//
// Drops: every event dropped in trace() (admit or commit: the VM has already recorded
// it, e.g. pushed the frame a return will pop; returns come only this way) bumps a
// mark in a small table indexed by a hash of its process (drop_mark), and each
// accepted event carries its process's mark. When a process's mark differs from the one
// on its previous event, it may have lost events in between (or a process sharing its
// slot did): the consumer can then stop trusting what it inferred from the earlier
// events (open calls, depth).
//
// No memory: a push that finds no memory for a block is a counted drop (no_memory); its
// max_events ticket is used all the same (max_events counts what admit() let through
// and was not refused for a cap or for being closed).
//
// Wake-up: the producer's path has no fence. After its push a producer reads `sleeping_`
// (relaxed) and the one that changes it from 1 to 0 sends the consumer a wake-up. A
// drain that finds nothing left exchanges `sleeping_` to 1, then a full fence, then
// looks at the shards' tails again (something there: `more`, `sleeping_` back to 0).
// Without a fence on the producer's side this is no Dekker pair: a producer's read of
// `sleeping_` may overtake its own push (the tail store still in its store buffer), so
// it reads 0 while the consumer's look misses its push, and the event would sit with
// no wake-up. So:
//   Invariant: every change of `sleeping_` from 0 to 1 (only the consumer's exchange
//   makes one; it reads the value it replaces) is followed by another look at the
//   tails: the drain says `recheck` and the caller drains once more about a
//   millisecond later (or the drain says `more`, and a later drain ends in such a
//   change again).
// A producer that misses the wake-up read a 0 that comes before some change to 1 in
// `sleeping_`'s order, so it read it before that exchange was visible to it; the
// consumer's fence completes only once the exchange is visible to all, and the recheck
// comes after that fence. The producer's push came before its read, so it was made
// before the recheck, and the recheck sees it, relying on a store becoming visible in
// finite time (on real hardware a store buffer drains in well under a microsecond, the
// recheck comes a millisecond later). A recheck that finds `sleeping_` already 1 makes
// no change, so it arms nothing: an idle session costs nothing. A producer whose read
// comes after the exchange is visible reads 1 and wakes the consumer (or finds that
// another producer did). A caller that ignores `recheck` (drain(out, max, more)) must
// drain again on its own.
//
// Close: shut() stops admission at once (closed_, shut_), then discard() frees what is
// queued, and says it is done once the queue is empty and no shard is inside a commit
// that may still push (`pushing`, set before the producer reads shut_ and cleared, with
// release, after its push). A producer can still push after that: one whose `pushing`
// store was not yet visible to discard() (it read shut_ before shut()'s store reached
// it; no fence before its read: the producer's path has none). Its event
// ("late") is accepted and freed by the next consumer call once close is done (drain,
// counters) or by the destructor, so nothing stays queued after close as counters()
// reports it.
//
// Accounting: every offered event ends as accepted or dropped with one reason, and
//   accepted == delivered + queued + discarded    (discarded: freed after shut())
// where accepted is what the shards' queues took.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "rate_limiter.hpp"
#include "session_event.hpp"
#include "sharded_queue.hpp"
#include "term_codec.hpp"

namespace kino_trace {

struct Limits {
  std::uint64_t max_events = 0;           // total accepted, then the session closes; 0: none
  std::uint64_t rate_count = 0;           // rate: rate_count events per rate_period_ns; 0: none
  std::int64_t rate_period_ns = 0;
  std::uint64_t queue_events = 100000;    // events held at once, split between the shards
  std::uint64_t queue_bytes = 64u << 20;  // bytes held at once, split between the shards
  TermCaps caps;
};

enum class Verdict : std::uint8_t { Accept = 0, DropClosed, DropRate, DropQueueFull, DropMaxEvents, DropNoMemory };

struct Counters {
  std::uint64_t accepted = 0;
  std::uint64_t delivered = 0;
  std::uint64_t queued = 0;
  std::uint64_t discarded = 0;
  std::uint64_t bytes_queued = 0;
  std::uint64_t dropped_closed = 0;
  std::uint64_t dropped_rate = 0;
  std::uint64_t dropped_queue_full = 0;
  std::uint64_t dropped_max_events = 0;
  std::uint64_t dropped_no_memory = 0;  // the queue could not allocate (commit)
  std::uint64_t wakeups = 0;
  bool closed = false;
  bool limit_reached = false;
};

// What commit() tells the caller to do.
struct CommitResult {
  Verdict verdict = Verdict::Accept;
  bool wake_consumer = false;   // the consumer found nothing left: send it a wake-up
  bool limit_reached = false;   // this event was the max_events-th: the session closed

  // commit() works on the result packed in an integer (verdict, wake << 8, limit << 16)
  // and unpacks it in an inline wrapper: returning the three-byte struct from the
  // out-of-line body made GCC store its fields as bytes on the stack and reload them as
  // one word in the shared epilogue, a store-forwarding stall on every event (a fifth to
  // a quarter of commit()'s samples in a profile of the benchmark; issue 26).
  static constexpr std::uint32_t pack(Verdict verdict, bool wake, bool limit) {
    return static_cast<std::uint32_t>(verdict) | static_cast<std::uint32_t>(wake) << 8 |
           static_cast<std::uint32_t>(limit) << 16;
  }
  static CommitResult unpack(std::uint32_t bits) {
    CommitResult r;
    r.verdict = static_cast<Verdict>(bits & 0xFFu);
    r.wake_consumer = (bits >> 8 & 1u) != 0;
    r.limit_reached = (bits >> 16 & 1u) != 0;
    return r;
  }
};

// Tests make a missed wake-up happen through Hooks: sleeping_seen(v) is what a producer's
// read of `sleeping_` after its push returns (v: what it read).
struct SessionCoreNoHooks {
  static std::uint32_t sleeping_seen(std::uint32_t v) { return v; }
};

// kBlock and Alloc: the shard queues' blocks (tests pass small blocks and an allocator
// that fails). Everyone else uses SessionCore.
template <std::size_t kBlock = 64, class Alloc = SpscNewDelete, class Hooks = SessionCoreNoHooks>
class BasicSessionCore {
 public:
  // The shard of a thread that is not a normal scheduler: the fallback.
  static constexpr std::size_t kAnyThread = std::numeric_limits<std::size_t>::max();

  // `shards`: the single-producer shards (the VM's normal schedulers); 0: the fallback only.
  BasicSessionCore(const Limits& limits, std::int64_t epoch_ns, std::size_t shards = 0)
      : limits_(limits),
        epoch_ns_(epoch_ns),
        queue_(shards),
        bytes_out_(shards + 1),
        events_part_(part(limits.queue_events, shards + 1)),
        bytes_part_(part(limits.queue_bytes, shards + 1)) {
    rate_.configure(limits.rate_count, limits.rate_period_ns);
  }
  BasicSessionCore(const BasicSessionCore&) = delete;
  BasicSessionCore& operator=(const BasicSessionCore&) = delete;

  const Limits& limits() const { return limits_; }
  bool rate_limited() const { return rate_.limited(); }
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // Shards in all, the fallback (the last) included.
  std::size_t shard_count() const { return queue_.shard_count(); }

  // For `enabled`: would an event now be accepted? Counts the drop when not.
  // No drop mark: an event refused here is never generated at all (for a call, the VM
  // then does not run its match spec, so no return follows), nothing is half-recorded.
  Verdict precheck(std::int64_t now_ns, std::size_t shard = kAnyThread) {
    shard = index(shard);
    Verdict v = peek(now_ns, shard);
    if (v != Verdict::Accept) count_drop(v, 0, shard, false);
    return v;
  }

  // For `enabled`'s trace_status: the same question without counting anything.
  Verdict peek(std::int64_t now_ns, std::size_t shard = kAnyThread) const {
    shard = index(shard);
    if (closed()) return Verdict::DropClosed;
    if (limits_.max_events && tickets_.load(std::memory_order_relaxed) >= limits_.max_events)
      return Verdict::DropMaxEvents;
    if (!rate_.would_admit(now_ns - epoch_ns_)) return Verdict::DropRate;
    if (!room(shard)) return Verdict::DropQueueFull;
    return Verdict::Accept;
  }

  // For `trace`, before encoding: reserves a rate token, a place in the shard and a
  // ticket. On Accept the caller must follow with commit() or abandon() on the same
  // shard. `who` identifies the traced process (its pid term) for the drop marks.
  Verdict admit(std::int64_t now_ns, std::uint64_t who = 0, std::size_t shard = kAnyThread) {
    shard = index(shard);
    Verdict v = reserve(now_ns, shard);
    if (v != Verdict::Accept) count_drop(v, who, shard);
    return v;
  }

  // Releases what admit() reserved, without counting anything (the event never was).
  void abandon(std::size_t shard = kAnyThread) {
    queue_.add(index(shard), kReserved, kMinusOne);
    if (limits_.max_events) tickets_.fetch_sub(1, std::memory_order_relaxed);
  }

  CommitResult commit(Event&& event, std::size_t shard = kAnyThread) {
    return CommitResult::unpack(commit_packed(std::move(event), index(shard)));
  }

 private:
  std::uint32_t commit_packed(Event&& event, std::size_t shard) {
    const std::uint64_t who = event.pid;
    queue_.add(shard, kPushing, 1);  // before reading shut_: see close()
    if (shut_.load(std::memory_order_acquire)) {  // close() ran since admit(): never push
      queue_.add(shard, kPushing, kMinusOne);
      abandon(shard);
      count_drop(Verdict::DropClosed, who, shard);
      return CommitResult::pack(Verdict::DropClosed, false, false);
    }
    const std::uint64_t bytes = event.footprint();
    const std::uint64_t before = bytes_held(shard);
    if (before != 0 && before + bytes > bytes_part_) {  // a shard holding nothing takes any one event
      queue_.add(shard, kPushing, kMinusOne);
      abandon(shard);
      count_drop(Verdict::DropQueueFull, who, shard);
      return CommitResult::pack(Verdict::DropQueueFull, false, false);
    }
    // The process's own earlier drops happened before this, in its own order.
    event.drops = drop_mark(who).load(std::memory_order_relaxed);
    event.shard = static_cast<std::uint32_t>(shard);
    // Bytes in before the push: the consumer's bytes out never overtake them.
    queue_.add(shard, kBytesIn, bytes);
    bool pushed;
    {
      typename Queue::Producer producer(queue_, shard);
      pushed = producer.push(std::move(event));
    }
    queue_.add(shard, kReserved, kMinusOne);  // the reservation becomes the pushed item
    if (!pushed) {
      queue_.add(shard, kBytesIn, 0 - bytes);
      count_drop(Verdict::DropNoMemory, who, shard);
    }
    // No fence: a wake-up missed here is caught by the consumer's recheck (see the header).
    const bool wake = pushed && hooks_.sleeping_seen(sleeping_.load(std::memory_order_relaxed)) != 0 &&
                      sleeping_.exchange(0, std::memory_order_relaxed) != 0;
    if (wake) queue_.add(shard, kWakeups, 1);
    queue_.add(shard, kPushing, kMinusOne, std::memory_order_release);
    bool limit = false;
    if (limits_.max_events && used_.fetch_add(1, std::memory_order_relaxed) + 1 == limits_.max_events) {
      limit = true;
      closed_.store(true, std::memory_order_release);
      limit_reached_.store(true, std::memory_order_release);
    }
    return CommitResult::pack(pushed ? Verdict::Accept : Verdict::DropNoMemory, wake, limit);
  }

 public:
  // Moves up to `max` events into `out`, merged by timestamp in each process's order.
  // Returns how many; `more` tells whether events may remain (the consumer should drain
  // again). When it is false, the next accepted event wakes the consumer (see commit()),
  // but for one that missed it as this drain went to sleep: then `recheck` is true and
  // the consumer must drain once more a moment later (see the header). After shut()
  // both are false and nothing more is handed out.
  std::size_t drain(Event* out, std::size_t max, bool& more, bool& recheck) {
    std::lock_guard<std::mutex> lock(consumer_);
    more = false;
    recheck = false;
    if (shut_.load(std::memory_order_acquire)) {
      if (done_.load(std::memory_order_relaxed)) sweep();
      return 0;
    }
    std::size_t n = queue_.pop(out, max, more);
    for (std::size_t i = 0; i < n; ++i) note_out(out[i].shard, out[i].footprint());
    if (n) delivered_.store(delivered_.load(std::memory_order_relaxed) + n, std::memory_order_release);
    if (!more) {
      // Going to sleep: say so, then look again (see the header).
      const bool fell_asleep = sleeping_.exchange(1, std::memory_order_relaxed) == 0;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!queue_.empty()) {
        more = true;
        sleeping_.store(0, std::memory_order_relaxed);  // a producer may have taken it too: one spare wake-up
      } else {
        recheck = fell_asleep;
      }
    }
    return n;
  }
  // drain() for a caller that drains again anyway (a test, a benchmark): no recheck asked.
  std::size_t drain(Event* out, std::size_t max, bool& more) {
    bool recheck = false;
    return drain(out, max, more, recheck);
  }

  Hooks& hooks() { return hooks_; }

  // Closes the session: nothing more is accepted. Frees what is still queued (counted
  // as discarded). Safe to call more than once.
  void close() {
    shut();
    while (!discard(std::numeric_limits<std::size_t>::max())) std::this_thread::yield();  // a producer mid-push
  }

  // close() in two steps, for a caller that must not run long at once: shut() (constant
  // time) then discard(max) until it returns true.
  void shut() {
    closed_.store(true, std::memory_order_release);
    shut_.store(1, std::memory_order_release);
  }
  // Frees up to about `max` queued events (counted as discarded); true once none is left
  // and no shard is inside a push that shut() may have missed: false means "call again",
  // also when nothing was freed (a producer mid-push: microseconds).
  bool discard(std::size_t max) {
    std::lock_guard<std::mutex> lock(consumer_);
    bool quiet = true;  // read first: what those pushes did is then visible below
    for (std::size_t i = 0; i < queue_.shard_count(); ++i)
      quiet = quiet && queue_.count(i, kPushing, std::memory_order_acquire) == 0;
    std::size_t n = free_queued(max);
    const bool done = quiet && n < max && queue_.empty();
    if (done) done_.store(true, std::memory_order_relaxed);
    return done;
  }

  Counters counters() const {
    if (done_.load(std::memory_order_relaxed)) {  // a late push after close: free it first
      std::lock_guard<std::mutex> lock(consumer_);
      sweep();
    }
    Counters c;
    // Read the consumer's side first: accepted only grows, and never lags it.
    c.delivered = delivered_.load(std::memory_order_acquire);
    c.discarded = discarded_.load(std::memory_order_acquire);
    std::uint64_t out = 0;
    for (const auto& b : bytes_out_) out += b.bytes.load(std::memory_order_acquire);
    c.accepted = queue_.pushed();
    c.queued = c.accepted - c.delivered - c.discarded;
    const std::uint64_t in = queue_.total(kBytesIn);
    c.bytes_queued = in > out ? in - out : 0;
    c.dropped_closed = queue_.total(kDropped + 0);
    c.dropped_rate = queue_.total(kDropped + 1);
    c.dropped_queue_full = queue_.total(kDropped + 2);
    c.dropped_max_events = queue_.total(kDropped + 3);
    c.dropped_no_memory = queue_.total(kDropped + 4);
    c.wakeups = queue_.total(kWakeups);
    c.closed = closed();
    c.limit_reached = limit_reached_.load(std::memory_order_acquire);
    return c;
  }

 private:
  using Queue = ShardedQueue<Event, ShardedQueueNoHooks, kBlock, Alloc>;

  // The shards' counters (ShardedQueue::add): written by each shard's producer.
  static constexpr std::size_t kReserved = 0;  // admitted, not yet committed or abandoned
  static constexpr std::size_t kBytesIn = 1;   // footprints pushed (minus failed pushes)
  static constexpr std::size_t kPushing = 2;   // inside commit(), from its check of shut_ to its push
  static constexpr std::size_t kWakeups = 3;   // wake-ups sent
  static constexpr std::size_t kDropped = 4;   // 4..8: drops by reason (Verdict - 1)
  static_assert(kDropped + 5 <= Queue::kCounters, "a counter for each drop reason");
  static constexpr std::uint64_t kMinusOne = ~std::uint64_t{0};

  std::size_t index(std::size_t shard) const { return std::min(shard, queue_.fallback()); }

  // A cap's part for each of `shards` shards: at least 1 unless the cap is 0.
  static std::uint64_t part(std::uint64_t cap, std::size_t shards) {
    return cap == 0 ? 0 : std::max<std::uint64_t>(1, cap / shards);
  }

  // Events shard `shard` holds or has reserved: pushed + reserved - released.
  std::uint64_t held(std::size_t shard) const {
    return queue_.held(shard) + queue_.count(shard, kReserved, std::memory_order_relaxed);
  }
  // Bytes shard `shard` holds (out first: in only grows past it).
  std::uint64_t bytes_held(std::size_t shard) const {
    const std::uint64_t out = bytes_out_[shard].bytes.load(std::memory_order_relaxed);
    const std::uint64_t in = queue_.count(shard, kBytesIn, std::memory_order_relaxed);
    return in > out ? in - out : 0;
  }
  // Room for one more event on shard `shard`.
  bool room(std::size_t shard) const { return held(shard) < events_part_ && bytes_held(shard) < bytes_part_; }

  Verdict reserve(std::int64_t now_ns, std::size_t shard) {
    if (closed()) return Verdict::DropClosed;
    if (limits_.max_events && tickets_.load(std::memory_order_relaxed) >= limits_.max_events)
      return Verdict::DropMaxEvents;
    if (!rate_.try_admit(now_ns - epoch_ns_)) return Verdict::DropRate;
    queue_.add(shard, kReserved, 1);
    if (held(shard) > events_part_) {  // counting this reservation
      queue_.add(shard, kReserved, kMinusOne);
      return Verdict::DropQueueFull;
    }
    if (limits_.max_events && tickets_.fetch_add(1, std::memory_order_relaxed) >= limits_.max_events) {
      tickets_.fetch_sub(1, std::memory_order_relaxed);
      queue_.add(shard, kReserved, kMinusOne);
      return Verdict::DropMaxEvents;
    }
    return Verdict::Accept;
  }

  // The consumer's bytes out of shard `shard` (consumer_ held).
  void note_out(std::size_t shard, std::uint64_t bytes) const {
    std::atomic<std::uint64_t>& b = bytes_out_[shard].bytes;
    b.store(b.load(std::memory_order_relaxed) + bytes, std::memory_order_release);
  }

  // Frees up to about `max` queued events, counted as discarded (consumer_ held).
  std::size_t free_queued(std::size_t max) const {
    std::size_t n = queue_.discard([&](const Event& e) { note_out(e.shard, e.footprint()); }, max);
    if (n) discarded_.store(discarded_.load(std::memory_order_relaxed) + n, std::memory_order_release);
    return n;
  }
  // After close: frees what a late push left (consumer_ held).
  void sweep() const { free_queued(std::numeric_limits<std::size_t>::max()); }

  // The drop mark of the process `who`: one of kDropMarks counters, by a hash of its
  // pid term, bumped by each of its drops (and those of the processes sharing it).
  std::atomic<std::uint64_t>& drop_mark(std::uint64_t who) {
    return drop_marks_[(who * 0x9E3779B97F4A7C15ull) >> (64 - kDropMarkBits)];
  }

  void count_drop(Verdict v, std::uint64_t who, std::size_t shard, bool mark = true) {
    if (v == Verdict::Accept) return;
    if (mark) drop_mark(who).fetch_add(1, std::memory_order_relaxed);
    queue_.add(shard, kDropped + static_cast<std::size_t>(v) - 1, 1);
  }

  static constexpr unsigned kDropMarkBits = 10;

  // The consumer's bytes out of one shard, on its own line.
  struct alignas(64) BytesOut {
    std::atomic<std::uint64_t> bytes{0};
  };

  const Limits limits_;
  const std::int64_t epoch_ns_;
  RateLimiter rate_;
  // The consumer's side (drain, discard, and counters' sweep after close) holds consumer_
  // (never contended in practice: one session process).
  mutable std::mutex consumer_;
  mutable Queue queue_;
  mutable std::vector<BytesOut> bytes_out_;
  const std::uint64_t events_part_;  // each shard's part of the caps (see the header)
  const std::uint64_t bytes_part_;

  // read-mostly: written at close or at the max_events limit
  char pad_flags[64] = {};
  std::atomic<bool> closed_{false};
  std::atomic<bool> limit_reached_{false};
  std::atomic<std::uint32_t> shut_{0};  // close() was called (closed_ is also set by the limit)
  std::atomic<bool> done_{false};       // a discard() found everything freed

  // max_events only: tickets handed out, and tickets used by commit()
  char pad_tickets[64] = {};
  std::atomic<std::uint64_t> tickets_{0};
  std::atomic<std::uint64_t> used_{0};

  // the consumer: set when it found nothing left, cleared by the producer that wakes it
  char pad_sleeping[64] = {};
  std::atomic<std::uint32_t> sleeping_{1};
  Hooks hooks_;
  mutable std::atomic<std::uint64_t> delivered_{0};
  mutable std::atomic<std::uint64_t> discarded_{0};

  // written on drops, read once per accepted event
  char pad_drop_marks[64] = {};
  std::atomic<std::uint64_t> drop_marks_[std::size_t{1} << kDropMarkBits] = {};
};

using SessionCore = BasicSessionCore<>;

}  // namespace kino_trace
