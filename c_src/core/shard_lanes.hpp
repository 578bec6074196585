// The queues under a ShardedQueue's shards (issue 40): one FIFO lane per shard, each with
// one producer at a time and one consumer; free of erl_nif. Two implementations with one
// interface, and the two together (ShardLanes, at the end):
//
//   MoodycamelLanes  one moodycamel::ConcurrentQueue (the design card's queue) with an
//                    explicit ProducerToken per lane: a lane's enqueue touches only that
//                    producer's block and indices; the consumer takes a lane's items in
//                    order with try_dequeue_bulk_from_producer.
//   SpscLanes        one SpscQueue per lane (issue 26's hand-written queue).
//   SchedulerLanes   SpscLanes for the scheduler shards, MoodycamelLanes for the shared
//                    one (issue 40's A/B: the default).
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
// TSan. moodycamel orders a block's reuse with standalone fences (the consumer's release
// fence after it moved items out of a block, the producer's acquire fence before it
// writes into that block again), which TSan does not model: it reports the producer's
// new item against the consumer's read of the old one in the same slot. The Catch2 suite
// suppresses races with a frame in moodycamel's header (c_src/tests/tsan_suppressions.cpp,
// which says what stays checked).
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
    if (!queue_.enqueue(tokens_[i], std::move(item))) return false;
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
      const std::size_t got = queue_.try_dequeue_bulk_from_producer(tokens_[i], out + n, want - n);
      if (got == 0) break;
      n += got;
    }
    lane.popped += n;
    return n;
  }

 private:
  using Queue = moodycamel::ConcurrentQueue<T, MoodycamelTraits<kBlock, Alloc>>;
  // The producer's line (its tail), then the consumer's.
  struct alignas(64) Lane {
    std::atomic<std::uint64_t> pushed{0};
    alignas(64) std::uint64_t popped = 0;
  };

  Queue queue_;  // declared first: the tokens go before it
  std::vector<moodycamel::ProducerToken> tokens_;
  std::vector<Lane> lanes_;
};

// What issue 40's A/B kept (bench/RESULTS.md): the scheduler shards on SpscQueue, whose
// producer writes only its own lines (moodycamel's consumer writes the producer's
// indices' line with its read-modify-writes on every bulk dequeue: row 3 was 24 % slower
// and the consumer half as fast across three VMs), and the last lane, the shared shard
// that dirty schedulers and other threads take turns on under ShardedQueue's mutex, on
// moodycamel's queue.
template <class T, std::size_t kBlock, class Alloc>
class SchedulerLanes {
 public:
  explicit SchedulerLanes(std::size_t lanes) : shared_at_(lanes - 1), spsc_(lanes - 1), shared_(1) {}

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

// KINO_TRACE_SHARD_QUEUE=moodycamel (CMake) puts every shard on moodycamel, to rerun
// the A/B on a quieter host.
#ifdef KINO_TRACE_MOODYCAMEL_SHARDS
template <class T, std::size_t kBlock, class Alloc>
using ShardLanes = MoodycamelLanes<T, kBlock, Alloc>;
#else
template <class T, std::size_t kBlock, class Alloc>
using ShardLanes = SchedulerLanes<T, kBlock, Alloc>;
#endif

}  // namespace kino_trace
