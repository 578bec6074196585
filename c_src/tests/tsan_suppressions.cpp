// The Catch2 suite's ThreadSanitizer suppressions, compiled into the test binary (TSan
// asks for them at start-up), so the suite runs the same under ctest, by hand or in CI.
//
// race:concurrentqueue.h — moodycamel's concurrentqueue (the shared shard's queue,
// c_src/core/shard_lanes.hpp) hands an emptied block back to its producer through
// standalone fences, which TSan does not model. The items in a reused block's slots are
// ordered for TSan by shard_lanes.hpp's annotation (MoodycamelSlots); what stays is the
// producer rewriting the block index entry of the block it reuses (the entry the
// consumer read when it dequeued that block), inside moodycamel's enqueue, where no
// annotation can reach: once per reused block at most, not per item. Only reports with a
// frame in that header are dropped; everything else stays checked as written, in
// particular:
// - the items: the annotation makes the producer's write of an item into a slot come
//   after the consumer's destruction of the one it moved out of that slot;
// - the publication of items: the lane's tail is a release store after the enqueue and
//   an acquire load before the dequeue (in shard_lanes.hpp, outside the header), and
//   the consumer never dequeues past it, so an event's heap payload, written before the
//   push and read after the pop outside moodycamel's frames, is ordered by it;
// - the shards' counters, credits, tickets and staging, and the session's wake-ups.
// The stress tests (migrating producers, failing allocations) check what the
// suppression cannot: every event delivered or counted, each producer's in order.
#include "sanitized.hpp"

#ifdef KINO_TRACE_TEST_TSAN
extern "C" const char* __tsan_default_suppressions();
extern "C" const char* __tsan_default_suppressions() { return "race:concurrentqueue.h\n"; }
#endif
