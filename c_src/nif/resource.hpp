// Resource objects whose constructor may throw (std::bad_alloc: a SessionCore's vectors,
// say). The resource holds the object, then a byte saying it was constructed: when the
// constructor throws, the resource is released and its destructor callback
// (destroy_resource) finds nothing to destroy. The object stays at the resource's start,
// so enif_get_resource gives it as it is.
#pragma once

#include <erl_nif.h>

#include <new>
#include <utility>

namespace kino_trace::nif {

template <class T>
bool& constructed(void* obj) {
  return *static_cast<bool*>(static_cast<void*>(static_cast<char*>(obj) + sizeof(T)));
}

// A new resource holding T(args...), or nullptr when the VM has no memory for it. Throws
// what T's constructor throws, the resource released.
template <class T, class... Args>
T* make_resource(ErlNifResourceType* type, Args&&... args) {
  void* mem = enif_alloc_resource(type, sizeof(T) + sizeof(bool));
  if (!mem) return nullptr;
  constructed<T>(mem) = false;
  try {
    T* object = new (mem) T(std::forward<Args>(args)...);
    constructed<T>(mem) = true;
    return object;
  } catch (...) {
    enif_release_resource(mem);
    throw;
  }
}

// The resource type's destructor callback for T.
template <class T>
void destroy_resource(ErlNifEnv*, void* obj) noexcept {
  if (constructed<T>(obj)) static_cast<T*>(obj)->~T();
}

}  // namespace kino_trace::nif
