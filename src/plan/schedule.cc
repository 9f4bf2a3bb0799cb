#include "loom/plan/schedule.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "loom/plan/primitives.h"

namespace loom::plan {

Expected<void> stage(Plan& plan, std::span<const SubOpId> sub_ops, int device) {
  for (SubOpId id : sub_ops) LOOM_RETURN_IF_ERROR(with_context(assign(plan, id, device), "stage"));
  return {};
}

std::string to_string(const Block& block) {
  return fmt::format("{}{}", block.pass == ir::Pass::forward ? 'F' : 'B', block.micro_batch);
}

std::vector<std::vector<Block>> schedule_blocks(Schedule schedule, int num_stages, int num_micro_batches) {
  std::vector<std::vector<Block>> result(static_cast<std::size_t>(std::max(num_stages, 0)));
  for (int s = 0; s < num_stages; ++s) {
    auto& seq = result[static_cast<std::size_t>(s)];
    const auto fwd = [&](int m) { seq.push_back({s, m, ir::Pass::forward}); };
    const auto bwd = [&](int m) { seq.push_back({s, m, ir::Pass::backward}); };
    if (schedule.kind == ScheduleKind::gpipe) {
      for (int m = 0; m < num_micro_batches; ++m) fwd(m);
      for (int m = 0; m < num_micro_batches; ++m) bwd(m);
      continue;
    }
    // Table 4 with 0-based stage s: ofst = stages - 1 - s, so forwards 0..ofst come before backward 0
    // (constraint 3), and backward m is followed by forward m + ofst + 1 (constraint 4).
    const int warm_up = std::min(num_stages - s, num_micro_batches);
    for (int m = 0; m < warm_up; ++m) fwd(m);
    for (int m = 0; m < num_micro_batches; ++m) {
      bwd(m);
      if (m + warm_up < num_micro_batches) fwd(m + warm_up);
    }
  }
  return result;
}

std::vector<SubOpId> block_sub_ops(const Plan& plan, std::span<const SubOpId> forward, ir::Pass pass) {
  if (pass == ir::Pass::forward) return {forward.begin(), forward.end()};
  std::vector<SubOpId> result;
  for (auto it = forward.rbegin(); it != forward.rend(); ++it)
    if (const SubOpId b = plan.sub_op(*it).mirror; b.valid()) result.push_back(b);
  return result;
}

namespace {

// Checks the stage lists and returns each stage's device (kUnassigned if its sub-ops are not placed yet).
Expected<std::vector<int>> stage_devices(const Plan& plan, const std::vector<std::vector<std::vector<SubOpId>>>& stages) {
  if (stages.empty() || stages.front().empty()) return fail("apply_schedule: no stages or no micro-batches");
  std::vector<int> devices;
  std::set<int> used;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (stages[s].size() != stages.front().size())
      return fail(fmt::format("apply_schedule: stage {} has {} micro-batches, stage 0 has {}", s, stages[s].size(),
                              stages.front().size()));
    int device = kUnassigned;
    bool first = true;
    for (std::size_t m = 0; m < stages[s].size(); ++m) {
      if (stages[s][m].empty()) return fail(fmt::format("apply_schedule: stage {} has no sub-ops for micro-batch {}", s, m));
      for (SubOpId id : stages[s][m]) {
        if (!id.valid() || id.index() >= plan.sub_ops.size())
          return fail(fmt::format("apply_schedule: stage {} names no sub-op ${}", s, id.value));
        const SubOp& sub = plan.sub_op(id);
        if (!sub.live || plan.op_of(id).pass != ir::Pass::forward)
          return fail(fmt::format("apply_schedule: sub-op '{}' of stage {} is not a live forward part", sub.name, s));
        if (first) device = sub.device, first = false;
        if (sub.device != device)
          return fail(fmt::format("apply_schedule: stage {} spans devices {} and {} ('{}')", s, device, sub.device, sub.name),
                      "place a stage on one device (stage())");
      }
    }
    if (device != kUnassigned && !used.insert(device).second)
      return fail(fmt::format("apply_schedule: stage {} shares device {} with an earlier stage", s, device),
                  "one stage per device: interleaved schedules are not supported yet");
    devices.push_back(device);
  }
  return devices;
}

}  // namespace

Expected<std::vector<std::vector<Block>>> apply_schedule(Plan& plan, Schedule schedule,
                                                         const std::vector<std::vector<std::vector<SubOpId>>>& stages) {
  LOOM_RETURN_IF_ERROR(stage_devices(plan, stages));
  const int num_stages = static_cast<int>(stages.size());
  const int num_micro = static_cast<int>(stages.front().size());
  std::vector<std::vector<Block>> blocks = schedule_blocks(schedule, num_stages, num_micro);
  for (const auto& seq : blocks) {
    std::vector<SubOpId> previous;
    for (const Block& block : seq) {
      const auto& forward = stages[static_cast<std::size_t>(block.stage)][static_cast<std::size_t>(block.micro_batch)];
      std::vector<SubOpId> current = block_sub_ops(plan, forward, block.pass);
      if (current.empty()) continue;  // a stage without backward parts has no backward blocks
      if (!previous.empty() && previous.back() != current.front())
        LOOM_RETURN_IF_ERROR(with_context(order(plan, previous.back(), current.front()),
                                          fmt::format("apply_schedule: stage {} block {}", block.stage, to_string(block))));
      previous = std::move(current);
    }
  }
  return blocks;
}

}  // namespace loom::plan
