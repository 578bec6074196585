// Pairs traced calls with their returns, per process: the native implementation of the
// call pairing rule, free of erl_nif. Words (pid, module, function) are opaque 64-bit
// values: the NIF passes raw immediate terms (this node's pids and ports, atoms), so
// another node's raw events, whose pids are boxed terms, are decoded by the Elixir
// implementation, KinoTrace.Tracer.Decoder (lib/kino_trace/tracer/decoder.ex), which also decodes the
// fallback tracer's where the NIF is absent.
//
// The rule (written out with its reasons in KinoTrace.Tracer.Decoder's moduledoc; a change is
// made in both):
//   1. Order: a batch is sorted by time, stably (by decoder_nifs.cpp, before this class);
//      events are numbered from 1 across batches.
//   2. Frames: a call opens a frame {id, t0, mfa} unless its function is in no_returns or
//      its process is unpaired; its depth is the process's depth before it. kMaxStack
//      frames kept, cut down to kKeepFrames; depth counts forgotten frames, up to kMaxStack.
//   3. Returns: a return or exception closes the newest open frame of its mfa and all
//      above it, taking its id, duration and the depth left; else it is unpaired, depth 0.
//   4. return_to: the process's depth, nothing changes.
//   5. Drops: the drop mark is noted when a process opens a frame with none kept; an event
//      whose mark differs while frames are open forgets them and is `lost`.
//   6. Exit: the process's frames, mark and unpairing go.
//   7. Bounds: kMaxPids stacks (then all go), marks and unpaired; kMaxCallers callers.
//   8. Without pairing: no frames, depth 0; callers still noted.
// test/kino_trace/tracer/native_decoder_test.exs is the differential test: both implementations
// get the same raw streams (generated, named nasty ones, and with another node's pids
// for the Elixir side) and must give the same events; c_src/tests/call_pairing_test.cpp
// tests this class alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace kino_trace {

struct MfaKey {
  std::uint64_t module = 0;
  std::uint64_t function = 0;
  std::uint64_t arity = 0;

  bool operator==(const MfaKey& o) const { return module == o.module && function == o.function && arity == o.arity; }
};

struct MfaKeyHash {
  std::size_t operator()(const MfaKey& k) const {
    std::uint64_t h = k.module * 0x9E3779B97F4A7C15ull;
    h ^= (k.function + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2));
    h ^= (k.arity + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
    return static_cast<std::size_t>(h);
  }
};

// What the pairing needs of an event.
enum class PairKind : std::uint8_t { Call, Return, ReturnTo, Exit, Other };

struct PairInput {
  PairKind kind = PairKind::Other;
  std::uint64_t pid = 0;
  bool is_pid = true;  // a pid (not a port): only pids are callers for the stack guard
  std::int64_t time_ns = 0;
  MfaKey mfa;
  std::uint64_t mark = 0;
};

struct PairResult {
  std::uint64_t id = 0;
  std::uint64_t depth = 0;
  bool lost = false;
  bool paired = false;       // a return or exception that found its call
  std::uint64_t call_id = 0; // when paired
  std::int64_t duration = 0; // when paired
};

class CallPairing {
 public:
  static constexpr std::size_t kMaxStack = 512;    // open calls kept per process
  static constexpr std::size_t kKeepFrames = 384;  // kept when kMaxStack is passed
  static constexpr std::size_t kMaxPids = 20000;   // processes tracked
  static constexpr std::size_t kMaxCallers = 256;  // callers kept between two takes

  explicit CallPairing(bool pairing) : pairing_(pairing) {}

  bool pairing() const { return pairing_; }

  void set_no_returns(std::vector<MfaKey> mfas) { no_returns_ = std::unordered_set<MfaKey, MfaKeyHash>(mfas.begin(), mfas.end()); }

  // Stops pairing the calls of `pid` (the stack guard moved it): its open calls go.
  void unpair(std::uint64_t pid) {
    if (unpaired_.size() >= kMaxPids) unpaired_.clear();
    unpaired_.insert(pid);
    drop_stack(pid);
    callers_.erase(pid);
    has_last_caller_ = false;
  }

  // The processes that made framed calls since the last take.
  std::vector<std::uint64_t> take_callers() {
    std::vector<std::uint64_t> out(callers_.begin(), callers_.end());
    callers_.clear();
    has_last_caller_ = false;
    return out;
  }

  PairResult next(const PairInput& in) {
    PairResult r;
    r.id = next_id_++;
    check_mark(in, r);
    switch (in.kind) {
      case PairKind::Call: call(in, r); break;
      case PairKind::Return: ret(in, r); break;
      case PairKind::ReturnTo: {
        Stack* s = live(in.pid);
        r.depth = s ? s->depth : 0;
        break;
      }
      case PairKind::Exit:
        drop_stack(in.pid);
        unpaired_.erase(in.pid);
        marks_.erase(in.pid);
        break;
      case PairKind::Other: break;
    }
    return r;
  }

  // For tests: what is tracked.
  std::size_t stacks() const { return live_stacks_; }
  std::size_t marks() const { return marks_.size(); }

 private:
  struct Frame {
    std::uint64_t id;
    std::int64_t t0;
    MfaKey mfa;
  };
  // depth counts forgotten frames too (up to kMaxStack); frames oldest first. A stack
  // that is not live is an absent one (the Elixir decoder's map has no key for it) whose
  // storage is kept for the process's next call: a process whose calls all return
  // allocates nothing per call.
  struct Stack {
    bool live = false;
    std::uint64_t depth = 0;
    std::vector<Frame> frames;
  };

  Stack* live(std::uint64_t pid) {
    auto it = stacks_.find(pid);
    return it != stacks_.end() && it->second.live ? &it->second : nullptr;
  }

  void drop(Stack& s) {
    if (!s.live) return;
    s.live = false;
    s.depth = 0;
    s.frames.clear();
    --live_stacks_;
  }

  void drop_stack(std::uint64_t pid) {
    auto it = stacks_.find(pid);
    if (it != stacks_.end()) drop(it->second);
  }

  // The process's drop mark changed since its open calls were made: they are forgotten.
  void check_mark(const PairInput& in, PairResult& r) {
    if (in.mark == 0 && marks_.empty()) return;
    Stack* s = live(in.pid);
    if (!s) return;
    auto m = marks_.find(in.pid);
    std::uint64_t old = m == marks_.end() ? 0 : m->second;
    if (old != in.mark) {
      r.lost = true;
      drop(*s);
    }
  }

  void put_mark(std::uint64_t pid, std::uint64_t mark) {
    auto it = marks_.find(pid);
    if (it != marks_.end()) {
      if (it->second == mark) return;
      if (mark == 0) {
        marks_.erase(it);
        return;
      }
      it->second = mark;
      return;
    }
    if (mark == 0) return;
    if (marks_.size() >= kMaxPids) marks_.clear();
    marks_.emplace(pid, mark);
  }

  // The stack of `pid`, which is not live, made live. When kMaxPids are live, every other
  // stack goes first (as the Elixir decoder's map starts again); the storage kept for
  // absent stacks is bounded by another kMaxPids.
  Stack& stack_for(std::uint64_t pid) {
    if (live_stacks_ >= kMaxPids) {
      stacks_.clear();
      live_stacks_ = 0;
    } else if (stacks_.size() >= 2 * kMaxPids && stacks_.count(pid) == 0) {
      for (auto i = stacks_.begin(); i != stacks_.end();) i = i->second.live ? std::next(i) : stacks_.erase(i);
    }
    Stack& s = stacks_[pid];
    s.live = true;
    ++live_stacks_;
    return s;
  }

  void call(const PairInput& in, PairResult& r) {
    bool framed = (unpaired_.empty() || unpaired_.count(in.pid) == 0) &&
                  (no_returns_.empty() || no_returns_.count(in.mfa) == 0);
    if (framed && in.is_pid && callers_.size() < kMaxCallers && !(has_last_caller_ && last_caller_ == in.pid)) {
      callers_.insert(in.pid);
      last_caller_ = in.pid;
      has_last_caller_ = true;
    }
    if (!pairing_) return;
    Stack* live_stack = live(in.pid);
    r.depth = live_stack ? live_stack->depth : 0;
    if (!framed) return;
    if (!live_stack || live_stack->frames.empty()) put_mark(in.pid, in.mark);
    Stack& s = live_stack ? *live_stack : stack_for(in.pid);
    s.frames.push_back(Frame{r.id, in.time_ns, in.mfa});
    if (s.depth < kMaxStack) ++s.depth;
    if (s.frames.size() > kMaxStack) s.frames.erase(s.frames.begin(), s.frames.end() - static_cast<std::ptrdiff_t>(kKeepFrames));
  }

  void ret(const PairInput& in, PairResult& r) {
    if (!pairing_) return;
    Stack* live_stack = live(in.pid);
    if (!live_stack) return;
    Stack& s = *live_stack;
    for (std::size_t i = s.frames.size(); i-- > 0;) {
      if (s.frames[i].mfa == in.mfa) {
        std::uint64_t popped = s.frames.size() - i;
        r.paired = true;
        r.call_id = s.frames[i].id;
        r.duration = in.time_ns - s.frames[i].t0;
        s.depth -= popped;
        r.depth = s.depth;
        s.frames.resize(i);
        if (s.depth == 0) drop(s);
        return;
      }
    }
  }

  bool pairing_;
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, Stack> stacks_;  // live or not
  std::size_t live_stacks_ = 0;
  std::unordered_map<std::uint64_t, std::uint64_t> marks_;
  std::unordered_set<std::uint64_t> unpaired_;
  std::unordered_set<MfaKey, MfaKeyHash> no_returns_;
  std::unordered_set<std::uint64_t> callers_;
  std::uint64_t last_caller_ = 0;  // in callers_ when has_last_caller_: spares a lookup
  bool has_last_caller_ = false;
};

}  // namespace kino_trace
