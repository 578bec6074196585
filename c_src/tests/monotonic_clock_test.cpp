// The tracer's clocks (monotonic_clock.hpp), whichever the platform gives: both never go
// back, and the coarse one read with its lead is never behind the precise one, which is
// what enabled's rate pre-check relies on (it must not refuse what trace would accept).
#include <catch2/catch.hpp>

#include <cstdint>
#include <thread>

#include "monotonic_clock.hpp"

namespace clk = kino_trace::clock;

TEST_CASE("clock: both clocks are monotonic", "[clock]") {
  INFO("coarse clock: " << clk::kCoarseName);
  std::int64_t precise = clk::precise_ns();
  std::int64_t coarse = clk::coarse_ns();
  for (int i = 0; i < 200000; ++i) {
    std::int64_t p = clk::precise_ns();
    std::int64_t c = clk::coarse_ns();
    REQUIRE(p >= precise);
    REQUIRE(c >= coarse);
    precise = p;
    coarse = c;
    if (i % 50000 == 0) std::this_thread::yield();
  }
}

TEST_CASE("clock: the coarse clock plus its lead is never behind the precise one", "[clock]") {
  INFO("coarse clock: " << clk::kCoarseName << ", tick " << clk::coarse_tick_ns() << " ns");
  const std::int64_t lead = clk::lead_ns();
  CHECK(lead >= 50000000);
  CHECK(lead >= 4 * clk::coarse_tick_ns());
  for (int i = 0; i < 100000; ++i) {
    std::int64_t p = clk::precise_ns();
    std::int64_t c = clk::coarse_ns();
    REQUIRE(c + lead >= p);
    // and not far ahead either: the same clock, read a moment later, at most a tick behind
    REQUIRE(c <= clk::precise_ns() + clk::coarse_tick_ns());
  }
}

TEST_CASE("clock: time passes on both clocks", "[clock]") {
  std::int64_t p0 = clk::precise_ns(), c0 = clk::coarse_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  // generous: at least the sleep minus one coarse tick
  CHECK(clk::precise_ns() - p0 >= 30000000);
  CHECK(clk::coarse_ns() - c0 >= 30000000 - clk::coarse_tick_ns());
}
