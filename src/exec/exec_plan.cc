#include "loom/exec/exec_plan.h"

#include <algorithm>

namespace loom::exec {

std::string_view name(LocalKind kind) {
  switch (kind) {
    case LocalKind::slice: return "slice";
    case LocalKind::scale: return "scale";
    case LocalKind::combine: return "combine";
    case LocalKind::accumulate: return "accumulate";
    case LocalKind::copy: return "copy";
  }
  return "?";
}

std::string_view name(Memory memory) { return memory == Memory::host ? "host" : "gpu"; }

std::vector<std::vector<int>> canonical_groups(std::vector<std::vector<int>> groups) {
  for (std::vector<int>& group : groups) std::ranges::sort(group);
  std::ranges::sort(groups);
  return groups;
}

bool has_asynchronous_form(comm::Primitive kind) {
  return kind == comm::Primitive::all_reduce || kind == comm::Primitive::all_gather ||
         kind == comm::Primitive::reduce_scatter;
}

}  // namespace loom::exec
