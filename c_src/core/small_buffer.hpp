// A growable byte buffer that keeps small contents inline, so most encoded events
// need no heap allocation at all. Move-only; RAII for the heap part.
//
// Layout: a 32-bit size, a 32-bit capacity and a union of the heap pointer and the
// inline bytes (on the heap the inline bytes are unused), so it costs 8 bytes more than
// its inline capacity (for an inline capacity of at least a pointer's size): events are
// copied through the queue whole, and every byte of them is memory traffic.
// The buffer is on the heap exactly when its capacity is more than the inline one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "alloc_faults.hpp"

namespace kino_trace {

template <std::size_t InlineCapacity>
class SmallBuffer {
 public:
  // The most bytes it holds. Asking for more is a failure (std::abort), never a
  // wrap-around: the NIF makes it unreachable by bounding the caps that bound a payload
  // (max_binary, max_bytes: kMaxBinaryMax, kMaxBytesMax in limits.hpp).
  //
  // No memory for a heap block: std::bad_alloc (the buffer is left as it was), which the
  // NIF turns into a counted drop (trace) or a clean error (see c_src/nif/nifs.hpp);
  // std::abort in a build without exceptions.
  static constexpr std::size_t kMaxSize = 0xFFFFFFFFu;
  static_assert(InlineCapacity > 0 && InlineCapacity < kMaxSize, "inline capacity");

  SmallBuffer() noexcept {}  // the inline bytes past the pointer's are left uninitialised
  ~SmallBuffer() { release(); }
  SmallBuffer(const SmallBuffer&) = delete;
  SmallBuffer& operator=(const SmallBuffer&) = delete;

  SmallBuffer(SmallBuffer&& other) noexcept { take(other); }
  SmallBuffer& operator=(SmallBuffer&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }

  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  bool on_heap() const { return capacity_ > InlineCapacity; }
  const std::uint8_t* data() const { return on_heap() ? heap_ : inline_; }
  std::uint8_t* data() { return on_heap() ? heap_ : inline_; }

  void clear() { size_ = 0; }

  // Appends n bytes and returns a pointer to them (valid until the next append).
  std::uint8_t* extend(std::size_t n) {
    reserve(grown(n));
    std::uint8_t* p = data() + size_;
    size_ += static_cast<std::uint32_t>(n);
    return p;
  }

  void append(const void* src, std::size_t n) {
    if (n == 0) return;
    std::memcpy(extend(n), src, n);
  }

  void reserve(std::size_t wanted) {
    if (wanted <= capacity()) return;
    if (wanted > kMaxSize) std::abort();
    // The first spill goes straight to a useful size: growing 64 -> 128 -> 256 -> 512
    // costs three allocations and copies for a payload of a few hundred bytes.
    std::size_t cap = capacity() * 2 < kFirstHeapCapacity ? kFirstHeapCapacity : capacity() * 2;
    while (cap < wanted) cap *= 2;
    reallocate(cap < kMaxSize ? cap : kMaxSize);
  }

  // Exactly `wanted` bytes of capacity (when more than now): for a writer that knows
  // how much it may need, one allocation instead of a chain of doublings.
  void reserve_exact(std::size_t wanted) {
    if (wanted <= capacity()) return;
    if (wanted > kMaxSize) std::abort();
    reallocate(wanted);
  }

  // Gives back unused heap capacity: contents that fit inline move back inline; a larger
  // block is shrunk in place (realloc). Keeps the buffer as it is if realloc fails.
  void shrink_to_fit() {
    if (!on_heap() || capacity_ == size_) return;
    std::uint8_t* heap = heap_;
    if (size_ <= InlineCapacity) {
      if (size_ > 0) std::memcpy(inline_, heap, size_);  // over the pointer: kept in `heap`
      std::free(heap);
      capacity_ = InlineCapacity;
      return;
    }
    void* smaller = std::realloc(heap, size_);
    if (!smaller) return;
    heap_ = static_cast<std::uint8_t*>(smaller);
    capacity_ = size_;
  }

 private:
  // size() + n, or abort when that is more than the buffer can hold.
  std::size_t grown(std::size_t n) const {
    if (n > kMaxSize - size_) std::abort();
    return size_ + n;
  }

  void release() {
    if (on_heap()) std::free(heap_);
    size_ = 0;
    capacity_ = InlineCapacity;
  }

  // Takes other's contents (this holds no heap block); leaves other empty and inline.
  void take(SmallBuffer& other) {
    size_ = other.size_;
    capacity_ = other.capacity_;
    if (other.on_heap()) {
      heap_ = other.heap_;
    } else if (size_ > 0) {
      std::memcpy(inline_, other.inline_, size_);
    }
    other.size_ = 0;
    other.capacity_ = InlineCapacity;
  }

  // A heap block of exactly cap bytes (more than now, at most kMaxSize) with the contents.
  void reallocate(std::size_t cap) {
    // uninitialised: we overwrite it
    auto* bigger = faults::fail_now() ? nullptr : static_cast<std::uint8_t*>(std::malloc(cap));
    if (!bigger) no_memory();
    if (size_ > 0) std::memcpy(bigger, data(), size_);
    if (on_heap()) std::free(heap_);
    heap_ = bigger;
    capacity_ = static_cast<std::uint32_t>(cap);
  }

  [[noreturn]] static void no_memory() {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
    throw std::bad_alloc();
#else
    std::abort();
#endif
  }

  static constexpr std::size_t kFirstHeapCapacity = 512;

  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = InlineCapacity;
  union {
    std::uint8_t* heap_ = nullptr;          // when on_heap() (null: GCC cannot tell it unread)
    std::uint8_t inline_[InlineCapacity];   // otherwise
  };
};

}  // namespace kino_trace
