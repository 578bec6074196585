// Per-shard single-producer queues, merged by timestamp in causal order; free of erl_nif.
// The building block of issue 26's per-scheduler shards: the traced process writes only
// its own shard's lines (no read-modify-write shared with other producers), and the one
// consumer (the session process) merges the shards.
//
// Shards: `shards` single-producer shards, indexes 0 .. shards-1 (one per normal
// scheduler: the caller maps the scheduler id the VM passes in the trace options to one),
// and one shared fallback shard, index fallback() (dirty schedulers, other threads),
// whose producers take a mutex. Producer (RAII) is the producer's handle: at most one
// thread at a time may hold one for a given single-producer shard (a scheduler thread
// runs one process at a time, so keying by scheduler id gives that).
//
// Per-shard counters: add() (or Producer::bump()) adds to one of kCounters counters of
// a shard, with a relaxed load and store on a single-producer shard (no RMW: only that
// thread writes them) and a relaxed fetch_add on the fallback shard (its threads may
// count without holding its mutex); total() sums them over the shards for a reader,
// which may see a sum a few events old but never a torn value.
//
// Order. Each item carries a monotonic timestamp (`time_ns`); a shard's items are FIFO
// and their timestamps never decrease (push() raises a timestamp below the shard's last
// to that last one). pop() hands items out merged by timestamp, and keeps causal order:
//
//   INVARIANT. If push(e1) returned before the push of e2 began (in the happens-before
//   sense: e.g. a process pushed e1, then migrated, through the VM's run-queue locks, to
//   another scheduler and pushed e2), and e1's timestamp is below e2's, then pop() hands
//   out e1 before e2.
//
// So a process's events come out in its own order however it moves between schedulers
// (its events on different shards are separated by a migration, microseconds, against a
// clock of 1 ns resolution: their timestamps differ), and so do causally related events
// of different processes (a send before its receive).
//
// How: each shard is a lane (shard_lanes.hpp: an explicit producer of one
// moodycamel::ConcurrentQueue, or a SpscQueue), which publishes its tail, the count of
// items pushed (a release store after the item is in place), and never hands the consumer
// an item past the tail it read. The consumer stages what it dequeues in a
// per-shard buffer. A refill (1) dequeues the items visible in every shard, at most
// `per_shard` of each, then (2) reads every shard's tail and, when it is past what is
// staged, dequeues one more item ("catch-up"). Every item staged before (2) began is
// *confirmed*: each of its causal predecessors was pushed before it was visible, so (2)
// reads a tail that includes them: each is staged, or comes after the catch-up's item in
// its shard, with a timestamp no smaller. Items staged by the catch-up are not confirmed
// (their predecessors may sit in a shard whose tail (2) read earlier) and act as a
// watermark: pop() releases confirmed items, smallest timestamp first, no newer than the
// oldest unconfirmed one; the next refill confirms the rest. A released item's
// predecessors (smaller timestamps, by the invariant's premise) are then staged and
// released before it, or hold it back through the watermark: a shard's timestamps never
// decrease, so a predecessor not staged has one at least the watermark's, and the item
// a larger one. (Equal timestamps pass: a shard's own items are FIFO, and a predecessor
// elsewhere has a smaller one; items all stamped alike flow in one pop.) The bound keeps a
// refill's work and the staging's memory to about `per_shard` items a shard, however
// long the queues are.
// An item still being pushed (in flight) cannot precede a confirmed item, so no
// in-flight timestamp, clock read or fence is needed: the producer's path is its
// enqueue, one release store of its tail and its counters, all on its shard's lines.
// (Issue 26 proposed publishing each shard's in-flight timestamp and releasing only what
// is older than the oldest one, or than the consumer's clock for an idle shard; that
// needs a full barrier between the producer's store and its clock read. The catch-up
// gives the same causal order without one; it does not promise a global time order
// between unrelated events, which nothing downstream relies on.)
//
// One shard at a time (the common case: one busy process, or several on one scheduler):
// when nothing is staged, pop() looks at every shard's tail; if exactly one shard (A) has
// items, it reads A's tail again, then every other shard's, and if they still show nothing
// it hands out A's items up to that tail straight from A's queue, in A's order, with no
// staging (a refill moves each item twice more and merges by timestamp for nothing).
// This is the refill's confirmation with an empty first pass elsewhere: an item of A up to
// the tail read is visible, so each of its causal predecessors was pushed before that read
// and is visible to the later reads of the other tails; they show nothing undelivered, so
// every predecessor was handed out already (nothing is staged). Anything else (items in
// two shards, or a shard that filled between the two looks) takes the merge.
//
// Memory: the consumer's staging holds what it dequeued until pop() hands it out; the
// caller's caps (per shard, on pushed minus released()) bound both.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "shard_lanes.hpp"

namespace kino_trace {

// Tests observe a pop through Hooks: after_first_pass(i) runs once a refill's first pass
// has staged shard i (a producer pushing there lands between the two passes), and
// after_look(i) once the one-shard path's first look has read shard i's tail.
struct ShardedQueueNoHooks {
  void after_first_pass(std::size_t) {}
  void after_look(std::size_t) {}
};

// kBlock and Alloc: the shards' queues' blocks and memory (tests pass small blocks and an
// allocator that fails). Lanes: the queues themselves (shard_lanes.hpp).
template <class T, class Hooks = ShardedQueueNoHooks, std::size_t kBlock = 64, class Alloc = SpscNewDelete,
          class Lanes = ShardLanes<T, kBlock, Alloc>>
class ShardedQueue {
 public:
  static constexpr std::size_t kCounters = 10;

 private:
  // One shard: a line the producer writes, then one the consumer writes (its queue is
  // lane i of lanes_).
  struct alignas(64) Shard {
    std::int64_t last_ns = std::numeric_limits<std::int64_t>::min();
    std::atomic<std::uint64_t> counts[kCounters] = {};
    alignas(64) std::atomic<std::uint64_t> released{0};
  };

 public:
  explicit ShardedQueue(std::size_t shards)
      : lanes_(shards + 1), shards_(shards + 1), staging_(shards + 1), taken_(shards + 1) {}
  ShardedQueue(const ShardedQueue&) = delete;
  ShardedQueue& operator=(const ShardedQueue&) = delete;

  // Shards in all, the fallback included.
  std::size_t shard_count() const { return shards_.size(); }
  std::size_t fallback() const { return shards_.size() - 1; }

  // The producer's handle on one shard; holds the fallback shard's mutex while it lives.
  class Producer {
   public:
    Producer(ShardedQueue& q, std::size_t shard)
        : index_(shard < q.fallback() ? shard : q.fallback()), shard_(q.shards_[index_]), q_(q) {
      if (index_ == q.fallback()) lock_ = std::unique_lock<std::mutex>(q.fallback_mutex_);
    }
    Producer(const Producer&) = delete;
    Producer& operator=(const Producer&) = delete;

    // Enqueues `item` (its timestamp raised to the shard's last if below). False when the
    // queue could not allocate a block: `item` is then left in place (its timestamp
    // perhaps raised) and nothing counted.
    bool push(T&& item) {
      if (item.time_ns < shard_.last_ns) item.time_ns = shard_.last_ns;
      const std::int64_t t = item.time_ns;
      if (!q_.lanes_.push(index_, std::move(item))) return false;
      shard_.last_ns = t;
      return true;
    }

    // Adds `n` to counter `which` of this shard (see add()).
    void bump(std::size_t which, std::uint64_t n = 1) { q_.add(index_, which, n); }
    // What this shard holds: pushed and not yet handed out or discarded by the consumer.
    std::uint64_t held() const { return q_.held(index_); }

   private:
    std::size_t index_;
    Shard& shard_;
    ShardedQueue& q_;
    std::unique_lock<std::mutex> lock_;
  };

  // Adds `n` to counter `which` of shard `shard` (past the shards: the fallback) and
  // returns its value before. Only the shard's producer thread may call it for a
  // single-producer shard (a relaxed load and store); any thread for the fallback (a
  // relaxed fetch_add). `n` may be a negative number's two's complement. `order`: the
  // store's (or the fetch_add's), relaxed unless the caller publishes something with it.
  std::uint64_t add(std::size_t shard, std::size_t which, std::uint64_t n = 1,
                    std::memory_order order = std::memory_order_relaxed) {
    if (shard >= fallback()) return shards_[fallback()].counts[which].fetch_add(n, order);
    std::atomic<std::uint64_t>& c = shards_[shard].counts[which];
    const std::uint64_t before = c.load(std::memory_order_relaxed);
    c.store(before + n, order);
    return before;
  }
  // Counter `which` of one shard, and summed over the shards.
  std::uint64_t count(std::size_t shard, std::size_t which,
                      std::memory_order order = std::memory_order_relaxed) const {
    return shards_[shard].counts[which].load(order);
  }
  // What shard `shard` holds: pushed and not yet handed out or discarded by the consumer.
  std::uint64_t held(std::size_t shard) const {
    std::uint64_t out = shards_[shard].released.load(std::memory_order_relaxed);
    std::uint64_t in = lanes_.pushed(shard);
    return in > out ? in - out : 0;
  }
  // Items pushed to shard `shard`.
  std::uint64_t pushed(std::size_t shard) const { return lanes_.pushed(shard); }

  std::uint64_t total(std::size_t which) const {
    std::uint64_t sum = 0;
    for (const Shard& s : shards_) sum += s.counts[which].load(std::memory_order_relaxed);
    return sum;
  }
  // Items pushed, over all shards.
  std::uint64_t pushed() const {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < shards_.size(); ++i) sum += lanes_.pushed(i);
    return sum;
  }
  // Items of shard `shard` handed out or discarded by the consumer (for per-shard caps).
  std::uint64_t released(std::size_t shard) const { return shards_[shard].released.load(std::memory_order_relaxed); }

  // Consumer (one thread at a time). Moves up to `max` items into `out`, merged by
  // timestamp in causal order (see the invariant above); returns how many. `more`: items
  // are staged or pushed and not yet staged, so the consumer should pop again.
  std::size_t pop(T* out, std::size_t max, bool& more) {
    std::size_t n = staged_ == 0 && max > 0 ? pop_one_shard(out, max) : kMerge;
    if (n == kMerge) {
      n = release(out, max);
      if (n < max) {
        refill(max - n < kBatch ? kBatch : max - n);
        n += release(out + n, max - n);
      }
    }
    more = staged_ != 0 || pushed() != dequeued_;
    return n;
  }

  // Consumer: frees staged and queued items, calling `f(item)` on each first (counted as
  // released), until about `max` are freed (whole batches) or none is left. Returns how
  // many. Items pushed meanwhile may remain (see empty()).
  template <class F>
  std::size_t discard(F&& f, std::size_t max = std::numeric_limits<std::size_t>::max()) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < staging_.size() && n < max; ++i) {
      Staging& st = staging_[i];
      std::size_t k = 0;
      for (; !st.items.empty() && n + k < max; ++k) {
        T item = std::move(st.items.front());  // freed here, not when the rest is handed out
        st.items.pop_front();
        f(item);
      }
      if (st.unconfirmed > st.items.size()) st.unconfirmed = st.items.size();
      staged_ -= k;
      T batch[kBatch];
      for (std::size_t got; n + k < max && (got = lanes_.pop(i, batch, kBatch)) != 0;) {
        for (std::size_t j = 0; j < got; ++j) {
          f(batch[j]);
          batch[j] = T{};
        }
        st.dequeued += got;
        dequeued_ += got;
        k += got;
      }
      note_released(i, k);
      n += k;
    }
    return n;
  }

  // Consumer: nothing is staged and every item pushed so far has been dequeued.
  bool empty() const { return staged_ == 0 && pushed() == dequeued_; }

  // Items the consumer has staged (for tests).
  std::size_t staged() const { return staged_; }
  Hooks& hooks() { return hooks_; }

 private:
  static constexpr std::size_t kBatch = 32;

  // The consumer's view of one shard: what it dequeued and has not handed out, the last
  // `unconfirmed` of them staged by a catch-up (see the header).
  // A FIFO of staged items in one vector that keeps its capacity from drain to drain (a
  // std::deque of 200-byte events allocated a node every two). Handed-out items stay
  // behind `head` (moved from) until the rest is handed out too or they are half of it.
  class Staged {
   public:
    std::size_t size() const { return items_.size() - head_; }
    bool empty() const { return size() == 0; }
    T& front() { return items_[head_]; }
    const T& front() const { return items_[head_]; }
    T& operator[](std::size_t i) { return items_[head_ + i]; }
    void pop_front() {
      if (++head_ == items_.size()) {
        items_.clear();
        head_ = 0;
      }
    }
    // Room for `n` more push_back()s: the only allocation, made before the caller takes
    // the items out of its queue, so one that fails (std::bad_alloc) loses nothing.
    void make_room(std::size_t n) {
      compact();
      if (items_.capacity() - items_.size() < n) items_.reserve(std::max(items_.size() + n, 2 * items_.capacity()));
    }
    void push_back(T&& item) {
      compact();
      items_.push_back(std::move(item));
    }

   private:
    void compact() {
      if (head_ > 0 && head_ >= items_.size() / 2) {
        items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
        head_ = 0;
      }
    }

    std::vector<T> items_;
    std::size_t head_ = 0;
  };

  struct Staging {
    Staged items;
    std::size_t unconfirmed = 0;
    std::uint64_t dequeued = 0;
  };

  static constexpr std::size_t kMerge = std::numeric_limits<std::size_t>::max();

  // Shard i's tail is past what the consumer has dequeued from it.
  bool undequeued(std::size_t i) const { return lanes_.pushed(i) != staging_[i].dequeued; }

  // The one-shard path (see the header): with nothing staged, hands out up to `max` items
  // of the only shard that has any, straight from its queue. kMerge when not exactly one
  // shard has items, or another one got some meanwhile: the caller merges instead.
  std::size_t pop_one_shard(T* out, std::size_t max) {
    std::size_t only = kMerge;
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      const bool has = undequeued(i);
      hooks_.after_look(i);
      if (!has) continue;
      if (only != kMerge) return kMerge;
      only = i;
    }
    if (only == kMerge) return kMerge;
    Staging& st = staging_[only];
    const std::uint64_t tail = lanes_.pushed(only);
    for (std::size_t j = 0; j < shards_.size(); ++j)
      if (j != only && undequeued(j)) return kMerge;
    const std::size_t got = lanes_.pop(only, out, static_cast<std::size_t>(std::min<std::uint64_t>(max, tail - st.dequeued)));
    st.dequeued += got;
    dequeued_ += got;
    note_released(only, got);
    return got;
  }

  // Dequeues up to `max` (or all) visible items of shard `i` into its staging.
  std::size_t stage(std::size_t i, std::uint64_t max) {
    Staging& st = staging_[i];
    T batch[kBatch];
    std::size_t total = 0;
    while (total < max) {
      std::size_t want = max - total < kBatch ? static_cast<std::size_t>(max - total) : kBatch;
      st.items.make_room(want);
      std::size_t got = lanes_.pop(i, batch, want);
      if (got == 0) break;
      for (std::size_t j = 0; j < got; ++j) st.items.push_back(std::move(batch[j]));
      total += got;
    }
    st.dequeued += total;
    dequeued_ += total;
    staged_ += total;
    return total;
  }

  // (1) what is visible, at most `per_shard` of each shard, then (2) the catch-up: one
  // item of each shard whose tail is past what is staged (see the header).
  void refill(std::uint64_t per_shard) {
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      stage(i, per_shard);
      hooks_.after_first_pass(i);
    }
    for (Staging& st : staging_) st.unconfirmed = 0;  // all staged before (2): confirmed
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      Staging& st = staging_[i];
      if (undequeued(i)) st.unconfirmed += stage(i, 1);
    }
  }

  // Hands out confirmed items, smallest timestamp first, no newer than the oldest
  // unconfirmed one.
  std::size_t release(T* out, std::size_t max) {
    std::int64_t watermark = std::numeric_limits<std::int64_t>::max();
    bool capped = false;  // some item is unconfirmed: `watermark` holds
    for (Staging& st : staging_) {
      if (st.unconfirmed == 0) continue;
      const std::int64_t first = st.items[st.items.size() - st.unconfirmed].time_ns;
      if (!capped || first < watermark) watermark = first;
      capped = true;
    }
    std::size_t n = 0;
    std::vector<std::size_t>& taken = taken_;
    taken.assign(staging_.size(), 0);
    while (n < max) {
      std::size_t best = staging_.size();
      for (std::size_t i = 0; i < staging_.size(); ++i) {
        const Staging& st = staging_[i];
        if (st.items.size() == st.unconfirmed) continue;
        if (best == staging_.size() || st.items.front().time_ns < staging_[best].items.front().time_ns) best = i;
      }
      if (best == staging_.size()) break;
      Staging& st = staging_[best];
      if (capped && st.items.front().time_ns > watermark) break;
      out[n++] = std::move(st.items.front());
      st.items.pop_front();
      ++taken[best];
    }
    for (std::size_t i = 0; i < staging_.size(); ++i) note_released(i, taken[i]);
    staged_ -= n;
    return n;
  }

  void note_released(std::size_t i, std::uint64_t n) {
    if (n == 0) return;
    std::atomic<std::uint64_t>& r = shards_[i].released;
    r.store(r.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  Lanes lanes_;
  std::vector<Shard> shards_;
  std::mutex fallback_mutex_;
  Hooks hooks_;
  // The consumer's.
  std::vector<Staging> staging_;
  std::vector<std::size_t> taken_;
  std::uint64_t dequeued_ = 0;  // over all shards
  std::size_t staged_ = 0;
};

}  // namespace kino_trace
