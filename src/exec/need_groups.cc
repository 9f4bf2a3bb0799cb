#include "need_groups.h"

#include "loom/core/disjoint_sets.h"

namespace loom::exec::detail {

ConsumerNeeds group_needs(const plan::Plan& plan, ir::OpId op, ir::TensorId tensor, const std::vector<OutputRef>& producers) {
  ConsumerNeeds result;
  std::vector<PlacedPiece> needs;
  NeedMap<std::size_t> index;
  const plan::OpLayout& layout = plan.layouts[op.index()];
  for (plan::SubOpId part : plan.parts[op.index()]) {
    const plan::SubOp& s = plan.sub_op(part);
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      if (s.inputs[i].tensor != tensor || layout.shape_only(i) || !s.inputs[i].value.is_whole()) continue;
      NeedKey key{s.device, plan::normalized(s.inputs[i])};
      if (index.try_emplace(key, needs.size()).second) needs.push_back({s.device, key.piece});
    }
  }
  // Needs (indices [0, needs)) and producer pieces (after them) joined by overlapping boxes.
  DisjointSets sets(needs.size() + producers.size());
  for (std::size_t n = 0; n < needs.size(); ++n)
    for (std::size_t p = 0; p < producers.size(); ++p) {
      const plan::SubTensor& out = plan.sub_op(producers[p].first).outputs[producers[p].second];
      if (plan::boxes_meet(needs[n].piece, out)) sets.unite(n, needs.size() + p);
    }
  std::unordered_map<std::size_t, std::size_t> group_of_root;
  const auto group_at = [&](std::size_t x) {
    auto [g, made] = group_of_root.try_emplace(sets.find(x), result.groups.size());
    if (made) result.groups.emplace_back();
    return g->second;
  };
  for (std::size_t n = 0; n < needs.size(); ++n) {
    const std::size_t g = group_at(n);
    result.groups[g].needs.push_back(needs[n]);
    result.group_of.emplace(NeedKey{needs[n].device, needs[n].piece}, g);
  }
  for (std::size_t p = 0; p < producers.size(); ++p)
    if (group_of_root.contains(sets.find(needs.size() + p))) {
      const std::size_t g = group_at(needs.size() + p);
      result.groups[g].producers.push_back(producers[p]);
      result.group_of_producer.emplace(producers[p], g);
    }
  return result;
}

}  // namespace loom::exec::detail
