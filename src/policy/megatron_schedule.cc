// The Composer's schedule (megatron_composer.h): each (dp rank, tp rank) pipeline's blocks ordered by
// the schedule template, and the gradient accumulations ordered into their backward blocks.
#include <fmt/format.h>

#include "megatron_composer.h"

namespace loom::policy::detail {

using plan::SubOpId;

// One pipeline per (dp rank, tp rank): its stages' forward parts per micro-batch (pp x
// virtual_stages stages, chunk c of rank s being stage c * pp + s), ordered by the schedule template.
Expected<void> Composer::schedule() {
  // One stage with micro-batches accumulates gradients: its template (1F1B: F0 B0 F1 B1 ...) keeps one
  // micro-batch's activations alive at a time, as gradient accumulation does.
  if (interlaced_) return schedule_interlaced();
  if (c_.pp == 1 && c_.micro_batches == 1) return {};
  const plan::Schedule schedule{.kind = schedule_kind(c_), .chunks = c_.virtual_stages, .block_order = c_.block_order};
  BlockStarts starts(static_cast<std::size_t>(device_count(c_)));
  for (int r = 0; r < c_.dp; ++r)
    for (int j = 0; j < c_.tp; ++j) {
      std::vector<std::vector<std::vector<SubOpId>>> stages;
      for (int s = 0; s < c_.pp * c_.virtual_stages; ++s) stages.push_back(blocks_[block_slot(s, r, j)]);
      LOOM_ASSIGN_OR_RETURN(const std::vector<std::vector<plan::Block>> sequences,
                            with_context(plan::apply_schedule(plan_, schedule, stages),
                                         fmt::format("pipeline of dp rank {}, tp rank {}", r, j)));
      // Where each backward block starts: after the last sub-op of the block before it.
      for (int s = 0; s < c_.pp; ++s) {
        SubOpId previous;
        for (const plan::Block& b : sequences[static_cast<std::size_t>(s)]) {
          const auto& forward = stages[static_cast<std::size_t>(b.stage)][static_cast<std::size_t>(b.micro_batch)];
          const std::vector<SubOpId> sub_ops = plan::block_sub_ops(plan_, forward, b.part);
          if (sub_ops.empty()) continue;
          if (b.part == plan::BlockPart::backward && previous.valid())
            starts[static_cast<std::size_t>(device(s, r, j))][{b.stage, b.micro_batch}] = previous;
          previous = sub_ops.back();
        }
      }
    }
  return order_gradient_accumulations(starts);
}

// The accumulation of an activation's gradient over its readers (a follower, per micro-batch) runs in
// the backward block of the activation's producer, which reads it: it is ordered after the block
// before, so that order completion cannot hoist the accumulation of a later micro-batch, which waits
// for that micro-batch's gradients, ahead of earlier blocks on the device (a stall the schedule
// template does not have).
Expected<void> Composer::order_gradient_accumulations(const BlockStarts& starts) {
  std::vector<int> producer_stage(graph_.tensors.size(), -1);
  for (const ir::Op& op : graph_.ops)
    if (op.pass == ir::Pass::forward && batch_[op.id.index()] && role(op) == SharedRole::none)
      for (ir::TensorId t : op.outputs) producer_stage[t.index()] = virtual_stage_[op.id.index()];
  for (const ir::Op& op : graph_.ops) {
    if (op.pass != ir::Pass::backward || op.is_mirror() || op.outputs.empty()) continue;
    const ir::TensorId owner = graph_.tensor(op.outputs.front()).owner;
    if (!owner.valid() || producer_stage[owner.index()] < 0 || batch_dims_[owner.index()] < 0) continue;
    const auto dim = static_cast<std::size_t>(batch_dims_[owner.index()]);
    const std::int64_t per_micro_batch = graph_.tensor(owner).shape[dim] / c_.micro_batches;
    for (SubOpId part : plan_.parts[op.id.index()]) {
      const plan::SubOp& sub = plan_.sub_op(part);
      const auto micro_batch = static_cast<int>(sub.outputs.front().box[dim].start / per_micro_batch);
      const auto& device_starts = starts[static_cast<std::size_t>(sub.device)];
      if (const auto it = device_starts.find({producer_stage[owner.index()], micro_batch}); it != device_starts.end())
        LOOM_RETURN_IF_ERROR(with_context(plan::order(plan_, it->second, part), "ordering gradient accumulations"));
    }
  }
  return {};
}

}  // namespace loom::policy::detail
