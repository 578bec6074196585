// The VM's trace tags as kino_trace's event kinds (session_event.hpp).
#pragma once

#include <erl_nif.h>

#include "atoms.hpp"
#include "session_event.hpp"

namespace kino_trace::nif {

namespace kt = kino_trace;

inline kt::EventKind kind_of(ERL_NIF_TERM tag) {
  if (tag == atoms.call) return kt::EventKind::Call;
  if (tag == atoms.return_from) return kt::EventKind::ReturnFrom;
  if (tag == atoms.exception_from) return kt::EventKind::ExceptionFrom;
  if (tag == atoms.return_to) return kt::EventKind::ReturnTo;
  if (tag == atoms.send) return kt::EventKind::Send;
  if (tag == atoms.send_to_non_existing_process) return kt::EventKind::SendToNonExisting;
  if (tag == atoms.receive) return kt::EventKind::Receive;
  if (tag == atoms.spawn) return kt::EventKind::Spawn;
  if (tag == atoms.spawned) return kt::EventKind::Spawned;
  if (tag == atoms.exit) return kt::EventKind::Exit;
  if (tag == atoms.link) return kt::EventKind::Link;
  if (tag == atoms.unlink) return kt::EventKind::Unlink;
  if (tag == atoms.getting_linked) return kt::EventKind::GettingLinked;
  if (tag == atoms.getting_unlinked) return kt::EventKind::GettingUnlinked;
  if (tag == atoms.register_) return kt::EventKind::Register;
  if (tag == atoms.unregister) return kt::EventKind::Unregister;
  return kt::EventKind::Other;
}

}  // namespace kino_trace::nif
