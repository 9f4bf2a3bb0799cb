// The Composer's followers (megatron_composer.h): the ops outside the forward pass that no forward op
// carries along, each placed with the tensor it owns.
#include <fmt/format.h>

#include <algorithm>

#include "loom/policy/zero.h"
#include "megatron_composer.h"

namespace loom::policy::detail {

using plan::SubOpId;
using plan::TransAlgo;

// An op outside the forward pass that no forward op carries along: an optimizer step (owner: its
// parameter), a gradient accumulation or the loss-gradient seed (owner: the tensor whose gradient it
// writes). It runs on the owner's stage, in micro-batch and data-parallel pieces along the owner's
// batch dimension (replicated over dp when it has none), then split over tp along the owner's
// tensor-parallel dimension (replicated when it has none). An accumulation of a parameter's partial
// sums from every micro-batch and dp rank is split by value over dp alone instead (then over tp), so
// each device adds its own partial sums and one reduction per step follows. With ZeRO, optimizer steps
// are placed by place_zero_step (policy/zero.h).
Expected<void> Composer::place_follower(const ir::Op& op) {
  const ir::TensorId owner = op.pass == ir::Pass::optimizer ? op.inputs.front()
                             : op.outputs.empty()           ? ir::TensorId{}
                                                            : graph_.tensor(op.outputs.front()).owner;
  const int stage = stage_of(owner);
  const SubOpId whole = plan_.parts[op.id.index()].front();
  const auto identifier_at = [&](int dim) -> std::optional<std::string> {
    if (dim < 0) return std::nullopt;
    return plan::dim_identifier(plan_, whole, true, 0, static_cast<std::size_t>(dim));
  };
  const bool is_parameter = owner.valid() && graph_.tensor(owner).role == ir::TensorRole::parameter;
  const std::optional<std::string> batch = is_parameter || !owner.valid() ? std::nullopt
                                                                           : identifier_at(batch_dims_[owner.index()]);
  // The shared ops' tensors (policy/interlaced.h) are split over all pp x tp devices of the replica.
  const bool spread = shared(owner);
  // The owner's layer degree t (layer_tp): dp x (tp / t) data-parallel replicas of t ranks each.
  const int degree = tensor_tp(owner);
  const int replicas = c_.dp * (c_.tp / degree);
  const int ways = spread ? c_.tp * c_.pp : degree;
  const std::optional<std::string> tensor =
      owner.valid() ? identifier_at((spread ? interlaced_->tensor_dims : tp_layout_.tensor_dims)[owner.index()])
                    : std::nullopt;
  const auto algo = [](const std::optional<std::string>& x) {
    return x ? TransAlgo{plan::SplitAlgo{*x}} : TransAlgo{plan::ReplicateAlgo{}};
  };
  const std::string context = fmt::format("placing '{}'", op.name);
  const LocalSplit local = coshard_follower(owner, identifier_at);
  if (op.pass == ir::Pass::optimizer && c_.zero > 0)
    return with_context(place_zero_step(plan_, whole, tensor_algo(op, tensor, c_.tp), c_,
                                        [&](int r, int j) { return device(stage, r, j); }, local),
                        context);
  // Partial sums of every micro-batch and dp rank: value parts k x dp + r of micro_batches x dp.
  const std::int64_t sums = std::int64_t{c_.micro_batches} * replicas;
  // Split over dp, not per micro-batch: rank r's accumulation reads part r of dp of each input (its tp
  // rank's rows of it), which every device holding that input's partial sums adds up over its
  // micro-batches as they come (exec/gradient_accumulation.h) and cuts to the rows read (local_sums.h),
  // and a tied embedding's head gradient crosses the pipeline once. Split per micro-batch, a part of
  // micro-batch k can read only once every micro-batch's partial sum exists (a value part names a share
  // of the whole sum, not one micro-batch's term), so all m stay alive until the step's last backward
  // and the head's sum crosses the pipeline m times.
  const bool accumulate = !batch && sums > 1 && plan_.layouts[op.id.index()].linear && partial_sums_of(op) == sums;
  const TransAlgo data = accumulate ? TransAlgo{plan::ValueSplitAlgo{}} : algo(batch);
  const TransAlgo tensor_split = accumulate ? algo(tensor) : tensor_algo(op, tensor, ways);
  std::vector<SubOpId> pieces{whole};
  if (batch && c_.micro_batches > 1) {
    LOOM_ASSIGN_OR_RETURN(pieces, with_context(split(plan_, whole, data, c_.micro_batches), context));
  }
  for (SubOpId piece : pieces) {
    LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> dp_parts, with_context(split(plan_, piece, data, replicas), context));
    for (int e = 0; e < replicas; ++e) {
      LOOM_ASSIGN_OR_RETURN(
          std::vector<SubOpId> tp_parts,
          with_context(split(plan_, dp_parts[static_cast<std::size_t>(e)], tensor_split, ways), context));
      for (int k = 0; k < ways; ++k) {
        LOOM_ASSIGN_OR_RETURN(const std::vector<SubOpId> parts,
                              with_context(split(plan_, tp_parts[static_cast<std::size_t>(k)], local.algo, local.parts),
                                           context));
        const auto [r, j] = spread ? GroupRank{e, k} : group_rank(degree, e, k);
        for (SubOpId part : parts)
          LOOM_RETURN_IF_ERROR(plan::assign(plan_, part, spread ? shared_device(r, j) : device(stage, r, j)));
      }
    }
  }
  return {};
}

// The value count every producer part of every input of `op` writes it with (0 when they differ, or
// an input is not produced).
std::int64_t Composer::partial_sums_of(const ir::Op& op) const {
  std::int64_t count = -1;
  for (ir::TensorId in : op.inputs) {
    const ir::OpId producer = producers_[in.index()];
    if (!producer.valid()) return 0;
    for (SubOpId part : plan_.parts[producer.index()]) {
      const plan::SubOp& sub = plan_.sub_op(part);
      const auto& outputs = graph_.op(sub.op).outputs;
      for (std::size_t j = 0; j < outputs.size(); ++j)
        if (outputs[j] == in) {
          if (count >= 0 && sub.outputs[j].value.count != count) return 0;
          count = sub.outputs[j].value.count;
        }
    }
  }
  return std::max<std::int64_t>(count, 0);
}

// How a follower splits over tp: along the owner's tensor-parallel dimension; else a gradient
// accumulation that sums partial sums of column-parallel backwards (LLaMA's q, k, v and gate, up
// projections) is split by value, so each rank adds its partial sums and one all-reduce follows
// (Megatron fuses those projections into one GEMM for the same effect); else replicated.
TransAlgo Composer::tensor_algo(const ir::Op& op, const std::optional<std::string>& tensor, int ways) const {
  if (tensor) return plan::SplitAlgo{*tensor};
  if (ways > 1 && plan_.layouts[op.id.index()].linear && reads_partial_sums(op)) return plan::ValueSplitAlgo{};
  return plan::ReplicateAlgo{};
}

// Whether some producer part writes an input of `op` as a value part (a partial sum).
bool Composer::reads_partial_sums(const ir::Op& op) const {
  for (ir::TensorId in : op.inputs) {
    const ir::OpId producer = producers_[in.index()];
    if (!producer.valid()) continue;
    for (SubOpId part : plan_.parts[producer.index()]) {
      const plan::SubOp& sub = plan_.sub_op(part);
      const auto& outputs = graph_.op(sub.op).outputs;
      for (std::size_t j = 0; j < outputs.size(); ++j)
        if (outputs[j] == in && !sub.outputs[j].value.is_whole()) return true;
    }
  }
  return false;
}

}  // namespace loom::policy::detail
