#include "loom/plan/schedule.h"

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include "loom/plan/primitives.h"
#include "loom/plan/schedule_3f1b.h"
#include "schedule_templates.h"

namespace loom::plan {

Expected<void> stage(Plan& plan, std::span<const SubOpId> sub_ops, int device) {
  for (SubOpId id : sub_ops) LOOM_RETURN_IF_ERROR(with_context(assign(plan, id, device), "stage"));
  return {};
}

char part_letter(BlockPart part) { return part == BlockPart::forward ? 'F' : part == BlockPart::backward ? 'B' : 'W'; }

std::string to_string(const Block& block) { return fmt::format("{}{}", part_letter(block.part), block.micro_batch); }

bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::zb_h1 || kind == ScheduleKind::zb_h2 || v_shaped(kind);
}

bool v_shaped(ScheduleKind kind) { return kind == ScheduleKind::zb_v || kind == ScheduleKind::dualpipe_v; }

bool places_chunks(ScheduleKind kind) { return v_shaped(kind) || kind == ScheduleKind::three_f_one_b; }

int pipeline_device(ScheduleKind kind, int stage, int devices) {
  if (v_shaped(kind) && stage >= devices) return 2 * devices - 1 - stage;
  return stage % devices;
}

namespace {
constexpr std::array<std::string_view, 8> kScheduleNames = {"gpipe", "1f1b",  "interleaved 1f1b", "zb-h1",
                                                            "zb-h2", "zb-v", "dualpipe-v",       "3f1b"};
}  // namespace

std::string_view name(ScheduleKind kind) { return kScheduleNames[static_cast<std::size_t>(kind)]; }

std::string_view name(BlockOrder order) { return order == BlockOrder::strict ? "strict" : "hoist"; }

Expected<BlockOrder> parse_block_order(std::string_view text) {
  if (text == "strict") return BlockOrder::strict;
  if (text == "hoist") return BlockOrder::hoist;
  return fail(fmt::format("unknown block order '{}'", text),
              "use strict (each block after the whole block before it, as Megatron-LM) or hoist (only a block's "
              "first sub-op after the block before)");
}

Expected<ScheduleKind> parse_schedule_kind(std::string_view text) {
  for (std::size_t i = 0; i < kScheduleNames.size(); ++i)
    if (kScheduleNames[i] == text && static_cast<ScheduleKind>(i) != ScheduleKind::interleaved_one_f_one_b)
      return static_cast<ScheduleKind>(i);
  return fail(fmt::format("unknown schedule '{}'", text),
              "use gpipe, 1f1b, zb-h1, zb-h2, zb-v, dualpipe-v or 3f1b (--interleave V for interleaved 1F1B)");
}

namespace {

// Megatron's interleaved 1F1B for device s of p with v chunks and m micro-batches (a multiple of p).
std::vector<Block> interleaved_sequence(int s, int p, int v, int m) {
  const int total = v * m;
  // The k-th forward (backward) of the device: micro-batches go in groups of p through chunk 0, then
  // the same group through chunk 1, and so on; backwards take the chunks in reverse.
  const auto block = [&](int k, BlockPart part) {
    int chunk = (k % (p * v)) / p;
    if (part == BlockPart::backward) chunk = v - 1 - chunk;
    return Block{.stage = chunk * p + s, .micro_batch = (k / (p * v)) * p + k % p, .part = part};
  };
  const int warm_up = std::min(2 * (p - s - 1) + (v - 1) * p, total);
  std::vector<Block> seq;
  for (int k = 0; k < warm_up; ++k) seq.push_back(block(k, BlockPart::forward));
  for (int k = 0; k + warm_up < total; ++k) {
    seq.push_back(block(k + warm_up, BlockPart::forward));
    seq.push_back(block(k, BlockPart::backward));
  }
  for (int k = std::max(total - warm_up, 0); k < total; ++k) seq.push_back(block(k, BlockPart::backward));
  return seq;
}

}  // namespace

Expected<std::vector<std::vector<Block>>> schedule_blocks(Schedule schedule, int num_devices, int num_micro_batches) {
  if (num_devices < 1 || num_micro_batches < 1 || schedule.chunks < 1)
    return fail(fmt::format("schedule: {} devices, {} micro-batches and {} chunks per device; each must be at least 1",
                            num_devices, num_micro_batches, schedule.chunks));
  const bool interleaved = schedule.kind == ScheduleKind::interleaved_one_f_one_b;
  if (v_shaped(schedule.kind)) {
    if (schedule.chunks != 2)
      return fail(
          fmt::format("schedule {}: {} model chunks per device; the V has 2", name(schedule.kind), schedule.chunks),
                  "give 2 chunks per device (stages 2 x devices)");
    if (schedule.kind == ScheduleKind::zb_v) return zb_v_blocks(num_devices, num_micro_batches);
    if (num_micro_batches < 2 * num_devices)
      return fail(fmt::format("schedule dualpipe-v: {} micro-batches for {} pipeline devices; DualPipeV needs at least "
                              "2 per device ({})",
                              num_micro_batches, num_devices, 2 * num_devices),
                  "raise --microbatches to 2 x pp or more, or use zb-v");
    return dualpipe_v_blocks(num_devices, num_micro_batches);
  }
  if (schedule.kind == ScheduleKind::three_f_one_b) {
    LOOM_ASSIGN_OR_RETURN(ThreeFOneBSearch found,
                          search_three_f_one_b(num_devices, schedule.chunks, num_micro_batches));
    return std::move(found.devices);
  }
  if (!interleaved && schedule.chunks != 1)
    return fail(fmt::format("schedule: {} model chunks per device need the interleaved 1F1B schedule", schedule.chunks),
                "use ScheduleKind::interleaved_one_f_one_b, or one chunk per device");
  if (interleaved && num_micro_batches > 1 && num_micro_batches % num_devices != 0)
    return fail(fmt::format("interleaved 1F1B: {} micro-batches are not a multiple of the {} pipeline devices",
                            num_micro_batches, num_devices),
                "Megatron's interleaved schedule runs micro-batches in groups of one per device; use a multiple");
  if (schedule.kind == ScheduleKind::zb_h1) return zb_h1_blocks(num_devices, num_micro_batches);
  if (schedule.kind == ScheduleKind::zb_h2) return zb_h2_blocks(num_devices, num_micro_batches);
  std::vector<std::vector<Block>> result(static_cast<std::size_t>(num_devices));
  for (int s = 0; s < num_devices; ++s) {
    auto& seq = result[static_cast<std::size_t>(s)];
    if (interleaved && num_micro_batches == 1) {
      // One micro-batch (a folded slice, exec/fold.h) passes the chunks in order, then back.
      for (int c = 0; c < schedule.chunks; ++c) seq.push_back({c * num_devices + s, 0, BlockPart::forward});
      for (int c = schedule.chunks; c-- > 0;) seq.push_back({c * num_devices + s, 0, BlockPart::backward});
      continue;
    }
    if (interleaved) {
      seq = interleaved_sequence(s, num_devices, schedule.chunks, num_micro_batches);
      continue;
    }
    const auto fwd = [&](int m) { seq.push_back({s, m, BlockPart::forward}); };
    const auto bwd = [&](int m) { seq.push_back({s, m, BlockPart::backward}); };
    if (schedule.kind == ScheduleKind::gpipe) {
      for (int m = 0; m < num_micro_batches; ++m) fwd(m);
      for (int m = 0; m < num_micro_batches; ++m) bwd(m);
      continue;
    }
    // Table 4 with 0-based stage s: ofst = stages - 1 - s, so forwards 0..ofst come before backward 0
    // (constraint 3), and backward m is followed by forward m + ofst + 1 (constraint 4).
    const int warm_up = std::min(num_devices - s, num_micro_batches);
    for (int m = 0; m < warm_up; ++m) fwd(m);
    for (int m = 0; m < num_micro_batches; ++m) {
      bwd(m);
      if (m + warm_up < num_micro_batches) fwd(m + warm_up);
    }
  }
  return result;
}

std::vector<SubOpId> block_sub_ops(const Plan& plan, std::span<const SubOpId> forward, BlockPart part) {
  if (part == BlockPart::forward) return {forward.begin(), forward.end()};
  std::vector<SubOpId> result;
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    const SubOp& s = plan.sub_op(*it);
    if (const SubOpId b = part == BlockPart::weight ? s.weight_mirror : s.mirror; b.valid()) result.push_back(b);
  }
  return result;
}

namespace {

// Checks the stage lists: each stage on one device (kUnassigned if its sub-ops are not placed yet), the
// `chunks` stages of one pipeline device on the same device, different pipeline devices apart.
Expected<void> check_stage_devices(const Plan& plan, const std::vector<std::vector<std::vector<SubOpId>>>& stages,
                                   Schedule schedule) {
  const int chunks = schedule.chunks;
  if (stages.empty() || stages.front().empty()) return fail("apply_schedule: no stages or no micro-batches");
  if (chunks < 1 || stages.size() % static_cast<std::size_t>(chunks) != 0)
    return fail(fmt::format("apply_schedule: {} stages do not divide into {} chunks per device", stages.size(), chunks),
                "give chunks x pipeline devices stages");
  const std::size_t pipeline_devices = stages.size() / static_cast<std::size_t>(chunks);
  std::vector<int> device_of_rank(pipeline_devices, kUnassigned);
  std::map<int, std::size_t> rank_of_device;
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
    if (device == kUnassigned) continue;
    const auto rank = static_cast<std::size_t>(
        pipeline_device(schedule.kind, static_cast<int>(s), static_cast<int>(pipeline_devices)));
    int& expected = device_of_rank[rank];
    if (expected != kUnassigned && expected != device)
      return fail(fmt::format("apply_schedule: stage {} is on device {}, but the other chunks of pipeline device {} are "
                              "on device {}",
                              s, device, rank, expected),
                  "stage c * devices + s is chunk c of pipeline device s: place a device's chunks together");
    expected = device;
    if (const auto [it, inserted] = rank_of_device.emplace(device, rank); !inserted && it->second != rank)
      return fail(fmt::format("apply_schedule: stage {} shares device {} with an earlier stage", s, device),
                  chunks > 1 ? "only the chunks of one pipeline device (stages s, s + devices, ...) share a device"
                             : "one stage per device, or an interleaved schedule with several chunks per device");
  }
  return {};
}

}  // namespace

Expected<std::vector<std::vector<Block>>> apply_schedule(Plan& plan, Schedule schedule,
                                                         const std::vector<std::vector<std::vector<SubOpId>>>& stages) {
  LOOM_RETURN_IF_ERROR(check_stage_devices(plan, stages, schedule));
  const int num_devices = static_cast<int>(stages.size()) / schedule.chunks;
  const int num_micro = static_cast<int>(stages.front().size());
  LOOM_ASSIGN_OR_RETURN(std::vector<std::vector<Block>> blocks,
                        with_context(schedule_blocks(schedule, num_devices, num_micro), "apply_schedule"));
  for (const auto& seq : blocks) {
    std::vector<SubOpId> previous;
    for (const Block& block : seq) {
      const auto& forward = stages[static_cast<std::size_t>(block.stage)][static_cast<std::size_t>(block.micro_batch)];
      std::vector<SubOpId> current = block_sub_ops(plan, forward, block.part);
      if (current.empty()) continue;  // a stage without backward parts has no backward blocks
      const auto context = [&] { return fmt::format("apply_schedule: stage {} block {}", block.stage, to_string(block)); };
      // strict: every sub-op of the block after the block before it, not only its first; order completion
      // would otherwise start the block's sub-ops that do not depend on its first inside the block before
      // (the next micro-batch's cross-attention keys and values of a T5 decoder inside the running forward).
      const std::span<const SubOpId> tied =
          schedule.block_order == BlockOrder::strict ? std::span<const SubOpId>(current)
                                                     : std::span<const SubOpId>(current).first(1);
      if (!previous.empty())
        for (SubOpId x : tied)
          if (x != previous.back()) LOOM_RETURN_IF_ERROR(with_context(order(plan, previous.back(), x), context()));
      if (block.part == BlockPart::weight)
        for (std::size_t k = 1; k < current.size(); ++k)
          LOOM_RETURN_IF_ERROR(with_context(order(plan, current[k - 1], current[k]), context()));
      previous = std::move(current);
    }
  }
  return blocks;
}

}  // namespace loom::plan
