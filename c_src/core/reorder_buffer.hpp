// Puts events back in admission order on the consumer side.
//
// Each event carries `seq`, its dense admission number (0, 1, 2, ...). The queue hands
// events out in order per producer thread only, so a process that moved between
// schedulers may have a later event dequeued before an earlier one. The buffer keeps
// the events that came early and gives them out once every earlier number has come:
// next() is the number expected next.
//
// Events sit in a slab (reused slots); a binary min-heap of (seq, slot) keys finds the
// lowest, so a put or take costs O(log held) moves of 16-byte keys, and memory follows
// the number of events held, not how far ahead they are. Not thread-safe: one consumer.
// The queue's caps bound what it holds (an event keeps its queue slot until it leaves
// here); trim() gives the memory back when it is empty after growing large.
//
//   ReorderBuffer buffer;
//   buffer.put(std::move(e1));          // seq 1 came before seq 0: kept
//   buffer.put(std::move(e0));
//   while (buffer.ready()) use(buffer.take());   // seq 0, then seq 1
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "session_event.hpp"

namespace kino_trace {

class ReorderBuffer {
 public:
  std::uint64_t next() const { return next_; }
  std::size_t size() const { return heap_.size(); }
  bool empty() const { return heap_.empty(); }
  std::size_t capacity() const { return slab_.size(); }

  // The event numbered next() was handed out without passing through the buffer.
  void skip() { ++next_; }

  // Keeps `e`, whose seq is at least next() and not already held.
  void put(Event&& e) {
    std::uint32_t slot;
    if (free_.empty()) {
      slot = static_cast<std::uint32_t>(slab_.size());
      slab_.emplace_back();
    } else {
      slot = free_.back();
      free_.pop_back();
    }
    heap_.push_back(Key{e.seq, slot});
    slab_[slot] = std::move(e);
    std::push_heap(heap_.begin(), heap_.end(), later);
  }

  // Whether the event numbered next() is here.
  bool ready() const { return !heap_.empty() && heap_.front().seq == next_; }

  // Takes the event numbered next() (requires ready()).
  Event take() {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    std::uint32_t slot = heap_.back().slot;
    heap_.pop_back();
    Event e = std::move(slab_[slot]);
    slab_[slot] = Event{};
    free_.push_back(slot);
    ++next_;
    return e;
  }

  // Frees every held event (after close: the gaps will never fill), calling
  // `each(event)` on each first. The expected number moves past them all.
  template <typename F>
  void clear(F&& each) {
    for (const Key& k : heap_) {
      each(static_cast<const Event&>(slab_[k.slot]));
      if (k.seq >= next_) next_ = k.seq + 1;
    }
    heap_.clear();
    free_.clear();
    slab_.clear();
    trim();
  }

  // Gives the memory of a large buffer back when it is empty.
  void trim() {
    if (!heap_.empty() || slab_.capacity() <= kKeep) return;
    std::vector<Event>().swap(slab_);
    std::vector<std::uint32_t>().swap(free_);
    std::vector<Key>().swap(heap_);
  }

 private:
  struct Key {
    std::uint64_t seq;
    std::uint32_t slot;
  };
  static bool later(const Key& a, const Key& b) { return a.seq > b.seq; }

  // Buffers up to this many slots are kept when they empty (under 1 MB).
  static constexpr std::size_t kKeep = 4096;

  std::vector<Event> slab_;
  std::vector<std::uint32_t> free_;
  std::vector<Key> heap_;
  std::uint64_t next_ = 0;
};

}  // namespace kino_trace
