// LoopGuard: bounds, inside the traced process, the return-trace frames a loop of tail
// calls can pile up (issue 36.5).
//
// A call traced with `{return_trace}` / `{exception_trace}` pushes a frame on the
// traced process's stack that only its return pops, so a loop through tail calls grows
// the stack by a frame (4 or 5 words) per traced call. KinoTrace.Plan.TailCalls finds
// such loops in a module's object code and traces them without returns; a module with
// no object code (defined in a Livebook cell, a script, `Code.compile_string/1`) cannot
// be read, and a guard that reacts to decoded events (in the session process) is always
// late under load. So the session names those modules (`set_modules`), and the tracer's
// own callbacks, which run in the traced process, count per process its open calls of
// them: +1 for each call the VM reported (its frame is pushed: `enabled` said trace),
// -1 for each return or exception from one of them. A process that reaches kThreshold
// open calls is *held*: from then on `enabled` discards its calls, so the VM pushes no
// frame for them (erts_call_trace asks `enabled` before it runs the match spec), and
// the session is told once. The session then looks at the process (a tail loop: it is
// moved to the guard's trace session without returns, and `exempt`; a deep recursion:
// `reset`). Its stack is bounded by construction: at most kThreshold frames of a
// session's return tracing, whatever the scheduling of the session process.
//
// Open calls drift upward when frames go without an event: an exception unwinding a
// `{return_trace}` frame (no `exception_trace`), or a function of those modules traced
// without returns. Such a drift only makes the process held early; the session finds no
// loop and resets it (its calls are not traced meanwhile; the decoder is told, see
// KinoTrace.Session.StackGuard).
//
// Per process: a table of 2^kSlotBits slots, each a process (its pid word) and its
// count, found at one of two hashed places (two choices). A process finds its slot, or
// takes a free one (no process, or a count of 0), or else the one of the two with the
// lower count. A slot is written by its process's callbacks, which run on one scheduler
// at a time (the VM orders a process's runs), and by the session (reset, exempt):
// relaxed atomics, no read-modify-write on the hot path. Two processes hashed to the
// same two slots both counting push each other out; the session's stack sampling
// (StackGuard.check/2) stays as the backstop for that and for loops the count cannot
// see (through a fun into a module with object code).
//
// Off (no module named) it costs the callbacks one relaxed load. Free of erl_nif.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kino_trace {

class LoopGuard {
 public:
  // Open calls that hold a process: at 4 (5 with frame pointers) words a frame, at
  // most 20 K words of a session's return-trace frames (the stated bound is 64 K).
  static constexpr std::uint32_t kThreshold = 4096;
  static constexpr std::size_t kMaxModules = 16;
  static constexpr unsigned kSlotBits = 12;
  static constexpr std::size_t kSlots = std::size_t{1} << kSlotBits;
  // A count that is never counted (a process the session moved out of return tracing).
  static constexpr std::uint32_t kExempt = 0xFFFFFFFFu;

  // Names the modules whose calls count (atom words; at most kMaxModules: the rest are
  // left to the stack sampling). None: off. Called by the session, not concurrently
  // with itself.
  template <typename It>
  void set_modules(It first, It last) {
    std::size_t n = 0;
    for (; first != last && n < kMaxModules; ++first) modules_[n++].store(*first, std::memory_order_relaxed);
    if (n && !slots_) slots_.reset(new Slot[kSlots]);
    count_.store(n, std::memory_order_release);
  }

  bool on() const { return count_.load(std::memory_order_acquire) != 0; }

  // Whether calls of `module` count.
  bool watches(std::uint64_t module) const {
    const std::size_t n = count_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i)
      if (modules_[i].load(std::memory_order_relaxed) == module) return true;
    return false;
  }

  // `enabled`: whether the calls of `who` are held back.
  bool held(std::uint64_t who) const {
    if (!on()) return false;
    const Slot* s = find(who);
    if (!s) return false;
    const std::uint32_t c = s->calls.load(std::memory_order_relaxed);
    return c >= kThreshold && c != kExempt;
  }

  // `trace`, a call of a watched module by `who` (its frame is pushed): true when this
  // call makes it held (the session is to be told, once).
  bool call(std::uint64_t who) {
    Slot& s = claim(who);
    const std::uint32_t c = s.calls.load(std::memory_order_relaxed);
    if (c == kExempt || c >= kThreshold) return false;
    s.calls.store(c + 1, std::memory_order_relaxed);
    return c + 1 == kThreshold;
  }

  // `trace`, a return or exception from a watched module by `who`.
  void returned(std::uint64_t who) {
    Slot* s = find(who);
    if (!s) return;
    const std::uint32_t c = s->calls.load(std::memory_order_relaxed);
    if (c != 0 && c != kExempt) s->calls.store(c - 1, std::memory_order_relaxed);
  }

  // The session: `who` counts again from 0 (no loop), or never again (exempt: moved to
  // a trace without returns). Writes only `who`'s own slot.
  void release(std::uint64_t who, bool exempt) {
    if (!slots_) return;
    Slot* s = find(who);
    if (!s && exempt) s = &claim(who);
    if (s) s->calls.store(exempt ? kExempt : 0, std::memory_order_relaxed);
  }

  // Tests: the open calls counted for `who` (0 when it has no slot).
  std::uint32_t open_calls(std::uint64_t who) const {
    const Slot* s = slots_ ? find(who) : nullptr;
    return s ? s->calls.load(std::memory_order_relaxed) : 0;
  }

 private:
  struct Slot {
    std::atomic<std::uint64_t> who{0};
    std::atomic<std::uint32_t> calls{0};
  };

  static std::size_t first_place(std::uint64_t who) { return (who * 0x9E3779B97F4A7C15ull) >> (64 - kSlotBits); }
  static std::size_t second_place(std::uint64_t who) {
    return ((who ^ (who >> 29)) * 0xBF58476D1CE4E5B9ull) >> (64 - kSlotBits);
  }

  const Slot* find(std::uint64_t who) const {
    const Slot& a = slots_[first_place(who)];
    if (a.who.load(std::memory_order_relaxed) == who) return &a;
    const Slot& b = slots_[second_place(who)];
    if (b.who.load(std::memory_order_relaxed) == who) return &b;
    return nullptr;
  }
  Slot* find(std::uint64_t who) { return const_cast<Slot*>(static_cast<const LoopGuard*>(this)->find(who)); }

  // `who`'s slot, taking one (free, else the lower count) when it has none.
  Slot& claim(std::uint64_t who) {
    if (Slot* s = find(who)) return *s;
    Slot& a = slots_[first_place(who)];
    Slot& b = slots_[second_place(who)];
    const std::uint32_t ca = a.calls.load(std::memory_order_relaxed);
    const std::uint32_t cb = b.calls.load(std::memory_order_relaxed);
    // an exempt process keeps its slot against a counting one
    Slot& s = (ca == 0 || (cb != 0 && rank(ca) <= rank(cb))) ? a : b;
    s.calls.store(0, std::memory_order_relaxed);
    s.who.store(who, std::memory_order_relaxed);
    return s;
  }
  static std::uint64_t rank(std::uint32_t c) { return c == kExempt ? std::uint64_t{kExempt} + 1 : c; }

  std::array<std::atomic<std::uint64_t>, kMaxModules> modules_{};
  std::atomic<std::size_t> count_{0};
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace kino_trace
