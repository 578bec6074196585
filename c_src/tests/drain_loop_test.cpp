// drain_chunks and drain_timeslice_percent (drain_loop.hpp), the drain loop of both NIF
// drains, on a scripted core: what each of its drain() calls hands out is set by the test.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "drain_loop.hpp"
#include "session_event.hpp"

using namespace kino_trace;

namespace {

// A core whose drain() hands out, per call, the next scripted count (capped by what is
// asked for) and says `more` as scripted; past the script, nothing and no more.
struct ScriptedCore {
  struct Step {
    std::size_t got;
    bool more;
    bool recheck = false;
  };
  std::deque<Step> script;
  std::uint64_t next_pid = 1;
  std::vector<std::size_t> asked;  // `max` of each call

  std::size_t drain(Event* out, std::size_t max, bool& more, bool& recheck) {
    asked.push_back(max);
    recheck = false;
    if (script.empty()) {
      more = false;
      return 0;
    }
    Step step = script.front();
    script.pop_front();
    std::size_t n = step.got < max ? step.got : max;
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = Event{};
      out[i].pid = next_pid++;
    }
    more = step.more;
    recheck = step.recheck;
    return n;
  }
};

// Drains `max` events of `core` into one vector, as drain_events/3 does (slot n of a
// batch), checking each chunk lands where the loop said.
std::vector<std::uint64_t> drain_into_batch(ScriptedCore& core, std::size_t max, Drained& d) {
  std::vector<Event> batch(max);
  std::size_t expected_at = 0;
  d = drain_chunks(
      core, max,
      [&](std::size_t n) {
        CHECK(n == expected_at);
        return batch.data() + n;
      },
      [&](Event* events, std::size_t got) {
        CHECK(events == batch.data() + expected_at);
        expected_at += got;
      });
  std::vector<std::uint64_t> pids;
  for (std::size_t i = 0; i < d.count; ++i) pids.push_back(batch[i].pid);
  return pids;
}

}  // namespace

TEST_CASE("drain_chunks: up to max events, at most a chunk at a time, in order", "[drain]") {
  ScriptedCore core;
  for (int i = 0; i < 10; ++i) core.script.push_back({kDrainChunk, true});
  Drained d;
  auto pids = drain_into_batch(core, 100, d);
  REQUIRE(d.count == 100);
  CHECK(d.more);
  for (std::size_t i = 0; i < pids.size(); ++i) CHECK(pids[i] == i + 1);
  // 32 + 32 + 32 + 4: the last chunk asks only for what is left
  CHECK(core.asked == std::vector<std::size_t>{kDrainChunk, kDrainChunk, kDrainChunk, 4});
}

TEST_CASE("drain_chunks: stops when the core says no more", "[drain]") {
  ScriptedCore core;
  core.script = {{kDrainChunk, true}, {5, false}, {kDrainChunk, true}};
  Drained d;
  drain_into_batch(core, 1000, d);
  CHECK(d.count == kDrainChunk + 5);
  CHECK_FALSE(d.more);
  CHECK(core.asked.size() == 2);
}

TEST_CASE("drain_chunks: hands on the last drain's recheck (the core went to sleep)", "[drain][wake]") {
  ScriptedCore core;
  core.script = {{kDrainChunk, true}, {5, false, true}};
  Drained d;
  drain_into_batch(core, 1000, d);
  CHECK(d.count == kDrainChunk + 5);
  CHECK_FALSE(d.more);
  CHECK(d.recheck);

  ScriptedCore awake;
  awake.script = {{kDrainChunk, true}, {5, false}};
  drain_into_batch(awake, 1000, d);
  CHECK_FALSE(d.recheck);
}

TEST_CASE("drain_chunks: a few more tries after short chunks, then the caller drains later", "[drain]") {
  ScriptedCore core;
  // the next event in order is late: short chunks while `more` stays true
  for (int i = 0; i < 100; ++i) core.script.push_back({1, true});
  Drained d;
  drain_into_batch(core, 1000, d);
  CHECK(core.asked.size() == static_cast<std::size_t>(kDrainShortChunks) + 1);
  CHECK(d.count == static_cast<std::size_t>(kDrainShortChunks) + 1);
  CHECK(d.more);

  // full chunks between short ones do not count
  ScriptedCore mixed;
  for (int i = 0; i < 40; ++i) {
    mixed.script.push_back({kDrainChunk, true});
    mixed.script.push_back({0, true});
  }
  drain_into_batch(mixed, 10000, d);
  CHECK(mixed.asked.size() == 2 * (static_cast<std::size_t>(kDrainShortChunks) + 1));
  CHECK(d.count == (static_cast<std::size_t>(kDrainShortChunks) + 1) * kDrainChunk);
}

TEST_CASE("drain_chunks: one reused buffer, as drain/2 builds each chunk's terms at once", "[drain]") {
  ScriptedCore core;
  core.script = {{kDrainChunk, true}, {kDrainChunk, true}, {3, false}};
  Event chunk[kDrainChunk];
  std::vector<std::uint64_t> pids;
  Drained d = drain_chunks(
      core, 500, [&](std::size_t) { return chunk; },
      [&](Event* events, std::size_t got) {
        CHECK(events == chunk);
        for (std::size_t i = 0; i < got; ++i) pids.push_back(events[i].pid);
      });
  CHECK(d.count == 2 * kDrainChunk + 3);
  CHECK_FALSE(d.more);
  REQUIRE(pids.size() == d.count);
  for (std::size_t i = 0; i < pids.size(); ++i) CHECK(pids[i] == i + 1);
}

TEST_CASE("drain_timeslice_percent: one rule, a decoded event costing four raw ones", "[drain]") {
  // never free, never more than a slice
  CHECK(drain_timeslice_percent(0, DrainCost::Raw) == 1);
  CHECK(drain_timeslice_percent(0, DrainCost::Decoded) == 1);
  CHECK(drain_timeslice_percent(1'000'000, DrainCost::Raw) == 100);
  // the divisors the two drains had: 10 000 raw events a slice, 2 500 decoded ones
  for (std::size_t n : {1u, 99u, 100u, 101u, 2'499u, 2'500u, 5'000u, 9'999u, 10'000u}) {
    INFO(n << " events");
    int raw = static_cast<int>(n * 100 / 10'000) + 1;
    int decoded = static_cast<int>(n * 100 / 2'500) + 1;
    CHECK(drain_timeslice_percent(n, DrainCost::Raw) == (raw > 100 ? 100 : raw));
    CHECK(drain_timeslice_percent(n, DrainCost::Decoded) == (decoded > 100 ? 100 : decoded));
  }
  static_assert(drain_timeslice_percent(2'500, DrainCost::Decoded) == 100, "a full slice");
}
