#include "loom/sim/comm_index.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "loom/exec/instruction_buffers.h"

namespace loom::sim {

Expected<CommIndex> CommIndex::build(const exec::ExecPlan& exec) {
  CommIndex index;
  std::vector<std::pair<std::int64_t, Site>> members;  // (tag, site), device-major as scanned
  for (std::size_t d = 0; d < exec.programs.size(); ++d) {
    const auto& program = exec.programs[d];
    const int device = static_cast<int>(d);
    for (std::uint32_t i = 0; i < program.size(); ++i) {
      const exec::Instruction& instruction = program[i];
      if (const auto c = exec::collective_call(instruction)) members.push_back({c->tag, Site{device, i}});
      else if (const auto* s = std::get_if<exec::Send>(&instruction)) index.sends_.push_back({device, s->peer, s->tag, i});
    }
  }
  // Stable: a tag's sites stay by device ascending.
  std::ranges::stable_sort(members, {}, &std::pair<std::int64_t, Site>::first);
  index.sites_.reserve(members.size());
  for (std::size_t k = 0; k < members.size(); ++k) {
    if (k == 0 || members[k].first != members[k - 1].first) {
      index.tags_.push_back(members[k].first);
      index.offsets_.push_back(k);
    }
    index.sites_.push_back(members[k].second);
  }
  index.offsets_.push_back(members.size());
  std::ranges::sort(index.sends_, {}, [](const Transfer& t) { return std::tie(t.src, t.dst, t.tag, t.instruction); });
  for (std::size_t k = 1; k < index.sends_.size(); ++k) {
    const Transfer& a = index.sends_[k - 1];
    const Transfer& b = index.sends_[k];
    if (std::tie(a.src, a.dst, a.tag) == std::tie(b.src, b.dst, b.tag))
      return fail(fmt::format("device {} sends to device {} twice with tag {} (instructions {} and {})", a.src, a.dst,
                              a.tag, a.instruction, b.instruction),
                  "a sender, receiver and tag name one transfer; check the plan with check_exec_plan");
  }
  return index;
}

std::span<const Site> CommIndex::collective(std::int64_t tag) const {
  const auto it = std::ranges::lower_bound(tags_, tag);
  if (it == tags_.end() || *it != tag) return {};
  const auto k = static_cast<std::size_t>(it - tags_.begin());
  return std::span<const Site>(sites_).subspan(offsets_[k], offsets_[k + 1] - offsets_[k]);
}

std::optional<std::uint32_t> CommIndex::send(int src, int dst, std::int64_t tag) const {
  const auto key = std::make_tuple(src, dst, tag);
  const auto it =
      std::ranges::lower_bound(sends_, key, {}, [](const Transfer& t) { return std::make_tuple(t.src, t.dst, t.tag); });
  if (it == sends_.end() || std::make_tuple(it->src, it->dst, it->tag) != key) return std::nullopt;
  return it->instruction;
}

}  // namespace loom::sim
