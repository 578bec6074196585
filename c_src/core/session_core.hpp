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
// Caps: queue_events and queue_bytes are credit. What no shard holds is in a shared pool
// (pool_events_, pool_bytes_); a single-producer shard draws a block from it when its own
// credit runs out (a CAS on the pool's line once per block, not per event) and spends it
// with plain stores on its own line: an admitted event takes one event of credit, its
// commit its footprint in bytes. The fallback shard, whose threads may race, draws exactly
// what each event needs. The consumer gives back what it drains (two fetch_adds per
// batch). Hence, at any time,
//   pool + Σ shards' credit + events and bytes queued or reserved == the cap
// and the pool never goes below 0: the queue never holds more than queue_events events,
// nor more than queue_bytes bytes but for one rule, that a shard holding nothing takes
// any one event whatever its bytes (the pool may then go below 0; at most one such event
// per shard at a time). One shard can use the whole cap when the others are idle. What
// it cannot use is credit stranded in other shards: less than a block each (a draw
// leaves less than a block, and a give-back that would make a block goes to the pool),
// and a block
// is the cap / (64 × shards) (at least 1: a cap of 10 is exact), so a load that moves
// between schedulers may drop for a full queue when it holds 63/64 of the cap.
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
// Wake-up: the consumer sets `sleeping_` when a drain finds nothing left (then re-reads
// the shards' tails, after a full fence); a producer reads it after its push (after a
// full fence) and the one that clears it wakes the consumer. Of the consumer's re-read
// and the producer's read, one sees the other's store: no event is left without a
// wake-up.
//
// Close: shut() stops admission at once (closed_, shut_), then discard() frees what is
// queued, and says it is done once the queue is empty and no shard is inside a commit
// that may still push (`pushing`, set before the producer reads shut_ and cleared, with
// release, after its push). A producer can still push after that: one whose `pushing`
// store was not yet visible to discard() (it read shut_ before shut()'s store reached
// it; no fence before its read, to keep the producer's path to one fence). Its event
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

// kBlock and Alloc: the shard queues' blocks (tests pass small blocks and an allocator
// that fails). Everyone else uses SessionCore.
template <std::size_t kBlock = 64, class Alloc = SpscNewDelete>
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
        events_block_(block(limits.queue_events, shards + 1)),
        bytes_block_(block(limits.queue_bytes, shards + 1)),
        pool_events_(static_cast<std::int64_t>(std::min<std::uint64_t>(limits.queue_events, kMaxCap))),
        pool_bytes_(static_cast<std::int64_t>(std::min<std::uint64_t>(limits.queue_bytes, kMaxCap))) {
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
    give_event(index(shard));
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
    if (!take_bytes(shard, bytes)) {
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
    if (!pushed) {  // its credit goes back
      give_event(shard);
      give_bytes(shard, bytes);
      queue_.add(shard, kBytesIn, 0 - bytes);
      count_drop(Verdict::DropNoMemory, who, shard);
    }
    // The full fence pairs with drain()'s (see the header): after it, this producer sees
    // `sleeping_` if the consumer's re-read of the tails did not see this push.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const bool wake = pushed && sleeping_.load(std::memory_order_relaxed) != 0 &&
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
  // again). When it is false, the next accepted event wakes the consumer (see commit()).
  // After shut() it is false and nothing more is handed out.
  std::size_t drain(Event* out, std::size_t max, bool& more) {
    std::lock_guard<std::mutex> lock(consumer_);
    more = false;
    if (shut_.load(std::memory_order_acquire)) {
      if (done_.load(std::memory_order_relaxed)) sweep();
      return 0;
    }
    std::size_t n = queue_.pop(out, max, more);
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < n; ++i) bytes += note_out(out[i].shard, out[i].footprint());
    if (n) {
      delivered_.store(delivered_.load(std::memory_order_relaxed) + n, std::memory_order_release);
      give_back(n, bytes);
    }
    if (!more) {
      // Going to sleep: say so, then look again (see the header).
      sleeping_.store(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!queue_.empty()) {
        more = true;
        sleeping_.store(0, std::memory_order_relaxed);  // a producer may have taken it too: one spare wake-up
      }
    }
    return n;
  }

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
  static constexpr std::size_t kCredit = 0;    // events of credit the shard holds (not the fallback's)
  static constexpr std::size_t kBytesIn = 1;   // footprints pushed (minus failed pushes)
  static constexpr std::size_t kPushing = 2;   // inside commit(), from its check of shut_ to its push
  static constexpr std::size_t kWakeups = 3;   // wake-ups sent
  static constexpr std::size_t kDropped = 4;   // 4..8: drops by reason (Verdict - 1)
  static constexpr std::size_t kByteCredit = 9;  // bytes of credit the shard holds (not the fallback's)
  static_assert(kDropped + 5 <= kByteCredit && kByteCredit < Queue::kCounters, "a counter for each");
  // A cap past this is no cap (the pools are signed).
  static constexpr std::uint64_t kMaxCap = std::uint64_t{1} << 62;
  static constexpr std::uint64_t kMinusOne = ~std::uint64_t{0};

  std::size_t index(std::size_t shard) const { return std::min(shard, queue_.fallback()); }

  // A cap's block for `shards` shards (see the header): at least 1.
  static std::uint64_t block(std::uint64_t cap, std::size_t shards) {
    return std::max<std::uint64_t>(1, std::min<std::uint64_t>(cap, kMaxCap) / (64 * shards));
  }

  // Takes between `need` (at least 1) and `want` from `pool`: what it took, or 0 when
  // the pool holds less than `need`.
  static std::uint64_t draw(std::atomic<std::int64_t>& pool, std::uint64_t need, std::uint64_t want) {
    std::int64_t p = pool.load(std::memory_order_relaxed);
    while (p > 0 && static_cast<std::uint64_t>(p) >= need) {
      const std::int64_t n = static_cast<std::int64_t>(std::min<std::uint64_t>(static_cast<std::uint64_t>(p), want));
      if (pool.compare_exchange_weak(p, p - n, std::memory_order_relaxed)) return static_cast<std::uint64_t>(n);
    }
    return 0;
  }

  bool own_credit(std::size_t shard) const { return shard != queue_.fallback(); }

  // One event of credit for shard `shard`: false when the cap has none left.
  bool take_event(std::size_t shard) {
    if (!own_credit(shard)) return draw(pool_events_, 1, 1) != 0;
    if (queue_.count(shard, kCredit, std::memory_order_relaxed) == 0) {
      const std::uint64_t got = draw(pool_events_, 1, events_block_);
      if (got == 0) return false;
      queue_.add(shard, kCredit, got);
    }
    queue_.add(shard, kCredit, kMinusOne);
    return true;
  }
  // Gives back one event of credit (an abandoned admission, a failed push): to the shard,
  // unless that would leave it a whole block (a shard keeps less than a block).
  void give_event(std::size_t shard) {
    if (own_credit(shard) && queue_.count(shard, kCredit, std::memory_order_relaxed) + 1 < events_block_)
      queue_.add(shard, kCredit, 1);
    else
      pool_events_.fetch_add(1, std::memory_order_relaxed);
  }

  // `bytes` of credit for shard `shard`: false when the cap has not enough left and the
  // shard holds something (a shard holding nothing takes any one event: see the header).
  bool take_bytes(std::size_t shard, std::uint64_t bytes) {
    const bool own = own_credit(shard);
    const std::uint64_t have = own ? queue_.count(shard, kByteCredit, std::memory_order_relaxed) : 0;
    if (have >= bytes) {
      queue_.add(shard, kByteCredit, 0 - bytes);
      return true;
    }
    const std::uint64_t need = bytes - have;
    std::uint64_t got = draw(pool_bytes_, need, own ? std::max(need, bytes_block_) : need);
    if (got == 0) {
      if (bytes_held(shard) != 0) return false;
      pool_bytes_.fetch_sub(static_cast<std::int64_t>(need), std::memory_order_relaxed);
      got = need;
    }
    if (own) queue_.add(shard, kByteCredit, got - need - have);  // have + got - bytes left
    return true;
  }
  void give_bytes(std::size_t shard, std::uint64_t bytes) {
    if (own_credit(shard) && queue_.count(shard, kByteCredit, std::memory_order_relaxed) + bytes < bytes_block_)
      queue_.add(shard, kByteCredit, bytes);
    else
      pool_bytes_.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }

  // The consumer gives back the credit of `events` events of `bytes` bytes it drained or freed.
  void give_back(std::uint64_t events, std::uint64_t bytes) const {
    pool_events_.fetch_add(static_cast<std::int64_t>(events), std::memory_order_relaxed);
    pool_bytes_.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }

  // Bytes shard `shard` holds (out first: in only grows past it).
  std::uint64_t bytes_held(std::size_t shard) const {
    const std::uint64_t out = bytes_out_[shard].bytes.load(std::memory_order_relaxed);
    const std::uint64_t in = queue_.count(shard, kBytesIn, std::memory_order_relaxed);
    return in > out ? in - out : 0;
  }
  // Room for one more event on shard `shard`: credit for one event, and for some bytes.
  bool room(std::size_t shard) const {
    const bool own = own_credit(shard);
    const bool events = (own && queue_.count(shard, kCredit, std::memory_order_relaxed) != 0) ||
                        pool_events_.load(std::memory_order_relaxed) > 0;
    const bool bytes = (own && queue_.count(shard, kByteCredit, std::memory_order_relaxed) != 0) ||
                       pool_bytes_.load(std::memory_order_relaxed) > 0 || bytes_held(shard) == 0;
    return events && bytes;
  }

  Verdict reserve(std::int64_t now_ns, std::size_t shard) {
    if (closed()) return Verdict::DropClosed;
    if (limits_.max_events && tickets_.load(std::memory_order_relaxed) >= limits_.max_events)
      return Verdict::DropMaxEvents;
    if (!rate_.try_admit(now_ns - epoch_ns_)) return Verdict::DropRate;
    if (!take_event(shard)) return Verdict::DropQueueFull;
    if (limits_.max_events && tickets_.fetch_add(1, std::memory_order_relaxed) >= limits_.max_events) {
      tickets_.fetch_sub(1, std::memory_order_relaxed);
      give_event(shard);
      return Verdict::DropMaxEvents;
    }
    return Verdict::Accept;
  }

  // The consumer's bytes out of shard `shard` (consumer_ held): returns `bytes`.
  std::uint64_t note_out(std::size_t shard, std::uint64_t bytes) const {
    std::atomic<std::uint64_t>& b = bytes_out_[shard].bytes;
    b.store(b.load(std::memory_order_relaxed) + bytes, std::memory_order_release);
    return bytes;
  }

  // Frees up to about `max` queued events, counted as discarded (consumer_ held).
  std::size_t free_queued(std::size_t max) const {
    std::uint64_t bytes = 0;
    std::size_t n = queue_.discard([&](const Event& e) { bytes += note_out(e.shard, e.footprint()); }, max);
    if (n) {
      discarded_.store(discarded_.load(std::memory_order_relaxed) + n, std::memory_order_release);
      give_back(n, bytes);
    }
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
  const std::uint64_t events_block_;  // what a shard draws from a pool at once (see the header)
  const std::uint64_t bytes_block_;
  // The caps' credit no shard holds (see the header): drawn by producers once per block,
  // given back by the consumer once per batch.
  char pad_pools[64] = {};
  mutable std::atomic<std::int64_t> pool_events_;
  mutable std::atomic<std::int64_t> pool_bytes_;

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
  mutable std::atomic<std::uint64_t> delivered_{0};
  mutable std::atomic<std::uint64_t> discarded_{0};

  // written on drops, read once per accepted event
  char pad_drop_marks[64] = {};
  std::atomic<std::uint64_t> drop_marks_[std::size_t{1} << kDropMarkBits] = {};
};

using SessionCore = BasicSessionCore<>;

}  // namespace kino_trace
