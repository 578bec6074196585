// alloc_faults/3, for tests: calls one NIF of the table with the calling thread's
// allocations made to fail after the first `Allowed` (c_src/core/alloc_faults.hpp), so a
// test can check that running out of memory anywhere in a NIF is a counted drop or a
// clean error (test/kino_trace/tracer/alloc_faults_test.exs).
//
// In a build with KINO_TRACE_FAULT_INJECTION (`mix test` makes one) this file also
// replaces operator new for the library (linked -Bsymbolic: its own calls come here
// first; it then calls the process's), the fault point of every std container and of
// the queue's blocks. (Linux and the like: it finds the process's with dlsym.)
// Elsewhere alloc_faults/3 returns `unsupported` and nothing is replaced.
#include <erl_nif.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "alloc_faults.hpp"
#include "atoms.hpp"
#include "nifs.hpp"

#if defined(KINO_TRACE_FAULT_INJECTION) && !defined(_WIN32)

#include <dlfcn.h>

namespace {

namespace faults = kino_trace::faults;

// The process's own operator new (the VM's C++ runtime's, or a preloaded sanitizer's),
// found by its mangled name: the library's replacements check for a fault, then hand
// over to it, so that memory the library allocates and memory the runtime allocates
// (a std::string grown inside libstdc++, say) are the same kind and the process's
// operator delete (not replaced) frees either.
// First the process's global one (a preloaded sanitizer's interposes there), else the
// next one after this library (its C++ runtime's, when the VM exports none).
template <class F>
F global(const char* name, F self) {
  void* const handles[] = {RTLD_DEFAULT, RTLD_NEXT};
  for (void* handle : handles) {
    void* p = dlsym(handle, name);
    F f = nullptr;
    if (p) std::memcpy(&f, &p, sizeof f);
    if (f && f != self) return f;
  }
  return nullptr;
}

using New = void* (*)(std::size_t);
using NewNothrow = void* (*)(std::size_t, const std::nothrow_t&) noexcept;
using NewAligned = void* (*)(std::size_t, std::align_val_t);
using NewAlignedNothrow = void* (*)(std::size_t, std::align_val_t, const std::nothrow_t&) noexcept;

}  // namespace

void* operator new(std::size_t n) {
  static const New next = global<New>("_Znwm", &::operator new);
  if (faults::fail_now() || !next) throw std::bad_alloc();
  return next(n);
}
void* operator new[](std::size_t n) {
  static const New next = global<New>("_Znam", &::operator new[]);
  if (faults::fail_now() || !next) throw std::bad_alloc();
  return next(n);
}
void* operator new(std::size_t n, const std::nothrow_t& t) noexcept {
  static const NewNothrow next = global<NewNothrow>("_ZnwmRKSt9nothrow_t", &::operator new);
  return faults::fail_now() || !next ? nullptr : next(n, t);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  static const NewNothrow next = global<NewNothrow>("_ZnamRKSt9nothrow_t", &::operator new[]);
  return faults::fail_now() || !next ? nullptr : next(n, t);
}
void* operator new(std::size_t n, std::align_val_t a) {
  static const NewAligned next = global<NewAligned>("_ZnwmSt11align_val_t", &::operator new);
  if (faults::fail_now() || !next) throw std::bad_alloc();
  return next(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  static const NewAligned next = global<NewAligned>("_ZnamSt11align_val_t", &::operator new[]);
  if (faults::fail_now() || !next) throw std::bad_alloc();
  return next(n, a);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  static const NewAlignedNothrow next =
      global<NewAlignedNothrow>("_ZnwmSt11align_val_tRKSt9nothrow_t", &::operator new);
  return faults::fail_now() || !next ? nullptr : next(n, a, t);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  static const NewAlignedNothrow next =
      global<NewAlignedNothrow>("_ZnamSt11align_val_tRKSt9nothrow_t", &::operator new[]);
  return faults::fail_now() || !next ? nullptr : next(n, a, t);
}

#endif

namespace kino_trace::nif {

// alloc_faults(Allowed, Name, Args) -> {Result, Failed} | unsupported
// Calls the NIF Name/length(Args) (not alloc_faults itself) with Args, its thread's
// allocations failing after the first Allowed; Failed: how many failed. An exception the
// NIF raises (the RuntimeError of one that ran out of memory) is raised from here.
ERL_NIF_TERM alloc_faults(ErlNifEnv* env, int, const ERL_NIF_TERM argv[]) {
  if (!faults::kEnabled) return make_atom(env, "unsupported");
  ErlNifUInt64 allowed = 0;
  char name[64];
  unsigned argc = 0;
  ERL_NIF_TERM args[8];
  if (!enif_get_uint64(env, argv[0], &allowed) || enif_get_atom(env, argv[1], name, sizeof name, ERL_NIF_LATIN1) <= 0 ||
      !enif_get_list_length(env, argv[2], &argc) || argc > 8)
    return enif_make_badarg(env);
  ERL_NIF_TERM head, tail = argv[2];
  for (unsigned i = 0; enif_get_list_cell(env, tail, &head, &tail); ++i) args[i] = head;
  const ErlNifFunc* nif = nullptr;
  for (std::size_t i = 0; i < nif_table_size; ++i) {
    if (nif_table[i].arity == argc && std::strcmp(nif_table[i].name, name) == 0) nif = &nif_table[i];
  }
  if (!nif || std::strcmp(name, "alloc_faults") == 0) return enif_make_badarg(env);
  faults::arm(allowed);
  ERL_NIF_TERM result = nif->fptr(env, static_cast<int>(argc), args);  // a table entry: never throws
  std::uint64_t failed = faults::disarm();
  ERL_NIF_TERM exception;
  if (enif_has_pending_exception(env, &exception)) return result;
  return enif_make_tuple2(env, result, enif_make_uint64(env, failed));
}

}  // namespace kino_trace::nif
