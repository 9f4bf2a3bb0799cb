#include "local_sums.h"

#include <map>
#include <set>

namespace loom::exec::detail {
namespace {

using Box = std::vector<plan::IndexRange>;

Box normalized_box(const plan::SubTensor& piece) { return plan::normalized(piece).box; }

}  // namespace

std::optional<std::vector<LocalSum>> plan_local_sums(const ProgramBuilder& builder, std::span<const BufferId> sources) {
  std::map<Box, std::map<int, std::vector<BufferId>>> by_box;  // box -> device -> its parts there
  for (BufferId b : sources) by_box[normalized_box(builder.piece(b))][builder.device(b)].push_back(b);
  bool any = false;
  std::vector<LocalSum> sums;
  for (const auto& [box, holders] : by_box) {
    const std::size_t k = holders.begin()->second.size();
    const std::int64_t n = builder.piece(holders.begin()->second.front()).value.count;
    std::map<int, std::set<std::int64_t>> held;  // device -> the indices it holds
    std::set<std::set<std::int64_t>> distinct;
    for (const auto& [device, parts] : holders) {
      if (parts.size() != k) return std::nullopt;
      for (BufferId b : parts) {
        const plan::ValuePart v = builder.piece(b).value;
        if (v.count != n || !held[device].insert(v.index).second) return std::nullopt;
      }
      distinct.insert(held[device]);
    }
    std::set<std::int64_t> all;
    for (const auto& set : distinct) all.insert(set.begin(), set.end());
    if (static_cast<std::int64_t>(all.size()) != n || distinct.size() * k != all.size()) return std::nullopt;
    any |= k > 1;
    const auto count = static_cast<std::int64_t>(distinct.size());
    for (const auto& [device, parts] : holders) {
      plan::SubTensor label = builder.piece(parts.front());
      label.box = box;
      label.value = plan::ValuePart{std::distance(distinct.begin(), distinct.find(held[device])), count};
      sums.push_back({device, parts, std::move(label)});
    }
  }
  if (!any) return std::nullopt;
  return sums;
}

NeedMap<BufferId> summed_in_place(ProgramBuilder& builder, const plan::Plan& plan, ir::OpId op, ir::TensorId tensor,
                                  std::span<const BufferId> written) {
  // What each device reads: one piece per device, all of one box and count m.
  std::map<int, plan::SubTensor> reads;
  const plan::OpLayout& layout = plan.layouts[op.index()];
  for (plan::SubOpId id : plan.parts[op.index()]) {
    const plan::SubOp& s = plan.sub_op(id);
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      if (s.inputs[i].tensor != tensor || layout.shape_only(i)) continue;
      const plan::SubTensor piece = plan::normalized(s.inputs[i]);
      const auto [at, fresh] = reads.try_emplace(s.device, piece);
      const plan::SubTensor& first = reads.begin()->second;
      if (piece.value.is_whole() || piece.box != first.box || piece.value.count != first.value.count ||
          !(at->second == piece))
        return {};
    }
  }
  if (reads.empty()) return {};
  const plan::SubTensor& first = reads.begin()->second;
  std::vector<BufferId> sources;
  for (BufferId b : written) {
    if (!plan::boxes_meet(builder.piece(b), first)) continue;
    if (normalized_box(builder.piece(b)) != first.box) return {};
    sources.push_back(b);
  }
  const auto sums = plan_local_sums(builder, sources);
  if (!sums) return {};
  std::map<int, const LocalSum*> sum_on;
  for (const LocalSum& sum : *sums) sum_on[sum.device] = &sum;
  // The parts read must be one decomposition, the sums another, matched one to one (replicas of a part
  // read replicas of a sum).
  std::map<std::int64_t, std::int64_t> sum_for;  // index read -> rank of the sum read for it
  std::set<std::int64_t> ranks;
  for (const auto& [device, piece] : reads) {
    const auto it = sum_on.find(device);
    if (it == sum_on.end() || it->second->label.value.count != first.value.count) return {};
    const std::int64_t rank = it->second->label.value.index;
    const auto [known, fresh] = sum_for.try_emplace(piece.value.index, rank);
    if (!fresh && known->second != rank) return {};
    ranks.insert(rank);
  }
  if (static_cast<std::int64_t>(sum_for.size()) != first.value.count || ranks.size() != sum_for.size()) return {};
  NeedMap<BufferId> result;
  for (const auto& [device, piece] : reads) {
    const LocalSum& sum = *sum_on.at(device);
    result.emplace(NeedKey{device, piece}, builder.combine(device, sum.parts, sum.label));
  }
  return result;
}

}  // namespace loom::exec::detail
