#include "local_sums.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

namespace loom::exec::detail {
namespace {

using Box = std::vector<plan::IndexRange>;

Box normalized_box(const plan::SubTensor& piece) { return plan::normalized(piece).box; }

// One box's local sums: by device, and the replicas of each rank.
struct BoxSums {
  std::vector<LocalSum> sums;
  std::map<int, const LocalSum*> on;
  std::map<std::int64_t, std::vector<const LocalSum*>> of_rank;
};

}  // namespace

std::optional<std::vector<LocalSum>> plan_local_sums(const ProgramBuilder& builder, std::span<const BufferId> sources,
                                                     bool single_parts) {
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
  if (!any && !single_parts) return std::nullopt;
  return sums;
}

NeedMap<BufferId> summed_in_place(ProgramBuilder& builder, const plan::Plan& plan, ir::OpId op, ir::TensorId tensor,
                                  const std::vector<plan::IndexRange>& box_read, std::span<const BufferId> written,
                                  const CurrentSums& current) {
  // What each device reads of each box (micro-batches read several): one piece per (device, box); the
  // pieces of one box are parts of one count.
  std::map<std::pair<int, Box>, plan::SubTensor> reads;
  std::map<Box, std::vector<int>> readers;  // box -> the devices reading a part of it
  const plan::OpLayout& layout = plan.layouts[op.index()];
  for (plan::SubOpId id : plan.parts[op.index()]) {
    const plan::SubOp& s = plan.sub_op(id);
    for (std::size_t i = 0; i < s.inputs.size(); ++i) {
      if (s.inputs[i].tensor != tensor || layout.shape_only(i)) continue;
      const plan::SubTensor piece = plan::normalized(s.inputs[i]);
      if (piece.box != box_read) continue;
      const auto [at, fresh] = reads.try_emplace({s.device, piece.box}, piece);
      if (piece.value.is_whole() || !(at->second == piece)) return {};
      if (fresh) readers[piece.box].push_back(s.device);
    }
  }
  NeedMap<BufferId> result;
  std::map<std::pair<int, Box>, BufferId> summed;  // (device, box written) -> the device's sum there
  std::map<int, int> sent;                          // by device: the sums it sent
  for (const auto& [box, devices] : readers) {
    const auto read = [&](int device) -> const plan::SubTensor& { return reads.at({device, box}); };
    const plan::SubTensor& first = read(devices.front());
    const std::int64_t count = first.value.count;
    if (std::ranges::any_of(devices, [&](int d) { return read(d).value.count != count; })) return {};
    // The boxes the producers wrote that meet it, each held in several parts on each of its devices: the
    // tp parts' rows where one device reads them all, or rows of a box written whole (a tp-replicated
    // head's partial gradient of the whole table).
    std::map<Box, std::vector<BufferId>> sources;
    for (BufferId b : written)
      if (plan::boxes_meet(builder.piece(b), first)) sources[normalized_box(builder.piece(b))].push_back(b);
    std::vector<plan::SubTensor> tiles;  // aligned with `sources`: the part of `box` each serves
    for (const auto& [written_box, parts] : sources) {
      plan::SubTensor tile{first.tensor, written_box, plan::ValuePart::whole()};
      tile.box = *plan::box_intersection(tile, first);
      if (std::ranges::any_of(tiles, [&](const plan::SubTensor& t) { return plan::boxes_meet(t, tile); })) return {};
      tiles.push_back(std::move(tile));
    }
    if (tiles.empty() || !plan::check_coverage(plan::SubTensor{first.tensor, box, plan::ValuePart::whole()}, tiles, ""))
      return {};
    std::vector<BoxSums> per_box;  // aligned with `sources`; its maps point into its sums
    per_box.reserve(sources.size());
    for (const auto& [inner, parts] : sources) {
      const auto sums = plan_local_sums(builder, parts, /*single_parts=*/true);
      if (!sums) return {};
      BoxSums& b = per_box.emplace_back();
      b.sums = *sums;
      for (const LocalSum& sum : b.sums) {
        if (sum.label.value.count != count) return {};
        b.on[sum.device] = &sum;
        b.of_rank[sum.label.value.index].push_back(&sum);
      }
      if (static_cast<std::int64_t>(b.of_rank.size()) != count) return {};
    }
    // The parts read must be one decomposition, each box's sums another, matched one to one (replicas of a
    // part read replicas of a sum), the same match for every box: a device holding a sum reads it, the
    // other parts read take the ranks left.
    std::map<std::int64_t, std::int64_t> sum_for;  // index read -> rank of the sums read for it
    std::set<std::int64_t> taken;
    for (int device : devices)
      for (const BoxSums& b : per_box) {
        const auto it = b.on.find(device);
        if (it == b.on.end()) continue;
        const std::int64_t rank = it->second->label.value.index;
        const auto [known, fresh] = sum_for.try_emplace(read(device).value.index, rank);
        if (fresh ? !taken.insert(rank).second : known->second != rank) return {};
      }
    for (int device : devices) {
      const std::int64_t index = read(device).value.index;
      if (sum_for.contains(index)) continue;
      std::int64_t rank = 0;
      while (taken.contains(rank)) ++rank;
      sum_for[index] = rank;
      taken.insert(rank);
    }
    if (static_cast<std::int64_t>(sum_for.size()) != count) return {};
    // Each sum is added up once where it lies (its parts already added as they came,
    // gradient_accumulation.h), cut to the rows read and sent to the readers that do not hold it: from
    // the replica that has sent least, then the nearest (tp ranks holding replicas of a head's sum send
    // one each); a reader of several boxes joins their sums (all named by the same rank).
    for (int device : devices) {
      const plan::SubTensor& piece = read(device);
      const std::int64_t rank = sum_for.at(piece.value.index);
      std::vector<BufferId> boxes;
      for (std::size_t i = 0; i < per_box.size(); ++i) {
        const LocalSum* from = *std::ranges::min_element(per_box[i].of_rank.at(rank), {}, [&](const LocalSum* s) {
          return std::pair(s->device == device ? -1 : sent[s->device], std::abs(s->device - device));
        });
        if (from->device != device) ++sent[from->device];
        auto [at, fresh] = summed.try_emplace({from->device, from->label.box});
        if (fresh) {
          const std::vector<BufferId> terms = current(from->parts);
          at->second = terms.size() == 1 ? terms.front() : builder.combine(from->device, terms, from->label);
        }
        boxes.push_back(builder.transfer(builder.slice(at->second, tiles[i].box), device, "partial sums summed where written"));
      }
      plan::SubTensor target{piece.tensor, box, plan::ValuePart{rank, count}};
      result.emplace(NeedKey{device, piece},
                     boxes.size() == 1 ? boxes.front() : builder.combine(device, std::move(boxes), std::move(target)));
    }
  }
  return result;
}

}  // namespace loom::exec::detail
