#include "fetch.h"

#include <cstdlib>
#include <map>
#include <set>
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

// (device, box) keys of remote value parts.
struct RemoteBoxLess {
  bool operator()(const std::pair<int, plan::SubTensor>& a, const std::pair<int, plan::SubTensor>& b) const {
    if (a.first != b.first) return a.first < b.first;
    return LabelLess{}(a.second, b.second);
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
  // Value parts of one box that a remote device holds and that sum to the box's whole value are added
  // there and sent once (a pipeline's last stage sending a tied embedding's gradient summed over its
  // micro-batches, not one transfer per micro-batch).
  std::map<std::pair<int, plan::SubTensor>, std::vector<BufferId>, RemoteBoxLess> remote;
  for (const auto& [label, source] : nearest)
    if (builder.device(source) != device && !label.value.is_whole()) {
      plan::SubTensor box = label;
      box.value = plan::ValuePart::whole();
      remote[{builder.device(source), box}].push_back(source);
    }
  std::vector<BufferId> parts;
  std::set<BufferId> presummed;
  for (const auto& [where, group] : remote) {
    if (group.size() < 2) continue;
    std::vector<plan::SubTensor> labels;
    for (BufferId b : group) labels.push_back(builder.piece(b));
    if (!plan::check_coverage(where.second, labels, "")) continue;  // not a whole decomposition of the box
    const auto box = *plan::box_intersection(where.second, target);
    std::vector<BufferId> sliced;
    for (BufferId b : group) sliced.push_back(builder.slice(b, box));
    plan::SubTensor whole = where.second;
    whole.box = box;
    parts.push_back(builder.transfer(builder.combine(where.first, std::move(sliced), whole), device, rule));
    presummed.insert(group.begin(), group.end());
  }
  for (const auto& [label, source] : nearest) {
    if (presummed.contains(source)) continue;
    const BufferId sliced = builder.slice(source, *plan::box_intersection(label, target));
    parts.push_back(builder.transfer(sliced, device, rule));
  }
  builder.stats().fallback_fetches++;
  return builder.combine(device, std::move(parts), target);
}

}  // namespace loom::exec::detail
