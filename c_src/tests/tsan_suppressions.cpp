// The Catch2 suite's ThreadSanitizer suppressions, compiled into the test binary (TSan
// asks for them at start-up), so the suite runs the same under ctest, by hand or in CI.
//
// race:concurrentqueue.h — moodycamel's concurrentqueue (the shards' queue,
// c_src/core/shard_lanes.hpp) hands an emptied block back to its producer through
// standalone fences (the consumer's release fence after it moved items out, the
// producer's acquire fence before it writes into the block again). TSan does not model
// standalone fences, so it reports the producer's new item against the consumer's read
// of the old one in the same slot. Only reports with a frame in that header are dropped;
// everything else stays checked as written, in particular:
// - the publication of items: the lane's tail is a release store after the enqueue and
//   an acquire load before the dequeue (in shard_lanes.hpp, outside the header), and
//   the consumer never dequeues past it, so an event's heap payload, written before the
//   push and read after the pop outside moodycamel's frames, is ordered by it;
// - the shards' counters, credits, tickets and staging, and the session's wake-ups.
// The stress tests (migrating producers, failing allocations) check what the
// suppression cannot: every event delivered or counted, each producer's in order.
#if defined(__SANITIZE_THREAD__)
#define KINO_TRACE_TSAN_SUPPRESSIONS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KINO_TRACE_TSAN_SUPPRESSIONS 1
#endif
#endif

#ifdef KINO_TRACE_TSAN_SUPPRESSIONS
extern "C" const char* __tsan_default_suppressions();
extern "C" const char* __tsan_default_suppressions() { return "race:concurrentqueue.h\n"; }
#endif
