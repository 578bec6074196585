// Running out of memory, made to happen (alloc_faults.hpp): the fault points fail when
// armed, on the arming thread only; SmallBuffer then throws std::bad_alloc and keeps its
// contents; a SessionCore counts an event whose encoding failed as a no_memory drop and
// gives back what admit() reserved.
#include <catch2/catch.hpp>

#include <cstdint>
#include <new>
#include <string>
#include <thread>

#include "alloc_faults.hpp"
#include "session_core.hpp"
#include "small_buffer.hpp"

using namespace kino_trace;

TEST_CASE("alloc faults: the armed thread's allocations fail after the ones allowed", "[alloc_faults]") {
  REQUIRE(faults::kEnabled);
  CHECK_FALSE(faults::fail_now());  // not armed
  faults::Armed armed(2);
  CHECK_FALSE(faults::fail_now());
  CHECK_FALSE(faults::fail_now());
  CHECK(faults::fail_now());
  CHECK(faults::fail_now());
  bool other_failed = true;
  std::thread([&] { other_failed = faults::fail_now(); }).join();
  CHECK_FALSE(other_failed);  // another thread is not armed
  CHECK(armed.disarm() == 2);
  CHECK_FALSE(faults::fail_now());
}

TEST_CASE("alloc faults: SmallBuffer throws bad_alloc and keeps its contents", "[alloc_faults][small_buffer]") {
  SmallBuffer<16> b;
  b.append("0123456789", 10);
  {
    faults::Armed armed(0);
    CHECK_THROWS_AS(b.extend(100), std::bad_alloc);
    CHECK(armed.disarm() == 1);
  }
  CHECK(b.size() == 10);
  CHECK_FALSE(b.on_heap());
  CHECK(std::string(reinterpret_cast<const char*>(b.data()), b.size()) == "0123456789");
  // On the heap already: a bigger block fails, the old one stays.
  b.extend(600);
  REQUIRE(b.on_heap());
  std::size_t cap = b.capacity();
  {
    faults::Armed armed(0);
    CHECK_THROWS_AS(b.reserve(cap * 4), std::bad_alloc);
  }
  CHECK(b.size() == 610);
  CHECK(b.capacity() == cap);
  CHECK(std::string(reinterpret_cast<const char*>(b.data()), 10) == "0123456789");
  b.extend(cap);  // disarmed: grows again
  CHECK(b.size() == 610 + cap);
}

TEST_CASE("SessionCore: an event whose encoding found no memory is a no_memory drop", "[alloc_faults][session_core]") {
  Limits limits;
  limits.queue_events = 1;
  limits.limit = 2;
  SessionCore core(limits, 0);
  REQUIRE(core.admit(1, 7) == Verdict::Accept);
  core.abandon_no_memory(7);
  Counters c = core.counters();
  CHECK(c.dropped_no_memory == 1);
  CHECK(c.accepted == 0);
  // Its place in the queue and its max_events ticket came back: two more fit the limit.
  REQUIRE(core.admit(2, 7) == Verdict::Accept);
  Event e;
  e.pid = 7;
  CHECK(core.commit(std::move(e)).verdict == Verdict::Accept);
  Event out[2];
  bool more = false;
  CHECK(core.drain(out, 2, more) == 1);
  REQUIRE(core.admit(3, 7) == Verdict::Accept);
  Event f;
  f.pid = 7;
  CommitResult r = core.commit(std::move(f));
  CHECK(r.verdict == Verdict::Accept);
  CHECK(r.limit_reached);
}
