// Unbounded single-producer single-consumer FIFO of blocks; free of erl_nif. One shard of
// a ShardedQueue. The producer's path is a placement move into its block and one release
// store of its count of items pushed (`pushed()`, the shard's published tail); no
// read-modify-write and nothing the consumer writes per item. Blocks come from
// `Alloc::allocate` (by default the aligned operator new (std::nothrow); tests pass one
// that fails)
// and go back to the producer through a ring of up to kSpares emptied blocks, so a
// steady flow allocates nothing, and neither does a queue that a paced consumer lets
// grow to a few dozen blocks between its drains (issue 40: with one spare, every drain
// freed those blocks, the allocator gave their pages back to the system, and the
// producer, the traced process, paid a page fault per 4 KiB of events when it touched
// them again). Every synchronisation is an acquire/release pair on an
// atomic (no fences), which TSan checks as written.
//
// "Single producer" means one thread at a time: threads that take turns under a mutex
// (the fallback shard) are one producer.
//
// Prefetch (issue 26): after each push the producer asks for write ownership of the lines
// of the slot kAhead places on (prefetch_for_write). Those lines were last held by the
// consumer's core (it read and emptied the slot), or never cached; storing into them
// cold makes each store wait for the line, and that wait is paid at the traced
// process's next locked instruction (the VM takes a read lock around every tracer
// call), a few hundred ns per event in a profile of the benchmark. Prefetched an event
// ahead, the line arrives while the traced process runs. A slot past the current block
// is prefetched in the spare block when there is one. Block storage is line-aligned.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace kino_trace {

// Asks for the cache line at `p` in the state a store needs (exclusive), without waiting
// for it: PREFETCHW on x86-64 (a no-op on the few x86-64 processors without it), the
// compiler's write prefetch elsewhere. A hint only: it never faults and changes no value.
inline void prefetch_for_write(const void* p) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __asm__ volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 1, 3);
#else
  (void)p;
#endif
}

// Where SpscQueue's blocks come from: allocate returns `size` bytes aligned to `align` (a
// block is line-aligned, more than plain operator new's guarantee), or nullptr when there
// is no memory; deallocate gets the same `align` back.
struct SpscNewDelete {
  static void* allocate(std::size_t size, std::size_t align) {
    return ::operator new(size, std::align_val_t{align}, std::nothrow);
  }
  static void deallocate(void* p, std::size_t align) { ::operator delete(p, std::align_val_t{align}); }
};

template <class T, std::size_t kBlock = 64, class Alloc = SpscNewDelete>
class SpscQueue {
 public:
  // No block yet: the first push allocates one (and may fail like any other).
  SpscQueue() = default;
  SpscQueue(const SpscQueue&) = delete;
  SpscQueue& operator=(const SpscQueue&) = delete;
  ~SpscQueue() {
    T scratch[16];
    while (pop(scratch, 16) != 0) {
    }
    for (Link* b = head_; b;) {
      Link* next = b->next.load(std::memory_order_relaxed);
      if (b != &stub_) free_block(static_cast<Block*>(b));
      b = next;
    }
    for (auto& spare : spares_) free_block(spare.load(std::memory_order_relaxed));
  }

  // How many emptied blocks the consumer keeps for the producer at most: 64 blocks of 64
  // events, about 2 ms of one scheduler's events at the floor's pace, which covers the
  // 1 ms a session waits between drains (KinoTrace.Session.DrainPacing). Retained per
  // queue, up to 64 x sizeof(Block) (about 0.5 MiB for 128-byte events), and only once
  // the queue has held that many blocks at a time.
  static constexpr std::size_t kSpares = 64;

  // Producer. False when no block could be allocated: `item` is then left intact.
  bool push(T&& item) {
    if (tail_index_ == kBlock) {
      Block* b = spares_[take_at_].load(std::memory_order_acquire);
      if (b) {
        spares_[take_at_].store(nullptr, std::memory_order_relaxed);
        take_at_ = (take_at_ + 1) % kSpares;
        b->next.store(nullptr, std::memory_order_relaxed);
      } else {
        b = new_block();
        if (!b) return false;
      }
      tail_->next.store(b, std::memory_order_relaxed);  // published by the store of pushed_ below
      tail_ = b;
      tail_index_ = 0;
    }
    new (static_cast<Block*>(tail_)->slot(tail_index_++)) T(std::move(item));
    pushed_.store(pushed_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    prefetch_ahead();
    return true;
  }

  // Items pushed so far (any thread; the consumer reads it as the tail).
  std::uint64_t pushed() const { return pushed_.load(std::memory_order_acquire); }

  // Consumer: moves up to `max` items into `out`, oldest first; returns how many.
  std::size_t pop(T* out, std::size_t max) {
    std::uint64_t available = pushed_.load(std::memory_order_acquire) - popped_;
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(available, max));
    for (std::size_t i = 0; i < n; ++i) {
      if (head_index_ == kBlock) {
        Link* next = head_->next.load(std::memory_order_relaxed);  // written before the item's pushed_
        if (head_ != &stub_) recycle(static_cast<Block*>(head_));
        head_ = next;
        head_index_ = 0;
      }
      T* item = static_cast<Block*>(head_)->slot(head_index_++);
      out[i] = std::move(*item);
      item->~T();
    }
    popped_ += n;
    reserve_ahead();
    return n;
  }

 private:
  // A block's link to the next one. The queue starts at `stub_`, a link without slots
  // that looks full, so the first push allocates the first block.
  struct Link {
    std::atomic<Link*> next{nullptr};
  };
  struct Block : Link {
    alignas(T) alignas(64) unsigned char storage[kBlock * sizeof(T)];
    T* slot(std::size_t i) { return std::launder(reinterpret_cast<T*>(storage + i * sizeof(T))); }
  };

  // The slot kAhead places after the next one to be written, in this block or the spare.
  // Reading the next spare here races with nothing: only this producer clears a slot, and
  // a block the consumer has stored there is its own from then on (an acquire load, as in
  // push()).
  static constexpr std::size_t kAhead = 2;
  void prefetch_ahead() {
    const std::size_t at = tail_index_ + kAhead - 1;
    Block* b = static_cast<Block*>(tail_);
    std::size_t i = at;
    if (at >= kBlock) {
      b = spares_[take_at_].load(std::memory_order_acquire);
      if (!b) return;
      i = at - kBlock;
      if (i >= kBlock) return;
    }
    // Each line the slot spans, once (a 128-byte event on a line boundary spans two).
    const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(b->storage + i * sizeof(T));
    for (std::uintptr_t line = first & ~std::uintptr_t{63}; line < first + sizeof(T); line += 64)
      prefetch_for_write(reinterpret_cast<const void*>(line));
  }

  static Block* new_block() {
    void* mem = Alloc::allocate(sizeof(Block), alignof(Block));
    return mem ? new (mem) Block : nullptr;
  }
  static void free_block(Block* b) {
    if (!b) return;
    b->~Block();
    Alloc::deallocate(b, alignof(Block));
  }

  // Consumer: while the producer is ahead by whole blocks, fills the spares' ring's empty
  // slots with new blocks, up to one per block of that backlog, their pages touched here
  // (issue 40). A producer that outpaces its consumer needs new memory for its queue;
  // allocated by the producer, its first touch of each page was a page fault in the
  // traced process (about 7 us each on the benchmark's host, an event's worth every 32
  // events). Here the consumer pays it, between its drains. Bounded: the ring holds at
  // most kSpares blocks, and only while there is a backlog of that many.
  void reserve_ahead() {
    const std::uint64_t backlog = pushed_.load(std::memory_order_acquire) - popped_;
    std::uint64_t want = std::min<std::uint64_t>(backlog / kBlock, kSpares);
    for (; want > 0 && spares_[give_at_].load(std::memory_order_acquire) == nullptr; --want) {
      Block* b = new_block();
      if (!b) return;
      volatile unsigned char* bytes = b->storage;
      for (std::size_t at = 0; at < sizeof(b->storage); at += 4096) bytes[at] = 0;
      give(b);  // the slot is empty: only this consumer fills slots
    }
  }

  // Consumer: puts `b` in the next slot of the spares' ring; false when that slot is still
  // full. The ring is a single-producer single-consumer ring of slots, each empty when
  // null: the consumer fills slots in order and only null ones, the producer empties them
  // in order and only full ones, so neither passes the other (each sees the other's
  // store to a slot before it acts on that slot).
  bool give(Block* b) {
    if (spares_[give_at_].load(std::memory_order_acquire) != nullptr) return false;
    spares_[give_at_].store(b, std::memory_order_release);
    give_at_ = (give_at_ + 1) % kSpares;
    return true;
  }

  // The consumer hands an emptied block back as a spare, or frees it when the ring is full.
  void recycle(Block* b) {
    if (!give(b)) free_block(b);
  }

  // The producer's line.
  Link* tail_ = &stub_;
  std::size_t tail_index_ = kBlock;
  std::atomic<std::uint64_t> pushed_{0};
  std::size_t take_at_ = 0;  // the next spare to take
  // The consumer's line.
  alignas(64) Link* head_ = &stub_;
  std::size_t head_index_ = kBlock;
  std::uint64_t popped_ = 0;
  std::size_t give_at_ = 0;  // the next slot to give a spare to
  alignas(64) std::atomic<Block*> spares_[kSpares]{};
  Link stub_;  // written once, by the first push
};

}  // namespace kino_trace
