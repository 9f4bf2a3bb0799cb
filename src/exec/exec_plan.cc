#include "loom/exec/exec_plan.h"

namespace loom::exec {

std::string_view name(LocalKind kind) {
  switch (kind) {
    case LocalKind::slice: return "slice";
    case LocalKind::scale: return "scale";
    case LocalKind::combine: return "combine";
  }
  return "?";
}

}  // namespace loom::exec
