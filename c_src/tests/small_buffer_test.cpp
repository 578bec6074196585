// SmallBuffer: inline storage first, heap growth, move semantics, contents preserved.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "small_buffer.hpp"

using kino_trace::SmallBuffer;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed = 0) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7u);
  return v;
}

template <std::size_t N>
std::vector<std::uint8_t> contents(const SmallBuffer<N>& b) {
  return std::vector<std::uint8_t>(b.data(), b.data() + b.size());
}

}  // namespace

static_assert(!std::is_copy_constructible_v<SmallBuffer<16>>, "move-only");
static_assert(!std::is_copy_assignable_v<SmallBuffer<16>>, "move-only");
static_assert(std::is_nothrow_move_constructible_v<SmallBuffer<16>>, "noexcept move");
static_assert(std::is_nothrow_move_assignable_v<SmallBuffer<16>>, "noexcept move");

// 32-bit size and capacity and the heap pointer sharing the inline bytes: 8 bytes of
// overhead (the old layout, two size_t and a separate pointer, took 24).
static_assert(sizeof(SmallBuffer<64>) == 8 + 64, "layout: 8 bytes of overhead");
static_assert(sizeof(SmallBuffer<112>) == 8 + 112, "layout: 8 bytes of overhead");
static_assert(sizeof(SmallBuffer<8>) == 16, "layout: the pointer fits the inline bytes");
static_assert(alignof(SmallBuffer<64>) == alignof(std::uint8_t*), "layout: pointer-aligned");

TEST_CASE("SmallBuffer starts empty and inline", "[small_buffer]") {
  SmallBuffer<16> b;
  CHECK(b.size() == 0);
  CHECK(b.capacity() == 16);
  CHECK_FALSE(b.on_heap());
}

TEST_CASE("SmallBuffer stays inline up to its inline capacity", "[small_buffer]") {
  SmallBuffer<16> b;
  auto data = pattern(16);
  const std::uint8_t* inline_ptr = b.data();
  b.append(data.data(), 10);
  b.append(data.data() + 10, 6);
  CHECK(b.size() == 16);
  CHECK_FALSE(b.on_heap());
  CHECK(b.capacity() == 16);
  CHECK(b.data() == inline_ptr);
  CHECK(contents(b) == data);
}

TEST_CASE("SmallBuffer moves to the heap when it outgrows the inline storage", "[small_buffer]") {
  SmallBuffer<16> b;
  auto data = pattern(1000, 3);
  b.append(data.data(), 16);
  REQUIRE_FALSE(b.on_heap());
  b.append(data.data() + 16, 1);  // one byte more
  CHECK(b.on_heap());
  CHECK(b.size() == 17);
  CHECK(b.capacity() >= 17);
  CHECK(contents(b) == std::vector<std::uint8_t>(data.begin(), data.begin() + 17));

  // Keeps growing geometrically and keeps the contents.
  std::size_t reallocations = 0;
  const std::uint8_t* last = b.data();
  for (std::size_t i = 17; i < data.size(); ++i) {
    b.append(&data[i], 1);
    if (b.data() != last) {
      ++reallocations;
      last = b.data();
    }
    REQUIRE(b.capacity() >= b.size());
  }
  CHECK(contents(b) == data);
  CHECK(reallocations <= 6);  // 32 -> 64 -> ... -> 1024
}

TEST_CASE("SmallBuffer::extend returns writable room and reserve keeps contents", "[small_buffer]") {
  SmallBuffer<8> b;
  b.append("abc", 3);
  std::uint8_t* p = b.extend(4);
  CHECK(p == b.data() + 3);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>('d' + i);
  CHECK(b.size() == 7);
  CHECK(std::string(reinterpret_cast<const char*>(b.data()), b.size()) == "abcdefg");

  b.reserve(5);  // smaller than capacity: nothing happens
  CHECK_FALSE(b.on_heap());
  b.reserve(100);
  CHECK(b.on_heap());
  CHECK(b.capacity() >= 100);
  CHECK(b.size() == 7);
  CHECK(std::string(reinterpret_cast<const char*>(b.data()), b.size()) == "abcdefg");

  std::uint8_t* big = b.extend(200);  // past the reserved capacity
  std::fill(big, big + 200, std::uint8_t{'z'});
  CHECK(b.size() == 207);
  CHECK(b.data()[6] == 'g');
  CHECK(b.data()[206] == 'z');
}

TEST_CASE("SmallBuffer append of zero bytes accepts a null pointer", "[small_buffer]") {
  SmallBuffer<4> b;
  b.append(nullptr, 0);
  CHECK(b.size() == 0);
}

TEST_CASE("SmallBuffer clear keeps capacity", "[small_buffer]") {
  SmallBuffer<4> b;
  auto data = pattern(100);
  b.append(data.data(), data.size());
  std::size_t cap = b.capacity();
  b.clear();
  CHECK(b.size() == 0);
  CHECK(b.on_heap());
  CHECK(b.capacity() == cap);
  b.append(data.data(), 3);
  CHECK(contents(b) == std::vector<std::uint8_t>(data.begin(), data.begin() + 3));
}

TEST_CASE("SmallBuffer move construction", "[small_buffer]") {
  SECTION("inline contents are copied, the source is left empty") {
    SmallBuffer<32> a;
    auto data = pattern(20, 9);
    a.append(data.data(), data.size());
    SmallBuffer<32> b(std::move(a));
    CHECK_FALSE(b.on_heap());
    CHECK(contents(b) == data);
    CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move): documented state
    CHECK_FALSE(a.on_heap());
    // The moved-from buffer is usable again.
    a.append(data.data(), 5);
    CHECK(contents(a) == std::vector<std::uint8_t>(data.begin(), data.begin() + 5));
    CHECK(contents(b) == data);
  }
  SECTION("heap storage is stolen, not copied") {
    SmallBuffer<8> a;
    auto data = pattern(300, 1);
    a.append(data.data(), data.size());
    REQUIRE(a.on_heap());
    const std::uint8_t* heap = a.data();
    std::size_t cap = a.capacity();
    SmallBuffer<8> b(std::move(a));
    CHECK(b.on_heap());
    CHECK(b.data() == heap);
    CHECK(b.capacity() == cap);
    CHECK(contents(b) == data);
    CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move)
    CHECK_FALSE(a.on_heap());
    CHECK(a.capacity() == 8);
    a.append(data.data(), 8);
    CHECK_FALSE(a.on_heap());
    CHECK(contents(a) == std::vector<std::uint8_t>(data.begin(), data.begin() + 8));
  }
}

TEST_CASE("SmallBuffer move assignment", "[small_buffer]") {
  auto small = pattern(6, 40);
  auto large = pattern(500, 80);

  SECTION("heap into heap frees the old heap and steals the new one") {
    SmallBuffer<8> a, b;
    a.append(large.data(), large.size());
    b.append(small.data(), small.size());
    b.append(large.data(), 100);  // b on the heap too
    REQUIRE(b.on_heap());
    const std::uint8_t* heap = a.data();
    b = std::move(a);
    CHECK(b.data() == heap);
    CHECK(contents(b) == large);
    CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move)
  }
  SECTION("inline into heap drops the heap and copies the inline bytes") {
    SmallBuffer<8> a, b;
    a.append(small.data(), small.size());
    b.append(large.data(), large.size());
    b = std::move(a);
    CHECK_FALSE(b.on_heap());
    CHECK(b.capacity() == 8);
    CHECK(contents(b) == small);
  }
  SECTION("heap into inline") {
    SmallBuffer<8> a, b;
    a.append(large.data(), large.size());
    b.append(small.data(), small.size());
    b = std::move(a);
    CHECK(b.on_heap());
    CHECK(contents(b) == large);
  }
  SECTION("self move assignment keeps the contents") {
    SmallBuffer<8> a;
    a.append(large.data(), large.size());
    SmallBuffer<8>& alias = a;
    a = std::move(alias);
    CHECK(contents(a) == large);
  }
  SECTION("buffers in a vector survive reallocation of the vector") {
    std::vector<SmallBuffer<16>> v;
    for (std::uint8_t i = 0; i < 50; ++i) {
      SmallBuffer<16> b;
      auto d = pattern(i % 2 ? 10 : 40, i);
      b.append(d.data(), d.size());
      v.push_back(std::move(b));
    }
    for (std::uint8_t i = 0; i < 50; ++i) {
      CHECK(contents(v[i]) == pattern(i % 2 ? 10 : 40, i));
      CHECK(v[i].on_heap() == (i % 2 == 0));
    }
  }
}

TEST_CASE("SmallBuffer::reserve_exact allocates exactly what is asked, once", "[small_buffer]") {
  SmallBuffer<16> b;
  auto p = pattern(10);
  b.append(p.data(), p.size());
  b.reserve_exact(16448);
  CHECK(b.on_heap());
  CHECK(b.capacity() == 16448);
  CHECK(contents(b) == p);
  const std::uint8_t* at = b.data();
  auto more = pattern(16000, 3);
  b.append(more.data(), more.size());
  CHECK(b.data() == at);  // no reallocation within the reserved room
  b.reserve_exact(100);   // less than held: nothing changes
  CHECK(b.capacity() == 16448);
}

TEST_CASE("SmallBuffer::shrink_to_fit trims the heap block or moves back inline", "[small_buffer]") {
  SECTION("a large payload keeps its contents in an exact block") {
    SmallBuffer<16> b;
    b.reserve_exact(4096);
    auto p = pattern(1000, 5);
    b.append(p.data(), p.size());
    b.shrink_to_fit();
    CHECK(b.on_heap());
    CHECK(b.capacity() == 1000);
    CHECK(contents(b) == p);
    b.shrink_to_fit();  // again: nothing to do
    CHECK(b.capacity() == 1000);
    b.append(p.data(), 1);  // still growable
    CHECK(b.size() == 1001);
  }
  SECTION("contents that fit inline go back inline") {
    SmallBuffer<16> b;
    b.reserve_exact(4096);
    auto p = pattern(12, 9);
    b.append(p.data(), p.size());
    b.shrink_to_fit();
    CHECK_FALSE(b.on_heap());
    CHECK(b.capacity() == 16);
    CHECK(contents(b) == p);
  }
  SECTION("an inline buffer is left alone") {
    SmallBuffer<16> b;
    auto p = pattern(5);
    b.append(p.data(), p.size());
    b.shrink_to_fit();
    CHECK_FALSE(b.on_heap());
    CHECK(contents(b) == p);
  }
}

TEST_CASE("SmallBuffer: the heap pointer shares the inline bytes, contents survive every change of place",
          "[small_buffer]") {
  auto p = pattern(64, 11);
  SECTION("spill: all inline bytes, the pointer's too, are copied before the pointer is stored") {
    SmallBuffer<64> b;
    b.append(p.data(), 64);
    REQUIRE_FALSE(b.on_heap());
    b.append(p.data(), 1);
    REQUIRE(b.on_heap());
    CHECK(b.capacity() == 512);
    auto want = p;
    want.push_back(p[0]);
    CHECK(contents(b) == want);
  }
  SECTION("shrink back inline: the heap block is read before its pointer is overwritten") {
    SmallBuffer<64> b;
    b.reserve_exact(1000);
    b.append(p.data(), 64);  // exactly the inline capacity: the pointer's bytes too
    REQUIRE(b.on_heap());
    b.shrink_to_fit();
    CHECK_FALSE(b.on_heap());
    CHECK(b.capacity() == 64);
    CHECK(contents(b) == p);
    b.append(p.data(), 1);  // and spills again
    CHECK(b.on_heap());
    CHECK(b.size() == 65);
  }
  SECTION("a heap capacity is always more than the inline one") {
    SmallBuffer<64> b;
    b.reserve_exact(65);
    CHECK(b.on_heap());
    CHECK(b.capacity() == 65);
    b.append(p.data(), 64);
    b.append(p.data(), 1);
    b.shrink_to_fit();  // 65 bytes in 65: nothing to give back
    CHECK(b.on_heap());
    CHECK(b.capacity() == 65);
  }
  SECTION("moves: heap and inline buffers swap places and the source is empty and inline") {
    SmallBuffer<64> heap, inl;
    heap.reserve_exact(300);
    heap.append(p.data(), 64);
    inl.append(p.data(), 8);
    SmallBuffer<64> a(std::move(heap));
    CHECK(a.on_heap());
    CHECK(contents(a) == p);
    CHECK(heap.size() == 0);  // NOLINT(bugprone-use-after-move)
    CHECK(heap.capacity() == 64);
    CHECK_FALSE(heap.on_heap());
    a = std::move(inl);  // frees a's heap block
    CHECK_FALSE(a.on_heap());
    CHECK(contents(a) == std::vector<std::uint8_t>(p.begin(), p.begin() + 8));
    heap.append(p.data(), 64);  // a moved-from buffer is usable, inline
    CHECK_FALSE(heap.on_heap());
    CHECK(contents(heap) == p);
  }
}

namespace {

// Runs `f` in a child process; true when it ended by abort() (SIGABRT). The child
// drops Catch2's handler (it would report the abort as a failure, and under TSan exit
// instead of dying by the signal).
template <class F>
bool aborts(F f) {
  pid_t pid = fork();
  if (pid == 0) {
    rlimit none{0, 0};
    setrlimit(RLIMIT_CORE, &none);
    std::signal(SIGABRT, SIG_DFL);
    f();
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return false;
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

}  // namespace

TEST_CASE("SmallBuffer: asking for more than 32 bits of size aborts, never wraps", "[small_buffer]") {
  constexpr std::size_t kMax = SmallBuffer<64>::kMaxSize;
  static_assert(kMax == 0xFFFFFFFFu, "the size is 32 bits");
  CHECK(aborts([] {
    SmallBuffer<64> b;
    b.reserve(kMax + 1);
  }));
  CHECK(aborts([] {
    SmallBuffer<64> b;
    b.reserve_exact(kMax + 1);
  }));
  CHECK(aborts([] {
    SmallBuffer<64> b;
    b.append("ab", 2);
    b.extend(kMax - 1);  // 2 + 2^32 - 2 wraps to 0 in 32 bits
  }));
  CHECK_FALSE(aborts([] {
    SmallBuffer<64> b;
    b.reserve(1000);
  }));
}
