// One traced event as the native queue holds it, free of erl_nif.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "term_codec.hpp"

namespace kino_trace {

enum class EventKind : std::uint8_t {
  Call = 1,
  ReturnFrom = 2,
  ExceptionFrom = 3,
  ReturnTo = 4,
  Send = 5,
  SendToNonExisting = 6,
  Receive = 7,
  Spawn = 8,
  Spawned = 9,
  Exit = 10,
  Link = 11,
  Unlink = 12,
  GettingLinked = 13,
  GettingUnlinked = 14,
  Register = 15,
  Unregister = 16,
  Other = 17,
};

// A self-contained event. Words (pid, module, function) are raw immediate terms, which
// stay valid outside any process; everything else is in the encoded payload.
//
// Two cache lines, line-aligned: the queue copies events whole from the traced process's
// core to the consumer's, so each line is memory traffic. The small fields are as wide as
// the VM's ranges: an arity is at most 255 (the VM's MAX_ARG), a scheduler id at most
// 1024 (its +S bound), so 8 bytes hold them with the shard; the header is 56 bytes and
// the payload's inline buffer the 64 after its 8-byte size and capacity.
struct alignas(64) Event {
  EventKind kind = EventKind::Other;
  std::uint8_t arity = 0;
  std::uint16_t scheduler = 0;
  std::uint32_t shard = 0;     // the SessionCore shard it was queued on (set by commit())
  std::uint64_t pid = 0;
  std::uint64_t module = 0;    // 0 when the event has no MFA
  std::uint64_t function = 0;
  std::uint64_t tag = 0;       // the VM's trace tag, for kinds we do not name
  std::int64_t time_ns = 0;    // monotonic
  std::uint64_t drops = 0;     // the drop mark of the process's slot at admission (see
                               // SessionCore::drop_mark): it changed since the process's
                               // previous event when events of it may have been dropped
  PayloadBuffer payload;       // encoded: args, return value, exception, message, ...

  std::size_t footprint() const { return sizeof(Event) + (payload.on_heap() ? payload.capacity() : 0); }
};

static_assert(alignof(Event) == 64, "line-aligned (its size, two lines, is asserted below)");
static_assert(offsetof(Event, payload) == 56, "a 56-byte header: the payload's 72 bytes end the second line");

// The pure-Erlang tracer counts an event's bytes as this one's footprint (EVENT_BYTES and
// INLINE_PAYLOAD in src/kino_trace_fallback_process.erl): change them with it.
static_assert(sizeof(Event) == 128, "src/kino_trace_fallback_process.erl: EVENT_BYTES");
static_assert(std::is_same_v<PayloadBuffer, SmallBuffer<64>>, "src/kino_trace_fallback_process.erl: INLINE_PAYLOAD");

}  // namespace kino_trace
