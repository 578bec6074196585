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
//               limit ticket (tokens and tickets from the shard's blocks: below);
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
// nor more than queue_bytes bytes but for one rule, that an empty queue takes any one
// event whatever its bytes (the pool may then go below 0). That rule looks at the whole
// queue, as it did before the shards: a process that moves to a shard holding nothing
// while the others hold the cap must not pass it. It costs a read of every shard's byte
// counters, only when the pool has too little for an event (`enabled` needs none: while
// the queue is empty the pool holds more than the credit stranded in shards, so it is
// never empty then). Two shards that find the queue empty at once may both take one:
// the old global check had the same race. One shard can use the whole cap when the others are idle. What
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
// limit ticket is used all the same (the limit counts what admit() let through
// and was not refused for a cap or for being closed). An event whose encoding found no
// memory (before commit) is a counted no_memory drop too, and gives its ticket back
// (abandon_no_memory()).
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
// :limit tickets (issue 26). A ticket is in exactly one place: the pool
// (pool_, the tickets no shard has taken), a single-producer shard's block (its Budget's
// `have`), in flight (admitted, not yet committed or abandoned) or used (its shard's
// `used`: committed, pushed or not for want of memory). Every move is an atomic RMW (or
// the owner's store of `used`), so the tickets are conserved and at most `limit` are
// ever used: `:limit` never over-admits. Per event, a shard's producer takes a ticket
// from its own block (a CAS on its own line) and counts its use (a seq_cst store on the
// same line); pool_, shared, is written once per block:
//   * A block (kTicketBlock) is taken only while more than shards × kTicketBlock remain
//     in the pool, else one ticket at a time (the fallback shard always takes one, from
//     the pool: its producers are many). So the pool only empties by single takes, and
//     once it is empty the blocks hold at most kTicketBlock - 1 each (plus abandons).
//   * Nothing is stranded: a producer that finds its block and the pool empty moves every
//     shard's block into the pool (an exchange of `have`, which is why `have` is an
//     atomic the owner takes from with a CAS, not a plain store: an idle shard, one whose
//     process migrated away, cannot give back what it holds) and takes from there. So an
//     event is refused for the limit only when no ticket is in a pool or a block, i.e.
//     all are used or in flight. (Or in transit: between a taker's RMW and its next one,
//     a few instructions, as in-flight tickets later abandoned were before.) peek()
//     looks at the same places without taking.
//   * The end: a commit stores its shard's `used` (seq_cst), then loads the pool
//     (seq_cst); when it is empty, it sums every shard's `used` (seq_cst) and, at
//     `limit`, closes the session; the exchange on limit_reached_ lets one commit say
//     so. Some commit sees the sum: take X, the commit whose store of `used` is last in
//     the seq_cst order S. Every move of a ticket happens before the store that uses it
//     (each RMW on a block reads from the last, seq_cst RMWs synchronise), so every
//     modification of the pool precedes X's store in S, and the pool's last value before
//     X's load is 0 (every ticket that entered left); X's loads of `used` follow every
//     store in S, so X sees all `limit`. No commit sees it early: the sum of loads
//     never exceeds what is used. This is the seq_cst store/load pair (Dekker) of two
//     racing last commits: of the two, one sees the other.
//
// :rate tokens. The bucket (RateLimiter) stays the one global bound on what is taken:
// over [0, t] at most rate_count + t / interval tokens. A single-producer shard takes up
// to rate_block_ = rate_count / (8 × shards), 1 to kRateBlockMax, in one CAS, and keeps
// the rest in its Budget (owner only); they expire one rate period after they were taken,
// so an idle shard does not bank them. Accepted events never exceed what was taken; in
// any window, what the shards held at its start is the only excess over the bucket's
// bound: at most shards × (rate_block_ - 1) < rate_count / 8. The fallback takes one
// token per event, as before.
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

#include "limits.hpp"
#include "rate_limiter.hpp"
#include "session_event.hpp"
#include "sharded_queue.hpp"
#include "term_codec.hpp"

namespace kino_trace {

struct Limits {
  // The defaults are KinoTrace.Limits' (limits.hpp, generated): the option names them.
  std::uint64_t limit = limits::kLimitDefault;              // :limit, events accepted in all, then the
                                                            // session closes; 0: none
  std::uint64_t rate_count = limits::kRateCountDefault;     // :rate, rate_count events per
  std::int64_t rate_period_ns = limits::kRatePeriodMsDefault * 1000000;  // rate_period_ns; 0: none
  std::uint64_t queue_events = limits::kQueueEventsDefault;  // :queue, events held at once, split
                                                             // between the shards
  std::uint64_t queue_bytes = limits::kQueueBytesDefault;    // :queue, bytes held at once, likewise
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
  std::uint64_t dropped_no_memory = 0;  // no memory to encode it (trace) or queue it (commit)
  std::uint64_t wakeups = 0;
  bool closed = false;
  bool limit_reached = false;
};

// What commit() tells the caller to do.
struct CommitResult {
  Verdict verdict = Verdict::Accept;
  bool wake_consumer = false;   // the consumer found nothing left: send it a wake-up
  bool limit_reached = false;   // this event was the limit-th: the session closed

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
        events_block_(block(limits.queue_events, shards + 1)),
        bytes_block_(block(limits.queue_bytes, shards + 1)),
        pool_events_(static_cast<std::int64_t>(std::min<std::uint64_t>(limits.queue_events, kMaxCap))),
        pool_bytes_(static_cast<std::int64_t>(std::min<std::uint64_t>(limits.queue_bytes, kMaxCap))),
        block_threshold_(shards * kTicketBlock),
        rate_block_(std::clamp<std::uint64_t>(limits.rate_count / (8 * (shards + 1)), 1, kRateBlockMax)),
        budget_(shards + 1),
        pool_(limits.limit) {
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
    if (limits_.limit && !ticket_in_sight(shard)) return Verdict::DropMaxEvents;
    if (!token_in_sight(now_ns - epoch_ns_, shard)) return Verdict::DropRate;
    if (!room(shard)) return Verdict::DropQueueFull;
    return Verdict::Accept;
  }

  // For `trace`, before encoding: reserves a rate token, a place in the shard and a
  // ticket. On Accept the caller must follow with commit() or abandon() on the same
  // shard. `who` identifies the traced process (its pid term) for the drop marks.
  // Marks `who` as having lost events without an event dropped (the loop guard held its
  // calls back in `enabled`: see loop_guard.hpp).
  void mark_lost(std::uint64_t who) { drop_mark(who).fetch_add(1, std::memory_order_relaxed); }

  Verdict admit(std::int64_t now_ns, std::uint64_t who = 0, std::size_t shard = kAnyThread) {
    shard = index(shard);
    Verdict v = reserve(now_ns, shard);
    if (v != Verdict::Accept) count_drop(v, who, shard);
    return v;
  }

  // Releases what admit() reserved, without counting anything (the event never was).
  void abandon(std::size_t shard = kAnyThread) {
    give_event(index(shard));
    if (limits_.limit) give_back_ticket(index(shard));
  }

  // For `trace` when encoding the event ran out of memory: releases what admit()
  // reserved, as abandon() does, and counts the event as dropped for no memory (with its
  // process's drop mark, as every drop in trace() has).
  void abandon_no_memory(std::uint64_t who, std::size_t shard = kAnyThread) {
    abandon(shard);
    count_drop(Verdict::DropNoMemory, who, index(shard));
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
    // No fence: a wake-up missed here is caught by the consumer's recheck (see the header).
    const bool wake = pushed && hooks_.sleeping_seen(sleeping_.load(std::memory_order_relaxed)) != 0 &&
                      sleeping_.exchange(0, std::memory_order_relaxed) != 0;
    if (wake) queue_.add(shard, kWakeups, 1);
    queue_.add(shard, kPushing, kMinusOne, std::memory_order_release);
    const bool limit = limits_.limit && use_ticket(shard);
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
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < n; ++i) bytes += note_out(out[i].shard, out[i].footprint());
    if (n) {
      delivered_.store(delivered_.load(std::memory_order_relaxed) + n, std::memory_order_release);
      give_back(n, bytes);
    }
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
    c.accepted = queue_.pushed();
    c.queued = c.accepted - c.delivered - c.discarded;
    c.bytes_queued = bytes_queued();
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

  // A single-producer shard (not the fallback, whose threads may race): it keeps credit,
  // tickets and tokens of its own, written by its producer.
  bool single(std::size_t shard) const { return shard < queue_.fallback(); }

  // Takes `amount` of the credit kept in counter `which` (kCredit, kByteCredit) for
  // shard `shard`: from the shard's own, topped up from `pool` (at least a block), or
  // for the fallback exactly `amount` from `pool`. False when the pool has too little.
  bool take_credit(std::size_t shard, std::size_t which, std::atomic<std::int64_t>& pool, std::uint64_t amount,
                   std::uint64_t block) {
    const bool own = single(shard);
    const std::uint64_t have = own ? queue_.count(shard, which, std::memory_order_relaxed) : 0;
    if (have >= amount) {
      queue_.add(shard, which, 0 - amount);
      return true;
    }
    const std::uint64_t need = amount - have;
    const std::uint64_t got = draw(pool, need, own ? std::max(need, block) : need);
    if (got == 0) return false;
    if (own) queue_.add(shard, which, got - need - have);  // have + got - amount left
    return true;
  }
  // Gives back `amount` of that credit (an abandoned admission, a failed push): to the
  // shard, unless it would then keep a whole block (a shard keeps less than a block).
  void give_credit(std::size_t shard, std::size_t which, std::atomic<std::int64_t>& pool, std::uint64_t amount,
                   std::uint64_t block) {
    if (single(shard) && queue_.count(shard, which, std::memory_order_relaxed) + amount < block)
      queue_.add(shard, which, amount);
    else
      pool.fetch_add(static_cast<std::int64_t>(amount), std::memory_order_relaxed);
  }

  // One event of credit for shard `shard`: false when the cap has none left.
  bool take_event(std::size_t shard) { return take_credit(shard, kCredit, pool_events_, 1, events_block_); }
  void give_event(std::size_t shard) { give_credit(shard, kCredit, pool_events_, 1, events_block_); }

  // `bytes` of credit for shard `shard`: false when the cap has not enough left and the
  // queue holds something (an empty queue takes any one event, the pool going below 0
  // for it: see the header).
  bool take_bytes(std::size_t shard, std::uint64_t bytes) {
    if (take_credit(shard, kByteCredit, pool_bytes_, bytes, bytes_block_)) return true;
    if (bytes_queued() != 0) return false;
    const std::uint64_t have = single(shard) ? queue_.count(shard, kByteCredit, std::memory_order_relaxed) : 0;
    if (have != 0) queue_.add(shard, kByteCredit, 0 - have);
    pool_bytes_.fetch_sub(static_cast<std::int64_t>(bytes - have), std::memory_order_relaxed);
    return true;
  }
  void give_bytes(std::size_t shard, std::uint64_t bytes) { give_credit(shard, kByteCredit, pool_bytes_, bytes, bytes_block_); }

  // The consumer gives back the credit of `events` events of `bytes` bytes it drained or freed.
  void give_back(std::uint64_t events, std::uint64_t bytes) const {
    pool_events_.fetch_add(static_cast<std::int64_t>(events), std::memory_order_relaxed);
    pool_bytes_.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  }

  // Bytes queued in all shards (out first: in only grows past it).
  std::uint64_t bytes_queued() const {
    std::uint64_t out = 0;
    for (const auto& b : bytes_out_) out += b.bytes.load(std::memory_order_acquire);
    const std::uint64_t in = queue_.total(kBytesIn);
    return in > out ? in - out : 0;
  }
  // Room for one more event on shard `shard`: credit for one event, and for some bytes
  // (while the queue is empty the pool has some: see the header).
  bool room(std::size_t shard) const {
    const bool own = single(shard);
    const bool events = (own && queue_.count(shard, kCredit, std::memory_order_relaxed) != 0) ||
                        pool_events_.load(std::memory_order_relaxed) > 0;
    const bool bytes = (own && queue_.count(shard, kByteCredit, std::memory_order_relaxed) != 0) ||
                       pool_bytes_.load(std::memory_order_relaxed) > 0;
    return events && bytes;
  }

  Verdict reserve(std::int64_t now_ns, std::size_t shard) {
    if (closed()) return Verdict::DropClosed;
    if (limits_.limit && !ticket_in_sight(shard)) return Verdict::DropMaxEvents;
    if (!take_token(now_ns - epoch_ns_, shard)) return Verdict::DropRate;
    if (!take_event(shard)) return Verdict::DropQueueFull;
    if (limits_.limit && !take_ticket(shard)) {
      give_event(shard);
      return Verdict::DropMaxEvents;
    }
    return Verdict::Accept;
  }

  // :limit tickets and :rate tokens (see the header). A single-producer shard's Budget is
  // written by its producer, but for `have`, which an empty pool's taker may empty.

  // A ticket for shard `shard` is in its block, the pool or another shard's block.
  bool ticket_in_sight(std::size_t shard) const {
    if (single(shard) && budget_[shard].have.load(std::memory_order_relaxed) != 0) return true;
    if (pool_.load(std::memory_order_relaxed) != 0) return true;
    for (const Budget& b : budget_)
      if (b.have.load(std::memory_order_relaxed) != 0) return true;
    return false;
  }

  // Takes a ticket: from the shard's block, else from the pool (a block while more than
  // shards × kTicketBlock remain, else one), else from other shards' blocks. False: none left.
  bool take_ticket(std::size_t shard) {
    if (single(shard)) {
      std::atomic<std::uint64_t>& have = budget_[shard].have;
      std::uint64_t h = have.load(std::memory_order_relaxed);
      while (h != 0)
        if (have.compare_exchange_weak(h, h - 1, std::memory_order_seq_cst, std::memory_order_relaxed)) return true;
    }
    for (;;) {
      std::uint64_t p = pool_.load(std::memory_order_relaxed);
      while (p != 0) {
        const std::uint64_t n = single(shard) && p > block_threshold_ ? kTicketBlock : 1;
        if (pool_.compare_exchange_weak(p, p - n, std::memory_order_seq_cst, std::memory_order_relaxed)) {
          if (n > 1) budget_[shard].have.fetch_add(n - 1, std::memory_order_seq_cst);
          return true;
        }
      }
      if (!reclaim_tickets()) return false;
    }
  }

  // The pool is empty: moves what the shards' blocks hold into it. False: they held none.
  bool reclaim_tickets() {
    std::uint64_t got = 0;
    for (Budget& b : budget_)
      if (b.have.load(std::memory_order_relaxed) != 0) got += b.have.exchange(0, std::memory_order_seq_cst);
    if (got != 0) pool_.fetch_add(got, std::memory_order_seq_cst);
    return got != 0;
  }

  // An admitted event that was not committed gives its ticket back.
  void give_back_ticket(std::size_t shard) {
    (single(shard) ? budget_[shard].have : pool_).fetch_add(1, std::memory_order_seq_cst);
  }

  // Counts a ticket used by a commit; true for the one commit that finds all `limit`
  // used (then the session is closed).
  bool use_ticket(std::size_t shard) {
    std::atomic<std::uint64_t>& used = budget_[shard].used;
    if (single(shard))
      used.store(used.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
    else
      used.fetch_add(1, std::memory_order_seq_cst);
    if (pool_.load(std::memory_order_seq_cst) != 0) return false;
    std::uint64_t sum = 0;
    for (const Budget& b : budget_) sum += b.used.load(std::memory_order_seq_cst);
    if (sum != limits_.limit) return false;
    closed_.store(true, std::memory_order_release);
    return !limit_reached_.exchange(true, std::memory_order_acq_rel);
  }

  // A rate token for shard `shard` is in its block (not expired) or in the bucket.
  bool token_in_sight(std::int64_t now, std::size_t shard) const {
    if (single(shard) && budget_[shard].tokens.load(std::memory_order_relaxed) != 0 &&
        now < budget_[shard].expiry.load(std::memory_order_relaxed))
      return true;
    return rate_.would_admit(now);
  }

  // Takes a rate token: from the shard's block while it has not expired, else a new block
  // of up to rate_block_ from the bucket (the fallback: one from the bucket).
  bool take_token(std::int64_t now, std::size_t shard) {
    if (!rate_.limited()) return true;
    if (!single(shard) || rate_block_ == 1) return rate_.try_admit(now);
    Budget& b = budget_[shard];
    const std::uint64_t t = b.tokens.load(std::memory_order_relaxed);
    if (t != 0 && now < b.expiry.load(std::memory_order_relaxed)) {
      b.tokens.store(t - 1, std::memory_order_relaxed);
      return true;
    }
    const std::uint64_t n = rate_.take(now, rate_block_);
    b.tokens.store(n == 0 ? 0 : n - 1, std::memory_order_relaxed);
    if (n == 0) return false;
    b.expiry.store(now + limits_.rate_period_ns, std::memory_order_relaxed);
    return true;
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

  // One shard's :limit tickets and :rate tokens, on its own line (see the header).
  struct alignas(64) Budget {
    std::atomic<std::uint64_t> have{0};     // tickets of its block not yet taken
    std::atomic<std::uint64_t> used{0};     // tickets used by its commits
    std::atomic<std::uint64_t> tokens{0};   // rate tokens of its block not yet taken
    std::atomic<std::int64_t> expiry{0};    // when they expire (the session's clock)
  };
  static constexpr std::uint64_t kTicketBlock = 32;
  static constexpr std::uint64_t kRateBlockMax = 16;

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
  const std::uint64_t block_threshold_;  // tickets are taken one by one once fewer remain in pool_
  const std::uint64_t rate_block_;       // rate tokens a shard takes at once

  // read-mostly: written at close or at the :limit
  char pad_flags[64] = {};
  std::atomic<bool> closed_{false};
  std::atomic<bool> limit_reached_{false};
  std::atomic<std::uint32_t> shut_{0};  // close() was called (closed_ is also set by the limit)
  std::atomic<bool> done_{false};       // a discard() found everything freed

  // :limit only: the shards' blocks, and the tickets no shard has taken (written once
  // a block while more than block_threshold_ remain)
  std::vector<Budget> budget_;
  char pad_tickets[64] = {};
  std::atomic<std::uint64_t> pool_;

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
