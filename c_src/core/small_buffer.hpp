// A growable byte buffer that keeps small contents inline, so most encoded events
// need no heap allocation at all. Move-only; RAII for the heap part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

namespace kino_trace {

template <std::size_t InlineCapacity>
class SmallBuffer {
 public:
  SmallBuffer() = default;
  SmallBuffer(const SmallBuffer&) = delete;
  SmallBuffer& operator=(const SmallBuffer&) = delete;

  SmallBuffer(SmallBuffer&& other) noexcept { take(std::move(other)); }
  SmallBuffer& operator=(SmallBuffer&& other) noexcept {
    if (this != &other) {
      heap_.reset();
      take(std::move(other));
    }
    return *this;
  }

  std::size_t size() const { return size_; }
  std::size_t capacity() const { return heap_ ? heap_capacity_ : InlineCapacity; }
  bool on_heap() const { return static_cast<bool>(heap_); }
  const std::uint8_t* data() const { return heap_ ? heap_.get() : inline_; }
  std::uint8_t* data() { return heap_ ? heap_.get() : inline_; }

  void clear() { size_ = 0; }

  // Appends n bytes and returns a pointer to them (valid until the next append).
  std::uint8_t* extend(std::size_t n) {
    reserve(size_ + n);
    std::uint8_t* p = data() + size_;
    size_ += n;
    return p;
  }

  void append(const void* src, std::size_t n) {
    if (n == 0) return;
    std::memcpy(extend(n), src, n);
  }

  void reserve(std::size_t wanted) {
    if (wanted <= capacity()) return;
    // The first spill goes straight to a useful size: growing 112 -> 224 -> 448 costs
    // three allocations and copies for a payload of a few hundred bytes.
    std::size_t cap = capacity() * 2 < kFirstHeapCapacity ? kFirstHeapCapacity : capacity() * 2;
    while (cap < wanted) cap *= 2;
    reallocate(cap);
  }

  // Exactly `wanted` bytes of capacity (when more than now): for a writer that knows
  // how much it may need, one allocation instead of a chain of doublings.
  void reserve_exact(std::size_t wanted) {
    if (wanted > capacity()) reallocate(wanted);
  }

  // Gives back unused heap capacity: contents that fit inline move back inline; a larger
  // block is shrunk in place (realloc). Keeps the buffer as it is if realloc fails.
  void shrink_to_fit() {
    if (!heap_ || heap_capacity_ == size_) return;
    if (size_ <= InlineCapacity) {
      if (size_ > 0) std::memcpy(inline_, heap_.get(), size_);
      heap_.reset();
      heap_capacity_ = 0;
      return;
    }
    void* smaller = std::realloc(heap_.get(), size_);
    if (!smaller) return;
    (void)heap_.release();  // realloc took it
    heap_.reset(static_cast<std::uint8_t*>(smaller));
    heap_capacity_ = size_;
  }

 private:
  void take(SmallBuffer&& other) {
    size_ = other.size_;
    if (other.heap_) {
      heap_ = std::move(other.heap_);
      heap_capacity_ = other.heap_capacity_;
    } else if (size_ > 0) {
      std::memcpy(inline_, other.inline_, size_);
    }
    other.size_ = 0;
    other.heap_capacity_ = 0;
  }

  void reallocate(std::size_t cap) {
    HeapBytes bigger(static_cast<std::uint8_t*>(std::malloc(cap)));  // uninitialised: we overwrite it
    if (!bigger) std::abort();
    if (size_ > 0) std::memcpy(bigger.get(), data(), size_);
    heap_ = std::move(bigger);
    heap_capacity_ = cap;
  }

  struct FreeBytes {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  using HeapBytes = std::unique_ptr<std::uint8_t[], FreeBytes>;
  static constexpr std::size_t kFirstHeapCapacity = 512;

  std::size_t size_ = 0;
  std::size_t heap_capacity_ = 0;
  HeapBytes heap_;
  std::uint8_t inline_[InlineCapacity];
};

}  // namespace kino_trace
