#include "fetch.h"

#include <cstdlib>
#include <map>

namespace loom::exec::detail {
namespace {

// Orders labels so replicas meet: box ranges, then the value part.
struct LabelLess {
  bool operator()(const plan::SubTensor& a, const plan::SubTensor& b) const {
    const auto key = [](const plan::SubTensor& t) {
      std::vector<std::int64_t> k;
      for (const plan::IndexRange& r : t.box) k.insert(k.end(), {r.start, r.stop, r.step});
      k.insert(k.end(), {t.value.index, t.value.count});
      return k;
    };
    return key(a) < key(b);
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
