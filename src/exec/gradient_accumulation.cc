#include "gradient_accumulation.h"

#include <set>

namespace loom::exec::detail {

GradientAccumulator::GradientAccumulator(const plan::Plan& plan, ProgramBuilder& builder) : builder_(builder) {
  const std::vector<char> final = ir::optimizer_gradients(*plan.graph);
  // Activation partial sums a device writes several of are added as they come too, so one running sum
  // lives beside a part's activations rather than all C: forward, coshard's row-parallel parts; backward,
  // the input gradients of its column-parallel parts (policy/coshard.h), each as large as the region's
  // input, which the C chains' backwards write one after another.
  std::vector<char> accumulated = final;
  for (const plan::SubOp& s : plan.sub_ops)
    if (s.live && plan.op_of(s.id).pass != ir::Pass::optimizer)
      for (const plan::SubTensor& out : s.outputs) accumulated[out.tensor.index()] = 1;
  // (tensor, box) -> device -> the value indices its parts hold, and their count.
  std::map<std::pair<std::uint32_t, std::vector<plan::IndexRange>>, std::map<int, std::set<std::int64_t>>> held;
  std::map<std::pair<std::uint32_t, std::vector<plan::IndexRange>>, std::set<std::int64_t>> counts;
  std::set<std::pair<std::uint32_t, std::vector<plan::IndexRange>>> repeated;  // a device holds a part twice
  for (const plan::SubOp& s : plan.sub_ops) {
    if (!s.live) continue;
    for (const plan::SubTensor& out : s.outputs) {
      if (accumulated[out.tensor.index()] == 0 || out.value.is_whole()) continue;
      const std::pair key{out.tensor.value, plan::normalized(out).box};
      if (!held[key][s.device].insert(out.value.index).second) repeated.insert(key);
      counts[key].insert(out.value.count);
    }
  }
  for (const auto& [key, holders] : held) {
    if (counts[key].size() != 1 || repeated.contains(key)) continue;
    const std::int64_t n = *counts[key].begin();
    const std::size_t k = holders.begin()->second.size();
    std::set<std::set<std::int64_t>> distinct;
    std::set<std::int64_t> all;
    bool even = k >= 2;  // every holder holds k of the box's parts
    for (const auto& [device, indices] : holders) {
      even &= indices.size() == k;
      distinct.insert(indices);
      all.insert(indices.begin(), indices.end());
    }
    if (!even || static_cast<std::int64_t>(all.size()) != n || distinct.size() * k != all.size()) continue;
    for (const auto& [device, indices] : holders)
      slots_[{key.first, device, key.second}] = Slot{.rank = std::distance(distinct.begin(), distinct.find(indices)),
                                                     .sets = static_cast<std::int64_t>(distinct.size()),
                                                     .parts = static_cast<std::int64_t>(k)};
  }
}

void GradientAccumulator::produced(const plan::SubOp& s, std::span<const BufferId> outputs) {
  for (std::size_t j = 0; j < s.outputs.size() && j < outputs.size(); ++j) {
    const plan::SubTensor& out = s.outputs[j];
    if (out.value.is_whole()) continue;
    const auto it = slots_.find(Key{out.tensor.value, s.device, plan::normalized(out).box});
    if (it != slots_.end()) add(it->second, s.device, plan::normalized(out), outputs[j]);
  }
}

void GradientAccumulator::skip(ir::TensorId tensor) {
  std::erase_if(slots_, [&](const auto& slot) { return std::get<0>(slot.first) == tensor.value; });
}

void GradientAccumulator::add_part(BufferId part, std::int64_t count) {
  const plan::SubTensor& piece = builder_.piece(part);
  const int device = builder_.device(part);
  auto [it, fresh] =
      partitions_.try_emplace(Key{piece.tensor.value, device, piece.box}, Slot{.rank = 0, .sets = 1, .parts = count});
  add(it->second, device, piece, part);
}

void GradientAccumulator::add(Slot& slot, int device, plan::SubTensor label, BufferId part) {
  if (!slot.sum.valid()) {
    slot.sum = part;
    return;
  }
  label.value = plan::ValuePart{slot.rank, slot.sets};
  const BufferId sum = slot.parts == 2 ? builder_.combine(device, {slot.sum, part}, std::move(label))
                                       : builder_.accumulate(device, {slot.sum, part}, std::move(label));
  sum_of_[slot.sum.value] = sum_of_[part.value] = sum;
  slot.sum = sum;
}

std::vector<BufferId> GradientAccumulator::current(std::span<const BufferId> sources) const {
  std::vector<BufferId> result;
  std::set<std::uint32_t> seen;
  for (BufferId b : sources) {
    for (auto it = sum_of_.find(b.value); it != sum_of_.end(); it = sum_of_.find(b.value)) b = it->second;
    if (seen.insert(b.value).second) result.push_back(b);
  }
  return result;
}

}  // namespace loom::exec::detail
