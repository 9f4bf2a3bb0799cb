#include "loom/exec/autograd_pairs.h"

#include <map>

namespace loom::exec {

std::optional<comm::Primitive> adjoint(comm::Primitive kind) {
  switch (kind) {
    case comm::Primitive::all_gather: return comm::Primitive::reduce_scatter;
    case comm::Primitive::reduce_scatter: return comm::Primitive::all_gather;
    case comm::Primitive::all_to_all: return comm::Primitive::all_to_all;
    default: return std::nullopt;
  }
}

int pair_autograd_collectives(ExecPlan& exec) {
  const ir::Graph& graph = *exec.plan->graph;
  // One entry per tag, in the order the tags were made (the global emission order).
  struct Seen {
    comm::Primitive kind;
    std::vector<int> group;
  };
  std::map<std::int64_t, Seen> tags;
  for (const auto& program : exec.programs)
    for (const Instruction& instruction : program)
      if (const auto* c = std::get_if<Collective>(&instruction)) tags.try_emplace(c->tag, Seen{c->kind, c->group});
  // Forward collectives waiting for their partner, by the tensor they move.
  std::map<std::uint32_t, std::vector<std::int64_t>> open;
  int pairs = 0;
  for (const auto& [tag, seen] : tags) {
    CollectiveInfo& info = exec.collectives[static_cast<std::size_t>(tag)];
    const ir::FullTensor& tensor = graph.tensor(info.tensor);
    if (tensor.role != ir::TensorRole::gradient) {
      if (adjoint(seen.kind)) open[tensor.id.value].push_back(tag);
      continue;
    }
    if (!tensor.owner.valid()) continue;
    auto it = open.find(tensor.owner.value);
    if (it == open.end()) continue;
    for (auto f = it->second.begin(); f != it->second.end(); ++f) {
      const Seen& forward = tags.at(*f);
      if (adjoint(forward.kind) != seen.kind || forward.group != seen.group) continue;
      info.paired = *f;
      exec.collectives[static_cast<std::size_t>(*f)].paired = tag;
      it->second.erase(f);
      ++pairs;
      break;
    }
  }
  return pairs;
}

}  // namespace loom::exec
