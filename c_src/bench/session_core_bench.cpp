// Microbenchmark of SessionCore's producer and consumer paths, without a VM: P producer
// threads run the NIF's per-event sequence (precheck, admit, a small payload, commit)
// while one consumer thread drains in batches of 1000, as bench/'s native drainer does.
// Reports CPU time per event (CLOCK_THREAD_CPUTIME_ID), which a loaded machine disturbs
// less than wall time, and wall time per event of all producers together.
// SessionCore has one shard per producer thread, as the NIF has one per scheduler.
// `sharded` runs the same events through a bare ShardedQueue instead (push and one
// per-shard counter: what SessionCore's own checks and counters add is the difference).
// `limits` runs SessionCore with a `:limit` (max_events) and a `:rate` set, neither ever
// reached, so each event pays for its ticket and its rate token.
//
// `locks` (default 0) adds that many locked instructions per event on the producer's own
// line, as the VM takes around each tracer call: they wait for the event's stores, as
// in the VM. `none` runs those alone (the baseline to subtract). `pace_us` makes the
// consumer sleep that long each time it has emptied the queue, as a session paces its
// drains (1000); 0 (default) has it chase the producers, which then pay about one
// core-to-core trip per event (bench/RESULTS.md).
//
//   c++ -O2 -std=c++17 -pthread -Ic_src/core c_src/bench/session_core_bench.cpp -o /tmp/scb
//   /tmp/scb [producers=1] [events per producer=2000000] [rounds=5] [core|sharded|limits]
//            [locks=0] [all|none] [pace_us=0]
//
// (CMake: target kino_trace_session_core_bench, with KINO_TRACE_TESTS=ON; not built by default.)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <ctime>
#include <thread>
#include <vector>

#include "session_core.hpp"
#include "sharded_queue.hpp"

using namespace kino_trace;

namespace {

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

double wall_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

struct Round {
  double producer_cpu_ns = 0;  // per event, mean over producers
  double consumer_cpu_ns = 0;  // per event delivered
  double wall_ns = 0;          // per event, all producers together
};

// The per-event sequence of the NIF through SessionCore, and its drain.
struct CorePath {
  SessionCore core;
  CorePath(unsigned producers, bool limited) : core(limits(limited), 0, producers) {}
  static Limits limits(bool limited) {
    Limits l;
    l.queue_events = 5'000'000;
    l.queue_bytes = std::uint64_t{4} << 30;
    if (limited) {  // never reached: the bench's clock stays at 0
      l.limit = std::uint64_t{1} << 60;
      l.rate_count = std::uint64_t{1} << 40;
      l.rate_period_ns = 1'000'000'000;
    }
    return l;
  }
  void offer(unsigned shard, std::uint64_t pid, Event&& e) {
    if (core.precheck(0, shard) != Verdict::Accept) return;
    if (core.admit(0, pid, shard) != Verdict::Accept) return;
    core.commit(std::move(e), shard);
  }
  std::size_t drain(Event* out, std::size_t max, bool& more) { return core.drain(out, max, more); }
};

// The same events through per-producer shards.
struct ShardedPath {
  ShardedQueue<Event> queue;
  explicit ShardedPath(unsigned producers) : queue(producers) {}
  void offer(unsigned shard, std::uint64_t, Event&& e) {
    ShardedQueue<Event>::Producer p(queue, shard);
    if (p.push(std::move(e))) p.bump(0);
  }
  std::size_t drain(Event* out, std::size_t max, bool& more) { return queue.pop(out, max, more); }
};

int vm_locks = 0;          // locked instructions per event, as the VM's around each tracer call
bool offer_events = true;  // false: the VM's work only (the baseline)
int pace_us = 0;           // the consumer sleeps this long once it has emptied the queue

template <class Path>
Round run(Path& path, unsigned producers, std::uint64_t each) {
  std::atomic<unsigned> ready{0};
  std::atomic<bool> go{false};
  std::atomic<unsigned> running{producers};
  std::vector<double> cpu(producers, 0);

  std::vector<std::thread> threads;
  for (unsigned p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      double t0 = thread_cpu_ns();
      std::uint64_t pid = 0x1000 * (p + 1) + 3;
      alignas(64) std::atomic<std::uint64_t> vm_lock{0};
      for (std::uint64_t i = 0; i < each; ++i) {
        // The VM's own locked instructions around each tracer call (a read lock taken and
        // released), on a line of this thread only.
        for (int k = 0; k < vm_locks; ++k) vm_lock.fetch_add(1, std::memory_order_seq_cst);
        if (!offer_events) continue;
        Event e;
        e.time_ns = static_cast<std::int64_t>(i);
        e.kind = EventKind::Call;
        e.pid = pid;
        e.module = 0x2B;
        e.function = 0x4B;
        e.arity = 1;
        e.scheduler = static_cast<std::uint16_t>(p);
        std::uint8_t* bytes = e.payload.extend(32);  // the size of a call with one small argument
        std::fill(bytes, bytes + 32, static_cast<std::uint8_t>(i));
        path.offer(p, pid, std::move(e));
      }
      cpu[p] = thread_cpu_ns() - t0;
      running.fetch_sub(1);
    });
  }
  double consumer_cpu = 0;
  std::uint64_t delivered = 0;
  std::thread consumer([&] {
    std::vector<Event> buf(1000);
    while (!go.load()) std::this_thread::yield();
    double t0 = thread_cpu_ns();
    bool more = false;
    for (;;) {
      bool done = running.load() == 0;
      std::size_t n = path.drain(buf.data(), buf.size(), more);
      delivered += n;
      if (done && !more) break;
      if (!more) {
        if (pace_us) std::this_thread::sleep_for(std::chrono::microseconds(pace_us));
        else if (n == 0) std::this_thread::yield();
      }
    }
    consumer_cpu = thread_cpu_ns() - t0;
  });
  while (ready.load() < producers) std::this_thread::yield();
  double w0 = wall_ns();
  go.store(true);
  for (auto& t : threads) t.join();
  double w1 = wall_ns();
  consumer.join();
  Round r;
  const double events = static_cast<double>(each * producers);
  for (double c : cpu) r.producer_cpu_ns += c / events;
  r.consumer_cpu_ns = delivered ? consumer_cpu / static_cast<double>(delivered) : 0;
  r.wall_ns = (w1 - w0) / events;
  if (offer_events && delivered != each * producers) std::fprintf(stderr, "delivered %llu of %llu\n",
                                                  static_cast<unsigned long long>(delivered),
                                                  static_cast<unsigned long long>(each * producers));
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  unsigned producers = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 1;
  std::uint64_t each = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2'000'000;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::string mode = argc > 4 ? argv[4] : "core";
  const bool sharded = mode == "sharded";
  const bool limited = mode == "limits";
  vm_locks = argc > 5 ? std::atoi(argv[5]) : 0;
  offer_events = !(argc > 6 && std::string(argv[6]) == "none");
  pace_us = argc > 7 ? std::atoi(argv[7]) : 0;
  auto once = [&](std::uint64_t n) {
    if (sharded) {
      ShardedPath path(producers);
      return run(path, producers, n);
    }
    CorePath path(producers, limited);
    return run(path, producers, n);
  };
  once(each / 10);  // warm-up
  std::vector<double> prod, cons, wall;
  for (int i = 0; i < rounds; ++i) {
    Round r = once(each);
    prod.push_back(r.producer_cpu_ns);
    cons.push_back(r.consumer_cpu_ns);
    wall.push_back(r.wall_ns);
  }
  std::printf("%s, %u producer(s): producer CPU %.1f ns/event, consumer CPU %.1f ns/event, wall %.1f ns/event (medians of %d)\n",
              sharded ? "sharded" : limited ? "SessionCore with a limit and a rate" : "SessionCore", producers, median(prod), median(cons), median(wall), rounds);
  return 0;
}
