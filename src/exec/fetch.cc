#include "fetch.h"

#include <cstdlib>
#include <map>
#include <utility>

namespace loom::exec::detail {
namespace {

// Orders labels so replicas meet: box ranges (start, stop, step), then the value part; no key is built.
struct LabelLess {
  bool operator()(const plan::SubTensor& a, const plan::SubTensor& b) const {
    for (std::size_t d = 0; d < a.box.size() && d < b.box.size(); ++d)
      if (a.box[d] != b.box[d]) return a.box[d] < b.box[d];
    if (a.box.size() != b.box.size()) return a.box.size() < b.box.size();
    return std::pair(a.value.index, a.value.count) < std::pair(b.value.index, b.value.count);
  }
};

}  // namespace

BufferId fetch(ProgramBuilder& builder, int device, const plan::SubTensor& target, std::span<const BufferId> sources,
               const std::string& rule) {
  std::map<plan::SubTensor, BufferId, LabelLess> nearest;  // one replica per label
  for (BufferId b : sources) {
    const plan::SubTensor& piece = builder.piece(b);
    if (!plan::boxes_meet(piece, target)) continue;
    auto [it, fresh] = nearest.try_emplace(piece, b);
    if (fresh) continue;
    const auto distance = [&](BufferId c) { return std::abs(builder.device(c) - device); };
    if (distance(b) < distance(it->second)) it->second = b;
  }
  std::vector<BufferId> parts;
  for (const auto& [label, source] : nearest) {
    const BufferId sliced = builder.slice(source, *plan::box_intersection(label, target));
    parts.push_back(builder.transfer(sliced, device, rule));
  }
  builder.stats().fallback_fetches++;
  return builder.combine(device, std::move(parts), target);
}

}  // namespace loom::exec::detail
