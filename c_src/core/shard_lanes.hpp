// The queues under a ShardedQueue's shards (issue 40): one FIFO lane per shard, each with
// one producer at a time and one consumer; free of erl_nif. Two implementations with one
// interface, and the two together (ShardLanes, at the end, which chooses):
//
//   MoodycamelLanes  one moodycamel::ConcurrentQueue (the design card's queue) with an
//                    explicit ProducerToken per lane: a lane's enqueue touches only that
//                    producer's block and indices; the consumer takes a lane's items in
//                    order with try_dequeue_bulk_from_producer.
//   SpscLanes        one SpscQueue per lane (issue 26's hand-written queue).
//   ShardLanes       SpscLanes for the scheduler shards, MoodycamelLanes for the shared
//                    one (issue 40's A/B; ShardedQueue's lanes).
//
// The interface, for lane i in 0 .. lanes-1:
//   bool push(i, T&&)             producer: false when no memory (the item left intact)
//   std::uint64_t pushed(i)       any thread: items pushed so far, published (a release
//                                 store) after each item is in place: the lane's tail
//   std::size_t pop(i, out, max)  consumer: up to `max` items, oldest first, never past
//                                 the tail pushed(i) read, so what the consumer has taken
//                                 from a lane never exceeds its pushed(i)
// Alloc: where memory comes from (SpscNewDelete's interface; tests pass one that fails).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include <concurrentqueue.h>

#if defined(__SANITIZE_THREAD__)
#define KINO_TRACE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KINO_TRACE_TSAN 1
#endif
#endif
#ifdef KINO_TRACE_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#include "spsc_queue.hpp"

namespace kino_trace {

template <class T, std::size_t kBlock, class Alloc>
class SpscLanes {
 public:
  explicit SpscLanes(std::size_t lanes) : lanes_(lanes) {}

  bool push(std::size_t i, T&& item) { return lanes_[i].queue.push(std::move(item)); }
  std::uint64_t pushed(std::size_t i) const { return lanes_[i].queue.pushed(); }
  std::size_t pop(std::size_t i, T* out, std::size_t max) { return lanes_[i].queue.pop(out, max); }

 private:
  struct alignas(64) Lane {
    SpscQueue<T, kBlock, Alloc> queue;
  };
  std::vector<Lane> lanes_;
};

// moodycamel's traits: blocks of kBlock items, explicit producers only (no implicit
// producer hash: nothing thread_local, no allocation keyed by thread), memory from Alloc.
// Traits::malloc returns nullptr when there is none, and moodycamel then fails the
// enqueue (returns false): a counted drop, never an exception (see MoodycamelLanes).
template <std::size_t kBlock, class Alloc>
struct MoodycamelTraits : moodycamel::ConcurrentQueueDefaultTraits {
  static const std::size_t BLOCK_SIZE = kBlock;
  static const std::size_t INITIAL_IMPLICIT_PRODUCER_HASH_SIZE = 0;
  // moodycamel over-aligns what needs it itself (it asks for size + alignment and
  // aligns within), so plain max_align_t alignment is what it wants from malloc.
  static constexpr std::size_t kAlign = alignof(std::max_align_t);
  static void* malloc(std::size_t size) { return Alloc::allocate((size + kAlign - 1) / kAlign * kAlign, kAlign); }
  static void free(void* p) {
    if (p) Alloc::deallocate(p, kAlign);
  }
};

// Failure modes, checked against moodycamel 1.0.3's source:
// - enqueue(token, item) (CanAlloc) takes the block after the producer's tail when it is
//   empty (a steady flow reuses its blocks and allocates nothing), else one from the
//   queue's pool or Traits::malloc, and grows the producer's block index with
//   Traits::malloc; either failing makes it return false with nothing enqueued. It
//   throws only what T's constructor throws: T's move is noexcept (asserted).
//   (try_enqueue would never call malloc, so the lane would be bounded by a pool
//   allocated up front; the caller's caps bound the lanes instead.)
// - A ProducerToken whose producer could not be allocated is invalid: the constructor
//   throws std::bad_alloc then (the NIF's entries catch it: a clean error).
// - Blocks are kept by their producer until the queue is destroyed (moodycamel never
//   frees an explicit producer's block early): a lane holds what its largest backlog
//   needed, which the caller's caps (queue events and bytes) bound.
//
// TSan. moodycamel hands an emptied block back to its producer through standalone
// fences: the producer finds the block empty with relaxed loads of its empty flags or
// count, then an acquire fence, before it writes into it again (and the consumer sets
// small blocks' flags after a release fence). TSan does not model standalone fences, so
// it reported every item written into a reused block's slot against the consumer's read
// of the one before: about 3 reports for 4 items. Suppressed, each still took TSan's
// report path (stacks restored, symbolized, matched, under its global mutex): 200 000
// items through one lane took 108 s, a stress test with every shard on moodycamel ran
// past 9 minutes, and now and then a report whose stack TSan could no longer restore
// escaped the suppression (issue 40). So, under TSan only, the queue holds each item in
// a MoodycamelSlots::Stored whose base tells TSan the order the fences give: it acquires
// on the slot's address when the producer constructs an item there, and releases on it
// when the consumer's dequeue destroys the item it moved out (before moodycamel counts
// the slot empty). Without TSan the queue holds T itself. What TSan still cannot see is
// the block index entry the producer rewrites for a block it reuses, inside moodycamel's
// enqueue: the Catch2 suite suppresses that (c_src/tests/tsan_suppressions.cpp), a few
// reports per reused block, not per item.
template <class T>
struct MoodycamelSlots {
#ifdef KINO_TRACE_TSAN
  struct Order {
    Order() noexcept { __tsan_acquire(this); }
    Order(const Order&) noexcept { __tsan_acquire(this); }
    Order& operator=(const Order&) = delete;
    ~Order() { __tsan_release(this); }  // a base's: runs after the item's destructor
  };
  struct Stored : Order {
    explicit Stored(T&& v) noexcept : item(std::move(v)) {}
    Stored(Stored&& other) noexcept : Order(), item(std::move(other.item)) {}
    T item;
  };
  // What moodycamel's bulk dequeue writes through: each slot's item moved to out[k].
  struct Out {
    T* at;
    Out& operator*() noexcept { return *this; }
    Out& operator++() noexcept {
      ++at;
      return *this;
    }
    Out operator++(int) noexcept { return Out{at++}; }
    Out& operator=(Stored&& slot) noexcept {
      *at = std::move(slot.item);
      return *this;
    }
  };
  template <class Queue, class Token>
  static bool enqueue(Queue& queue, const Token& token, T& item) {
    Stored slot(std::move(item));
    if (queue.enqueue(token, std::move(slot))) return true;
    item = std::move(slot.item);  // left intact, as moodycamel leaves what it could not enqueue
    return false;
  }
#else
  using Stored = T;
  using Out = T*;
  template <class Queue, class Token>
  static bool enqueue(Queue& queue, const Token& token, T& item) {
    return queue.enqueue(token, std::move(item));
  }
#endif
};

template <class T, std::size_t kBlock, class Alloc>
class MoodycamelLanes {
  static_assert(std::is_nothrow_move_constructible<T>::value, "moodycamel's enqueue must not throw");

 public:
  explicit MoodycamelLanes(std::size_t lanes) : queue_(0), lanes_(lanes) {
    tokens_.reserve(lanes);
    for (std::size_t i = 0; i < lanes; ++i) {
      tokens_.emplace_back(queue_);
      if (!tokens_.back().valid()) throw std::bad_alloc();
    }
  }
  MoodycamelLanes(const MoodycamelLanes&) = delete;
  MoodycamelLanes& operator=(const MoodycamelLanes&) = delete;

  bool push(std::size_t i, T&& item) {
    Lane& lane = lanes_[i];
    if (!Slots::enqueue(queue_, tokens_[i], item)) return false;
    lane.pushed.store(lane.pushed.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    return true;
  }

  std::uint64_t pushed(std::size_t i) const { return lanes_[i].pushed.load(std::memory_order_acquire); }

  std::size_t pop(std::size_t i, T* out, std::size_t max) {
    Lane& lane = lanes_[i];
    const std::uint64_t available = lane.pushed.load(std::memory_order_acquire) - lane.popped;
    const std::size_t want = available < max ? static_cast<std::size_t>(available) : max;
    std::size_t n = 0;
    // one call takes what it can of the producer's current block run; loop for the rest
    while (n < want) {
      const std::size_t got = queue_.try_dequeue_bulk_from_producer(tokens_[i], typename Slots::Out{out + n}, want - n);
      if (got == 0) break;
      n += got;
    }
    lane.popped += n;
    return n;
  }

 private:
  using Slots = MoodycamelSlots<T>;
  using Queue = moodycamel::ConcurrentQueue<typename Slots::Stored, MoodycamelTraits<kBlock, Alloc>>;
  // The producer's line (its tail), then the consumer's.
  struct alignas(64) Lane {
    std::atomic<std::uint64_t> pushed{0};
    alignas(64) std::uint64_t popped = 0;
  };

  Queue queue_;  // declared first: the tokens go before it
  std::vector<moodycamel::ProducerToken> tokens_;
  std::vector<Lane> lanes_;
};

// The one place the shards' queue is chosen (issue 40's A/B, bench/RESULTS.md: three
// fresh VMs each, alternating, on a loaded machine). With every shard on moodycamel, row
// 3 (the user path) was 24 % slower across the VMs' median (1690 ns against 1367), beyond
// the 5 % rule; 3n on two processes scaled 0.80 of the untraced loop's against
// 1.05, and the consumer was half as fast (2.19 M events/s against 4.28). So:
// - the scheduler shards are on SpscQueue: its producer writes only its own lines and
//   the consumer none of them, where moodycamel's bulk dequeue does its read-modify-writes
//   (dequeueOptimisticCount, dequeueOvercommit, headIndex) on the producer object whose
//   line also holds the producer's tailIndex, so each drain pulls the traced process's
//   line to the consumer's core and back; and SpscQueue prefetches the slot two ahead,
//   which moodycamel's interface cannot;
// - the last lane, the shared shard that dirty schedulers and other threads take turns
//   on under ShardedQueue's mutex (several producers meet there), is on moodycamel's.
template <class T, std::size_t kBlock, class Alloc>
class ShardLanes {
 public:
  explicit ShardLanes(std::size_t lanes) : shared_at_(lanes - 1), spsc_(lanes - 1), shared_(1) {}

  bool push(std::size_t i, T&& item) { return i < shared_at_ ? spsc_.push(i, std::move(item)) : shared_.push(0, std::move(item)); }
  std::uint64_t pushed(std::size_t i) const { return i < shared_at_ ? spsc_.pushed(i) : shared_.pushed(0); }
  std::size_t pop(std::size_t i, T* out, std::size_t max) {
    return i < shared_at_ ? spsc_.pop(i, out, max) : shared_.pop(0, out, max);
  }

 private:
  std::size_t shared_at_;
  SpscLanes<T, kBlock, Alloc> spsc_;
  MoodycamelLanes<T, kBlock, Alloc> shared_;
};

}  // namespace kino_trace
