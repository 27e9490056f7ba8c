// Placeholder until the CPU backend lands.
#include "api/backend.h"

namespace flashattn::detail {
Status cpu_check(const Problem&, RunInfo*) { return Status::NotSupported("backend cpu: not built yet"); }
Status cpu_forward(const Problem& p, RunInfo* i) { return cpu_check(p, i); }
Status cpu_backward(const Problem& p, RunInfo* i) { return cpu_check(p, i); }
Capabilities cpu_capabilities() { return {}; }
}  // namespace flashattn::detail
