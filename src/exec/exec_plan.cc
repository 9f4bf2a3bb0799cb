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

std::int64_t ExecPlan::add_group_step(std::vector<std::vector<int>> groups) {
  if (groups.size() < 2) return -1;
  if (indexed_steps_ > group_steps.size()) {  // the list was cut: index it afresh
    step_of_groups_.clear();
    indexed_steps_ = 0;
  }
  for (; indexed_steps_ < group_steps.size(); ++indexed_steps_)
    step_of_groups_.try_emplace(group_steps[indexed_steps_], static_cast<std::int64_t>(indexed_steps_));
  const auto [it, fresh] =
      step_of_groups_.try_emplace(canonical_groups(std::move(groups)), static_cast<std::int64_t>(group_steps.size()));
  if (fresh) {
    group_steps.push_back(it->first);
    ++indexed_steps_;
  }
  return it->second;
}

bool has_asynchronous_form(comm::Primitive kind) {
  return kind == comm::Primitive::all_reduce || kind == comm::Primitive::all_gather ||
         kind == comm::Primitive::reduce_scatter;
}

}  // namespace loom::exec
