#include "loom/exec/exec_plan.h"

namespace loom::exec {

std::string_view name(LocalKind kind) {
  switch (kind) {
    case LocalKind::slice: return "slice";
    case LocalKind::scale: return "scale";
    case LocalKind::combine: return "combine";
    case LocalKind::accumulate: return "accumulate";
  }
  return "?";
}

bool has_asynchronous_form(comm::Primitive kind) {
  return kind == comm::Primitive::all_reduce || kind == comm::Primitive::all_gather;
}

}  // namespace loom::exec
