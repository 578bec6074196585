// CallPairing: the rules of KinoTrace.Tracer.Decoder's pairing (numbering, depth, durations,
// calls without returns, drop marks, exits, the stack guard's unpairing and callers, and
// the bounds). Its equivalence with the Elixir decoder is tested in
// test/kino_trace/tracer/native_decoder_test.exs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "call_pairing.hpp"

using kino_trace::CallPairing;
using kino_trace::MfaKey;
using kino_trace::PairInput;
using kino_trace::PairKind;
using kino_trace::PairResult;

namespace {

const MfaKey kF{1, 2, 1};
const MfaKey kG{1, 3, 0};
const MfaKey kLoop{1, 4, 1};

PairInput ev(PairKind kind, std::uint64_t pid, std::int64_t t, MfaKey mfa = kF, std::uint64_t mark = 0) {
  PairInput in;
  in.kind = kind;
  in.pid = pid;
  in.time_ns = t;
  in.mfa = mfa;
  in.mark = mark;
  return in;
}

}  // namespace

TEST_CASE("a call pairs with its return: id, depth, duration") {
  CallPairing p(true);
  PairResult c1 = p.next(ev(PairKind::Call, 7, 100, kF));
  PairResult c2 = p.next(ev(PairKind::Call, 7, 150, kG));
  PairResult r2 = p.next(ev(PairKind::Return, 7, 170, kG));
  PairResult r1 = p.next(ev(PairKind::Return, 7, 400, kF));
  CHECK(c1.id == 1);
  CHECK(c2.id == 2);
  CHECK(c1.depth == 0);
  CHECK(c2.depth == 1);
  CHECK(r2.paired);
  CHECK(r2.call_id == 2);
  CHECK(r2.duration == 20);
  CHECK(r2.depth == 1);
  CHECK(r1.call_id == 1);
  CHECK(r1.duration == 300);
  CHECK(r1.depth == 0);
  CHECK(p.stacks() == 0);
}

TEST_CASE("a return of an older call takes the frames above it (tail calls)") {
  CallPairing p(true);
  p.next(ev(PairKind::Call, 1, 1, kF));
  p.next(ev(PairKind::Call, 1, 2, kG));
  p.next(ev(PairKind::Call, 1, 3, kG));
  PairResult r = p.next(ev(PairKind::Return, 1, 4, kF));
  CHECK(r.call_id == 1);
  CHECK(r.depth == 0);
  PairResult lone = p.next(ev(PairKind::Return, 1, 5, kG));
  CHECK_FALSE(lone.paired);
  CHECK(lone.depth == 0);
}

TEST_CASE("calls without returns open no frame; unpaired processes neither") {
  CallPairing p(true);
  p.set_no_returns({kLoop});
  for (int i = 0; i < 3; ++i) CHECK(p.next(ev(PairKind::Call, 1, i, kLoop)).depth == 0);
  CHECK(p.take_callers().empty());
  p.next(ev(PairKind::Call, 2, 10, kF));
  CHECK(p.take_callers() == std::vector<std::uint64_t>{2});
  CHECK(p.take_callers().empty());
  p.unpair(2);
  CHECK(p.stacks() == 0);
  CHECK(p.next(ev(PairKind::Call, 2, 11, kF)).depth == 0);
  CHECK(p.next(ev(PairKind::Call, 2, 12, kF)).depth == 0);
  CHECK(p.take_callers().empty());
  // an exit forgets the unpairing
  p.next(ev(PairKind::Exit, 2, 13));
  p.next(ev(PairKind::Call, 2, 14, kF));
  CHECK(p.next(ev(PairKind::Call, 2, 15, kF)).depth == 1);
}

TEST_CASE("a changed drop mark forgets the open calls and marks the event lost") {
  CallPairing p(true);
  p.next(ev(PairKind::Call, 1, 1, kF, 0));
  p.next(ev(PairKind::Call, 1, 2, kF, 0));
  PairResult r = p.next(ev(PairKind::Return, 1, 3, kF, 1));
  CHECK(r.lost);
  CHECK_FALSE(r.paired);
  CHECK(r.depth == 0);
  PairResult c = p.next(ev(PairKind::Call, 1, 4, kF, 1));
  CHECK_FALSE(c.lost);
  CHECK(c.depth == 0);
  PairResult back = p.next(ev(PairKind::Return, 1, 5, kF, 1));
  CHECK(back.paired);
  CHECK(back.call_id == 4);
}

TEST_CASE("deep stacks keep the newest frames, their depth capped") {
  CallPairing p(true);
  const int n = 600;
  for (int i = 0; i < n; ++i) p.next(ev(PairKind::Call, 1, i, kF));
  CHECK(p.next(ev(PairKind::ReturnTo, 1, n)).depth == CallPairing::kMaxStack);
  // frames: the newest, from the last trim on; the oldest returns find none
  std::uint64_t paired = 0;
  for (int i = 0; i < n; ++i) paired += p.next(ev(PairKind::Return, 1, n + 1 + i, kF)).paired ? 1 : 0;
  CHECK(paired == CallPairing::kKeepFrames + (n - CallPairing::kMaxStack - 1));
}

TEST_CASE("without pairing, depths are 0 and returns unpaired, callers still noted") {
  CallPairing p(false);
  p.next(ev(PairKind::Call, 1, 1, kF));
  CHECK(p.next(ev(PairKind::Call, 1, 2, kF)).depth == 0);
  CHECK_FALSE(p.next(ev(PairKind::Return, 1, 3, kF)).paired);
  CHECK(p.take_callers() == std::vector<std::uint64_t>{1});
}

TEST_CASE("past kMaxPids processes with open calls, the table starts again") {
  CallPairing p(true);
  for (std::uint64_t pid = 1; pid <= CallPairing::kMaxPids; ++pid) p.next(ev(PairKind::Call, pid, 1, kF));
  CHECK(p.stacks() == CallPairing::kMaxPids);
  p.next(ev(PairKind::Call, CallPairing::kMaxPids + 1, 2, kF));
  CHECK(p.stacks() == 1);
  CHECK_FALSE(p.next(ev(PairKind::Return, 1, 3, kF)).paired);
  CHECK(p.next(ev(PairKind::Return, CallPairing::kMaxPids + 1, 3, kF)).paired);
  // callers are bounded too
  CHECK(p.take_callers().size() == CallPairing::kMaxCallers);
}

TEST_CASE("a process whose calls all return keeps no stack") {
  CallPairing p(true);
  for (std::uint64_t pid = 1; pid <= 3 * CallPairing::kMaxPids; ++pid) {
    p.next(ev(PairKind::Call, pid, 1, kF));
    p.next(ev(PairKind::Return, pid, 2, kF));
  }
  CHECK(p.stacks() == 0);
  // a process with an open call is not forgotten for the others that came and went
  p.next(ev(PairKind::Call, 1, 3, kF));
  for (std::uint64_t pid = 2; pid <= 3 * CallPairing::kMaxPids; ++pid) {
    p.next(ev(PairKind::Call, pid, 4, kG));
    p.next(ev(PairKind::Return, pid, 5, kG));
  }
  CHECK(p.next(ev(PairKind::Return, 1, 6, kF)).call_id == 6 * CallPairing::kMaxPids + 1);
}
