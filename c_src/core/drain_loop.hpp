// The one drain loop of the NIF, and the one rule for the scheduler time a drain reports.
// Both NIF drains use them: drain/2 (c_src/nif/session_nifs.cpp, raw event tuples) and
// drain_events/3 (c_src/nif/decoder_nifs.cpp, decoded events). Free of erl_nif: the NIF
// hands drain_timeslice_percent()'s value to enif_consume_timeslice. Tested in
// c_src/tests/drain_loop_test.cpp.
#pragma once

#include <cstddef>

namespace kino_trace {

// Events dequeued from the core at once. Each chunk is handed on (drain/2 builds its
// terms) before the next is dequeued: no `max`-sized array of Events (a 1000-event
// batch is ~190 KB, which malloc serves with mmap/munmap and fresh pages on every call).
inline constexpr std::size_t kDrainChunk = 32;

// A short chunk means the queue is empty or the merge holds events back until the next
// look at the shards (see ShardedQueue): this many more tries, then the caller drains
// again later.
inline constexpr int kDrainShortChunks = 16;

struct Drained {
  std::size_t count = 0;  // events drained
  bool more = false;      // events may remain: drain again
  bool recheck = false;   // none left, and the core just went to sleep: drain once more a
                          // moment later (see SessionCore's header, "Wake-up")
};

// Drains up to `max` events of `core` (a SessionCore, or anything with its
// drain(Event* out, size_t max, bool& more, bool& recheck)), at most kDrainChunk at a time, in the
// core's order. `slot(n)` is where the chunk starting at the n-th event drained goes
// (room for kDrainChunk events); `take(events, got)` is called with each chunk once it is
// drained (got may be 0).
template <typename Core, typename Slot, typename Take>
Drained drain_chunks(Core& core, std::size_t max, Slot&& slot, Take&& take) {
  Drained d;
  int short_chunks = 0;
  while (d.count < max) {
    std::size_t want = max - d.count < kDrainChunk ? max - d.count : kDrainChunk;
    auto* out = slot(d.count);
    std::size_t got = core.drain(out, want, d.more, d.recheck);
    take(out, got);
    d.count += got;
    if (!d.more || (got < want && ++short_chunks > kDrainShortChunks)) break;
  }
  return d;
}

// What handing out one event costs, in units of scheduler time: a NIF call should take
// about a millisecond, a full timeslice, which is kDrainUnitsPerSlice units.
//   Raw      drain/2: the event's 10-tuple.
//   Decoded  drain_events/3: the event also goes through the call pairing and becomes a
//            21-field tuple of Kino.Trace.Event's fields, with its time and caller
//            converted: about four times a raw one (the ratio the two drains kept when
//            each had its own divisor, 10000 and 2500 events a slice).
enum class DrainCost : unsigned { Raw = 1, Decoded = 4 };

inline constexpr std::size_t kDrainUnitsPerSlice = 10000;

// The percentage of a timeslice that handing out `events` events of `cost` took: at
// least 1 (a call is never free), at most 100.
constexpr int drain_timeslice_percent(std::size_t events, DrainCost cost) {
  std::size_t percent = events * static_cast<std::size_t>(cost) * 100 / kDrainUnitsPerSlice + 1;
  return percent > 100 ? 100 : static_cast<int>(percent);
}

}  // namespace kino_trace
