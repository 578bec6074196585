// One trace session's native state, free of erl_nif: its limits, its event queue and
// its accounting. Many scheduler threads produce (the traced processes), one consumer
// drains (the session process). No locks: atomics and moodycamel's lock-free queue.
//
// Life of an event:
//   precheck()  in the VM's `enabled` callbacks: cheap, no side effect but counting the
//               drop, so a rejected event costs almost nothing (no trace term is built);
//   admit()     in `trace`: takes a rate token, a queue slot and a max_events ticket;
//   commit()    after encoding: checks the byte cap and enqueues (or abandon());
//   drain()     in the session process: hands out events in batches, in admission order.
//
// Order: commit() numbers each event (`seq`, dense) as it admits it, and a process's
// events are admitted in its own order. The queue is FIFO per producer thread only: a
// process that moved between schedulers can have a later event dequeued first. drain()
// keeps such early events in a ReorderBuffer and hands out only the run of consecutive
// numbers, so the consumer sees every event in admission order: each process's events
// in order, a return after its call. A gap is an event between its numbering and its
// enqueue in another thread (microseconds), or a hole (below); only close() makes a gap
// permanent, and it frees the buffer. Events hold their queue slot and bytes until they leave the buffer,
// so the queue caps bound the buffer too.
//
// Drops: every event dropped in trace() (admit or commit: the VM has already recorded
// it, e.g. pushed the frame a return will pop; returns come only this way) bumps a
// mark in a small table indexed by a hash of its process (drop_mark), and each
// accepted event carries its process's mark. When a
// process's mark differs from the one on its previous event, it may have lost events
// in between (or a process sharing its slot did): the consumer can then stop trusting
// what it inferred from the earlier events (open calls, depth).
//
// No memory: the queue allocates blocks as it grows, and an enqueue that finds no
// memory fails after the event has its number. The event is then dropped (no_memory):
// its queue slot and bytes go back (its max_events ticket does not: max_events counts
// numbers), and its number becomes a hole, counted in holes_. The consumer passes a
// hole once it knows every number below the latest is either held or a hole (see
// pass_holes()); the producer wakes the consumer if it was waiting for exactly that
// number, as an enqueue would.
//
// Close: shut() stops admission at once; discard() then frees what is queued and
// reports done only when every number handed out is delivered, discarded or a hole.
// A producer checks shut_ again after taking its number (the number's RMW orders the
// two, see commit()): it either drops its event (a hole) or close() waits the
// microseconds until that event is queued, and discards it. Nothing stays queued
// after close(), without a fence on the producer's path.
//
// Accounting: every offered event ends as accepted or dropped with one reason, and
//   accepted == delivered + queued + discarded    (discarded: freed by close())
// where accepted counts the numbers handed out minus the holes.
#pragma once

#include <concurrentqueue/concurrentqueue.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <mutex>
#include <thread>

#include "rate_limiter.hpp"
#include "reorder_buffer.hpp"
#include "session_event.hpp"
#include "term_codec.hpp"

namespace kino_trace {

struct Limits {
  std::uint64_t max_events = 0;           // total accepted, then the session closes; 0: none
  std::uint64_t rate_count = 0;           // rate: rate_count events per rate_period_ns; 0: none
  std::int64_t rate_period_ns = 0;
  std::uint64_t queue_events = 100000;    // events held at once
  std::uint64_t queue_bytes = 64u << 20;  // bytes held at once
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
  bool wake_consumer = false;   // the queue went from empty to non-empty
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

// QueueTraits: moodycamel's traits for the event queue (its block size and its
// allocator); tests pass an allocator that fails. Everyone else uses SessionCore.
template <class QueueTraits = moodycamel::ConcurrentQueueDefaultTraits>
class BasicSessionCore {
 public:
  BasicSessionCore(const Limits& limits, std::int64_t epoch_ns) : limits_(limits), epoch_ns_(epoch_ns) {
    rate_.configure(limits.rate_count, limits.rate_period_ns);
  }
  BasicSessionCore(const BasicSessionCore&) = delete;
  BasicSessionCore& operator=(const BasicSessionCore&) = delete;

  const Limits& limits() const { return limits_; }
  bool rate_limited() const { return rate_.limited(); }
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  // For `enabled`: would an event now be accepted? Counts the drop when not.
  // No drop mark: an event refused here is never generated at all (for a call, the VM
  // then does not run its match spec, so no return follows), nothing is half-recorded.
  Verdict precheck(std::int64_t now_ns) {
    Verdict v = peek(now_ns);
    if (v != Verdict::Accept) count_drop(v, 0, false);
    return v;
  }

  // For `enabled`'s trace_status: the same question without counting anything.
  Verdict peek(std::int64_t now_ns) const {
    if (closed()) return Verdict::DropClosed;
    if (limits_.max_events && tickets_.load(std::memory_order_relaxed) >= limits_.max_events)
      return Verdict::DropMaxEvents;
    if (!rate_.would_admit(now_ns - epoch_ns_)) return Verdict::DropRate;
    if (held(slots_in_, slots_out_) >= limits_.queue_events || held(bytes_in_, bytes_out_) >= limits_.queue_bytes)
      return Verdict::DropQueueFull;
    return Verdict::Accept;
  }

  // For `trace`, before encoding: reserves a rate token, a queue slot and a ticket.
  // On Accept the caller must follow with commit() or abandon().
  // `who` identifies the traced process (its pid term) for the drop marks.
  Verdict admit(std::int64_t now_ns, std::uint64_t who = 0) {
    Verdict v = reserve(now_ns);
    if (v != Verdict::Accept) count_drop(v, who);
    return v;
  }

  // Releases what admit() reserved, without counting anything (the event never was).
  void abandon() {
    slots_in_.fetch_sub(1, std::memory_order_relaxed);
    if (limits_.max_events) tickets_.fetch_sub(1, std::memory_order_relaxed);
  }

  CommitResult commit(Event&& event) { return CommitResult::unpack(commit_packed(std::move(event))); }

 private:
  std::uint32_t commit_packed(Event&& event) {
    if (shut_.load(std::memory_order_acquire)) {  // close() ran since admit(): never enqueue
      abandon();
      count_drop(Verdict::DropClosed, event.pid);
      return CommitResult::pack(Verdict::DropClosed, false, false);
    }
    std::uint64_t bytes = event.footprint();
    std::uint64_t before = since(bytes_in_.fetch_add(bytes, std::memory_order_relaxed), bytes_out_);
    if (before != 0 && before + bytes > limits_.queue_bytes) {  // an empty queue takes any one event
      bytes_in_.fetch_sub(bytes, std::memory_order_relaxed);
      abandon();
      count_drop(Verdict::DropQueueFull, event.pid);
      return CommitResult::pack(Verdict::DropQueueFull, false, false);
    }
    // The process's own earlier drops happened before this, in its own order.
    const std::uint64_t who = event.pid;
    event.drops = drop_mark(who).load(std::memory_order_relaxed);
    // Counted before it becomes visible, so delivered can never overtake accepted. The
    // count before is the event's number.
    const std::uint64_t seq = numbered_.fetch_add(1, std::memory_order_seq_cst);
    event.seq = seq;
    // close() may have run since the check above. The number just taken and shut_ form
    // a Dekker pair with shut()/settled(): shut() stores shut_, then (after a seq_cst
    // fence) settled() loads numbered_; here the seq_cst RMW on numbered_ comes before
    // this seq_cst load of shut_. So either this load sees shut_ set, and the number
    // becomes a hole (dropped: closed), or close() sees this number and waits until its
    // event is in the queue, then discards it. Nothing stays queued after close(), and
    // no fence is needed here: the RMW above already orders the two (a fence after the
    // enqueue cost half of commit()'s time in a profile of the benchmark, draining the
    // store buffer a second time per event; issue 26).
    Verdict drop = Verdict::Accept;
    if (shut_.load(std::memory_order_seq_cst) != 0) {
      drop = Verdict::DropClosed;
    } else if (!queue_.enqueue(std::move(event))) {  // no memory for a block: `event` is intact
      drop = Verdict::DropNoMemory;
    }
    if (drop != Verdict::Accept) {
      bytes_in_.fetch_sub(bytes, std::memory_order_relaxed);
      slots_in_.fetch_sub(1, std::memory_order_relaxed);
      holes_.fetch_add(1, std::memory_order_seq_cst);  // before the wake-up check below
      count_drop(drop, who);
    }
    const bool limit = limits_.max_events && seq + 1 == limits_.max_events && drop != Verdict::DropClosed;
    if (limit) {
      closed_.store(true, std::memory_order_release);
      limit_reached_.store(true, std::memory_order_release);
    }
    // Wake the consumer when the queue was empty as far as it knows: everything accepted
    // before this event has been consumed, i.e. this is the event it expects next (also
    // when it holds later events in its reorder buffer, waiting for this one, and when
    // this event is a hole: the consumer must then pass it, and the next event would
    // not wake it, as it does not follow what the consumer has consumed). Together
    // with drain()'s store-then-load of
    // the same two counters (seq_cst on both sides), a consumer that stops draining is
    // always woken by the next event, and the producer only reads the consumer's line.
    const bool wake = consumed_.load(std::memory_order_seq_cst) == seq;
    if (wake) wakeups_.fetch_add(1, std::memory_order_relaxed);
    return CommitResult::pack(drop, wake, limit);
  }

 public:
  // Moves up to `max` events into `out`, in admission order (seq). Returns how many;
  // `more` tells whether events may remain (the consumer should drain again): it stays
  // true while the reorder buffer holds events waiting for an earlier one, so the
  // consumer keeps polling until the gap fills (its producer also wakes it, see commit())
  // or turns out to be a hole. After close() it is false: nothing more is handed out.
  std::size_t drain(Event* out, std::size_t max, bool& more) {
    std::lock_guard<std::mutex> lock(consumer_);
    std::size_t n = 0;
    std::size_t passed = 0;  // holes passed
    std::uint64_t bytes = 0;
    if (shut_.load(std::memory_order_acquire)) {
      discard_reorder();  // the gaps may never fill
      more = false;
      return 0;
    }
    auto hand_out = [&](Event&& e) {
      bytes += e.footprint();
      out[n++] = std::move(e);
    };
    while (n < max && reorder_.ready()) hand_out(reorder_.take());
    Event batch[kBatch];
    bool emptied = false;  // the queue was found empty
    // Dequeues at most max + kAhead events per call, even while waiting for a gap
    // (the caller drains again: `more` stays true).
    for (std::size_t taken = 0; n < max && taken < max + kAhead;) {
      std::size_t want = max - n < kBatch ? max - n : kBatch;
      std::size_t got = queue_.try_dequeue_bulk(token_, batch, want);
      taken += got;
      for (std::size_t i = 0; i < got; ++i) {
        if (batch[i].seq == reorder_.next() && n < max) {
          reorder_.skip();
          hand_out(std::move(batch[i]));
          while (n < max && reorder_.ready()) hand_out(reorder_.take());
        } else {
          reorder_.put(std::move(batch[i]));
        }
      }
      if (got == 0) {
        emptied = true;
        break;
      }
    }
    if (emptied && n < max && !reorder_.ready()) passed = pass_holes(out, n, max, bytes);
    reorder_.trim();
    settle(n, bytes, delivered_);
    std::uint64_t consumed = n + passed ? consumed_.fetch_add(n + passed, std::memory_order_seq_cst) + n + passed
                                        : consumed_.load(std::memory_order_seq_cst);
    more = numbered_.load(std::memory_order_seq_cst) > consumed;
    return n;
  }

  // Events the consumer holds back, waiting for an earlier one (for tests).
  std::size_t reordering() {
    std::lock_guard<std::mutex> lock(consumer_);
    return reorder_.size();
  }

  // Closes the session: nothing more is accepted. Frees what is still queued (counted
  // as discarded). Safe to call more than once.
  void close() {
    shut();
    while (!discard(~std::size_t{0})) std::this_thread::yield();  // a producer mid-enqueue
  }

  // close() in two steps, for a caller that must not run long at once: shut() (constant
  // time) then discard(max) until it returns true. After shut(), nothing more is
  // queued: a producer that was already past admit() either sees shut_ after taking its
  // number (a hole, dropped: closed) or is waited for by discard() (see commit()).
  void shut() {
    closed_.store(true, std::memory_order_release);
    shut_.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with commit()'s RMW, see there
  }
  // Frees up to about `max` queued events (counted as discarded); true once none is left
  // and every numbered event is accounted for (delivered, discarded or a hole): a
  // producer that took its number before shut() may still be enqueueing (microseconds),
  // so false means "call again", also when nothing was freed.
  // The reorder buffer goes first, at once (it holds at most the queue's cap).
  bool discard(std::size_t max) {
    {
      std::lock_guard<std::mutex> lock(consumer_);
      discard_reorder();
    }
    return discard_queued(max) && settled();
  }

  Counters counters() const {
    Counters c;
    // Read the consumer's side first: accepted only grows, and never lags it.
    c.delivered = delivered_.load(std::memory_order_acquire);
    c.discarded = discarded_.load(std::memory_order_acquire);
    std::uint64_t holes = holes_.load(std::memory_order_acquire);  // before the numbers: never more
    c.accepted = numbered_.load(std::memory_order_acquire) - holes;
    c.queued = c.accepted - c.delivered - c.discarded;
    c.bytes_queued = held(bytes_in_, bytes_out_);
    c.dropped_closed = dropped_closed_.load(std::memory_order_relaxed);
    c.dropped_rate = dropped_rate_.load(std::memory_order_relaxed);
    c.dropped_queue_full = dropped_queue_full_.load(std::memory_order_relaxed);
    c.dropped_max_events = dropped_max_events_.load(std::memory_order_relaxed);
    c.dropped_no_memory = dropped_no_memory_.load(std::memory_order_relaxed);
    c.wakeups = wakeups_.load(std::memory_order_relaxed);
    c.closed = closed();
    c.limit_reached = limit_reached_.load(std::memory_order_acquire);
    return c;
  }

 private:
  // After shut(): every number handed out is delivered, discarded or a hole. Holes
  // first: each of them has a number, so this never counts an event twice.
  bool settled() const {
    std::uint64_t holes = holes_.load(std::memory_order_seq_cst);
    std::uint64_t numbered = numbered_.load(std::memory_order_seq_cst);
    return numbered - holes == delivered_.load(std::memory_order_acquire) + discarded_.load(std::memory_order_acquire);
  }

  // Passes the holes at the front of the reorder buffer, handing out the events between
  // them (up to `max` in all), when it is sure they are holes: the queue was just found
  // empty, and the numbers handed out so far are exactly those the buffer holds, those
  // already consumed and the holes not yet passed. No event is then on its way, so
  // every number below the latest that the buffer does not hold is a hole. Otherwise
  // it passes nothing: the caller drains again (`more`), and the check is repeated.
  // Returns how many holes it passed. `consumer_` held.
  std::size_t pass_holes(Event* out, std::size_t& n, std::size_t max, std::uint64_t& bytes) {
    std::uint64_t holes = holes_.load(std::memory_order_seq_cst);  // first: each of these has a number
    if (holes == holes_passed_) return 0;
    std::uint64_t numbered = numbered_.load(std::memory_order_seq_cst);
    if (numbered - reorder_.next() != reorder_.size() + (holes - holes_passed_)) return 0;  // one is on its way
    std::size_t passed = 0;
    while (reorder_.next() < numbered) {
      if (reorder_.ready()) {
        if (n == max) break;
        Event e = reorder_.take();
        bytes += e.footprint();
        out[n++] = std::move(e);
      } else {
        reorder_.skip();
        ++passed;
      }
    }
    holes_passed_ += passed;
    return passed;
  }

  // Frees the events the consumer held back (after shut(); `consumer_` held).
  void discard_reorder() {
    if (reorder_.empty()) return;
    std::size_t n = reorder_.size();
    std::uint64_t bytes = 0;
    reorder_.clear([&](const Event& e) { bytes += e.footprint(); });
    settle(n, bytes, discarded_);
    consumed_.fetch_add(n, std::memory_order_seq_cst);
  }

  // Frees queued events, counted as discarded (close()): all of them, or about `max`.
  // True when the queue was found empty. Not the reorder buffer (the consumer's).
  bool discard_queued(std::size_t max = ~std::size_t{0}) {
    Event scratch[64];
    for (std::size_t done = 0;; ) {
      if (done >= max) return false;
      std::size_t n = queue_.try_dequeue_bulk(scratch, 64);
      if (n == 0) return true;
      done += n;
      std::uint64_t bytes = 0;
      for (std::size_t i = 0; i < n; ++i) {
        bytes += scratch[i].footprint();
        scratch[i] = Event{};
      }
      settle(n, bytes, discarded_);
      consumed_.fetch_add(n, std::memory_order_seq_cst);
    }
  }

  Verdict reserve(std::int64_t now_ns) {
    if (closed()) return Verdict::DropClosed;
    if (limits_.max_events && tickets_.load(std::memory_order_relaxed) >= limits_.max_events)
      return Verdict::DropMaxEvents;
    if (!rate_.try_admit(now_ns - epoch_ns_)) return Verdict::DropRate;
    if (since(slots_in_.fetch_add(1, std::memory_order_relaxed), slots_out_) >= limits_.queue_events) {
      slots_in_.fetch_sub(1, std::memory_order_relaxed);
      return Verdict::DropQueueFull;
    }
    if (limits_.max_events && tickets_.fetch_add(1, std::memory_order_relaxed) >= limits_.max_events) {
      tickets_.fetch_sub(1, std::memory_order_relaxed);
      slots_in_.fetch_sub(1, std::memory_order_relaxed);
      return Verdict::DropMaxEvents;
    }
    return Verdict::Accept;
  }

  void settle(std::size_t n, std::uint64_t bytes, std::atomic<std::uint64_t>& into) {
    if (n == 0) return;
    bytes_out_.fetch_add(bytes, std::memory_order_relaxed);
    slots_out_.fetch_add(n, std::memory_order_relaxed);
    into.fetch_add(n, std::memory_order_acq_rel);
  }

  // What a pair of monotonic in/out counters holds: `in` (the value an RMW just read)
  // minus `out`, clamped at 0 (a relaxed `out` may be newer than that `in`).
  static std::uint64_t since(std::uint64_t in, const std::atomic<std::uint64_t>& out) {
    std::uint64_t o = out.load(std::memory_order_relaxed);
    return in > o ? in - o : 0;
  }
  // The same for a reader of both (out first: in only grows past it).
  static std::uint64_t held(const std::atomic<std::uint64_t>& in, const std::atomic<std::uint64_t>& out) {
    std::uint64_t o = out.load(std::memory_order_acquire);
    std::uint64_t i = in.load(std::memory_order_acquire);
    return i > o ? i - o : 0;
  }

  // The drop mark of the process `who`: one of kDropMarks counters, by a hash of its
  // pid term, bumped by each of its drops (and those of the processes sharing it).
  std::atomic<std::uint64_t>& drop_mark(std::uint64_t who) {
    return drop_marks_[(who * 0x9E3779B97F4A7C15ull) >> (64 - kDropMarkBits)];
  }

  void count_drop(Verdict v, std::uint64_t who, bool mark = true) {
    if (mark && v != Verdict::Accept) drop_mark(who).fetch_add(1, std::memory_order_relaxed);
    switch (v) {
      case Verdict::DropClosed: dropped_closed_.fetch_add(1, std::memory_order_relaxed); break;
      case Verdict::DropRate: dropped_rate_.fetch_add(1, std::memory_order_relaxed); break;
      case Verdict::DropQueueFull: dropped_queue_full_.fetch_add(1, std::memory_order_relaxed); break;
      case Verdict::DropMaxEvents: dropped_max_events_.fetch_add(1, std::memory_order_relaxed); break;
      case Verdict::DropNoMemory: dropped_no_memory_.fetch_add(1, std::memory_order_relaxed); break;
      case Verdict::Accept: break;
    }
  }

  static constexpr std::size_t kBatch = 32;  // events dequeued at once by drain()
  static constexpr std::size_t kAhead = 4096;  // more events drain() may set aside
  static constexpr unsigned kDropMarkBits = 10;

  const Limits limits_;
  const std::int64_t epoch_ns_;
  RateLimiter rate_;
  moodycamel::ConcurrentQueue<Event, QueueTraits> queue_;
  // The consumer's side: its queue token (it visits the producers in turn, a bounded
  // number of events each, which keeps the reorder buffer small) and the buffer. drain() and
  // discard() take the mutex (never contended in practice: one session process).
  std::mutex consumer_;
  moodycamel::ConsumerToken token_{queue_};
  ReorderBuffer reorder_;
  std::uint64_t holes_passed_ = 0;  // holes the consumer has passed (see pass_holes)

  // The atomics are grouped by who writes them, one cache line per group, so the traced
  // processes' per-event writes do not keep pulling lines away from the session process
  // (which writes its side once per drained batch) and the read-mostly flags stay shared.
  // Queue occupancy is `in - out` of two monotonic counters, one per side. Padding rather
  // than alignas: the NIF places this object in enif_alloc_resource memory, which is not
  // 64-byte aligned; 64 bytes between groups keep them off each other's lines anyway.

  // read-mostly: written at close or at the max_events limit
  std::atomic<bool> closed_{false};
  std::atomic<bool> limit_reached_{false};
  std::atomic<std::uint32_t> shut_{0};     // close() was called (closed_ is also set by the limit)

  // producers (the traced processes), per accepted event
  char pad_slots_in[64] = {};
  std::atomic<std::uint64_t> slots_in_{0};  // queue slots reserved (minus abandoned)
  std::atomic<std::uint64_t> bytes_in_{0};
  std::atomic<std::uint64_t> numbered_{0};  // numbers handed out: accepted events and holes
  std::atomic<std::uint64_t> tickets_{0};  // max_events tickets handed out
  std::atomic<std::uint64_t> wakeups_{0};  // written only when a producer wakes the consumer

  // producers, per dropped event
  char pad_dropped_closed[64] = {};
  std::atomic<std::uint64_t> dropped_closed_{0};
  std::atomic<std::uint64_t> dropped_rate_{0};
  std::atomic<std::uint64_t> dropped_queue_full_{0};
  std::atomic<std::uint64_t> dropped_max_events_{0};
  std::atomic<std::uint64_t> dropped_no_memory_{0};
  std::atomic<std::uint64_t> holes_{0};  // numbers whose event never reached the queue

  // the consumer (drain) and close(), per batch
  char pad_slots_out[64] = {};
  std::atomic<std::uint64_t> slots_out_{0};
  std::atomic<std::uint64_t> bytes_out_{0};
  std::atomic<std::uint64_t> delivered_{0};
  std::atomic<std::uint64_t> discarded_{0};
  std::atomic<std::uint64_t> consumed_{0};  // delivered + discarded + holes passed: the wake-up protocol's side

  // written on drops, read once per accepted event
  char pad_drop_marks[64] = {};
  std::atomic<std::uint64_t> drop_marks_[std::size_t{1} << kDropMarkBits] = {};
};

using SessionCore = BasicSessionCore<>;

}  // namespace kino_trace
