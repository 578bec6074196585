// Unbounded single-producer single-consumer FIFO of blocks; free of erl_nif. One shard of
// a ShardedQueue. The producer's path is a placement move into its block and one release
// store of its count of items pushed (`pushed()`, the shard's published tail); no
// read-modify-write and nothing the consumer writes per item. Blocks come from
// `Alloc::allocate` (by default the aligned operator new (std::nothrow); tests pass one
// that fails)
// and go back to the producer through one cached spare block, so a steady flow
// allocates nothing. Every synchronisation is an acquire/release pair on an
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
    free_block(spare_.load(std::memory_order_relaxed));
  }

  // Producer. False when no block could be allocated: `item` is then left intact.
  bool push(T&& item) {
    if (tail_index_ == kBlock) {
      Block* b = spare_.load(std::memory_order_acquire);
      if (b) {
        spare_.store(nullptr, std::memory_order_relaxed);
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
  // Reading spare_ here races with nothing: only this producer clears it, and a block the
  // consumer has stored there is its own from then on (an acquire load, as in push()).
  static constexpr std::size_t kAhead = 2;
  void prefetch_ahead() {
    const std::size_t at = tail_index_ + kAhead - 1;
    Block* b = static_cast<Block*>(tail_);
    std::size_t i = at;
    if (at >= kBlock) {
      b = spare_.load(std::memory_order_acquire);
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

  // The consumer hands an emptied block back as the spare if there is none (the producer
  // only ever clears it, the consumer only ever fills it: each sees the other's store
  // before it acts), else frees it.
  void recycle(Block* b) {
    if (spare_.load(std::memory_order_acquire) == nullptr) {
      spare_.store(b, std::memory_order_release);
    } else {
      free_block(b);
    }
  }

  // The producer's line.
  Link* tail_ = &stub_;
  std::size_t tail_index_ = kBlock;
  std::atomic<std::uint64_t> pushed_{0};
  // The consumer's line.
  alignas(64) Link* head_ = &stub_;
  std::size_t head_index_ = kBlock;
  std::uint64_t popped_ = 0;
  alignas(64) std::atomic<Block*> spare_{nullptr};
  Link stub_;  // written once, by the first push
};

}  // namespace kino_trace
