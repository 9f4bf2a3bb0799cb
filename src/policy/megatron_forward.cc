// The Composer's forward ops (megatron_composer.h): each is cut into micro-batches along its batch,
// split over dp along the batch and over tp by the tensor-parallel layout, and placed on its stage; the
// parts that carry the batch make up the pipeline's blocks.
#include <fmt/format.h>

#include <algorithm>

#include "loom/plan/batch.h"
#include "loom/plan/micro_batches.h"
#include "megatron_composer.h"

namespace loom::policy::detail {

using plan::SubOpId;
using plan::TransAlgo;

Expected<void> Composer::check_batch() const {
  // The layers at the lowest degree split each dp rank's batch tp / degree ways more (layer_tp).
  const int lowest = c_.layer_tp.empty() ? c_.tp : std::ranges::min(c_.layer_tp);
  const int parts = c_.dp * c_.micro_batches * (c_.tp / lowest);
  for (ir::TensorId in : graph_.inputs) {
    const ir::FullTensor& t = graph_.tensor(in);
    if (t.shape.rank() == 0 || t.shape[0] % parts == 0) continue;
    std::string reader;
    for (const ir::Op& op : graph_.ops)
      if (std::find(op.inputs.begin(), op.inputs.end(), in) != op.inputs.end()) {
        reader = fmt::format(", read by op '{}'", op.name);
        break;
      }
    return fail(fmt::format("batch {} of input '{}' {}{} is not divisible into dp {} x {} micro-batches{}", t.shape[0],
                            t.name, t.shape.to_string(), reader, c_.dp, c_.micro_batches,
                            lowest < c_.tp ? fmt::format(" x {} copies of the tp-{} layers", c_.tp / lowest, lowest)
                                           : std::string()),
                "choose dp x micro_batches dividing the batch, or build the model with another batch");
  }
  return {};
}

// Micro-batches run one after another, so no micro-batch may need another's values (plan::batch_coupling
// names the ops that would). A whole-batch reader runs once for every micro-batch, so each micro-batch's
// forward must come before any backward on its stage: true under GPipe, and under 1F1B while the
// micro-batches are no more than the stage's warm-up forwards (pp - stage); not in gradient accumulation
// (pp 1: each micro-batch's backward before the next's forward), where it would be a cycle. A batch sum
// read per sample refuses every micro-batching.
Expected<void> Composer::check_micro_batches_independent() const {
  const plan::BatchCoupling coupling = plan::batch_coupling(plan_, batch_, batch_dims_);
  const bool all_forwards_first = c_.pp > 1 && c_.schedule == plan::ScheduleKind::gpipe;
  for (const plan::BatchCoupling::WholeBatchReader& r : coupling.whole_batch_readers) {
    const ir::Op& op = graph_.op(r.op);
    const int warm_up = c_.pp > 1 && c_.schedule == plan::ScheduleKind::one_f_one_b && c_.virtual_stages == 1
                            ? c_.pp - stage_[op.id.index()]
                            : 1;
    if (all_forwards_first || c_.micro_batches <= warm_up) continue;
    return fail(fmt::format("{} micro-batches: op '{}' ({}) reads '{}', which carries the batch, but cannot split "
                            "it (its annotation {} freezes or merges the batch), so every micro-batch's forward "
                            "must run before any backward on its stage, which this schedule does not do",
                            c_.micro_batches, op.name, op.type, graph_.tensor(r.tensor).name,
                            ir::to_string(plan_.layouts[op.id.index()].annotation)),
                "use 1 micro-batch (data parallelism keeps the statistics whole), a pipeline with --schedule "
                "gpipe, or a per-sample normalization (layer or group norm)");
  }
  if (const auto& sum = coupling.batch_sum) {
    const ir::Op& summing = graph_.op(sum->sum);
    const ir::Op& reader = graph_.op(sum->reader);
    return fail(fmt::format("{} micro-batches: op '{}' ({}) sums over the whole batch and op '{}' ({}) applies the "
                            "result to every sample, so the micro-batches would need each other's values (whole-"
                            "batch statistics, e.g. batch norm in training mode)",
                            c_.micro_batches, summing.name, summing.type, reader.name, reader.type),
                "use 1 micro-batch (data parallelism keeps the statistics whole: they are all-reduced over the "
                "dp ranks), or a per-sample normalization (layer or group norm)");
  }
  return {};
}

Expected<std::vector<std::vector<SubOpId>>> Composer::micro_batches() {
  if (c_.micro_batches > 1) LOOM_RETURN_IF_ERROR(check_micro_batches_independent());
  std::vector<std::vector<SubOpId>> pieces(graph_.ops.size());
  std::vector<ir::OpId> batched;
  for (const ir::Op& op : graph_.ops) {
    if (op.pass != ir::Pass::forward) continue;
    pieces[op.id.index()] = {plan_.parts[op.id.index()].front()};
    if (batch_[op.id.index()]) batched.push_back(op.id);
  }
  if (c_.micro_batches == 1) return pieces;
  LOOM_ASSIGN_OR_RETURN(plan::MicroBatches mb, plan::split_micro_batches(plan_, batched, c_.micro_batches));
  for (std::size_t i = 0; i < mb.ops.size(); ++i) pieces[mb.ops[i].index()] = mb.parts[i];
  return pieces;
}

Expected<void> Composer::place_forward(const ir::Op& op, const std::vector<SubOpId>& pieces) {
  if (role(op) != SharedRole::none) return place_shared(op, pieces);
  const int stage = stage_[op.id.index()];
  const int virtual_stage = virtual_stage_[op.id.index()];
  const auto& batch = batch_[op.id.index()];
  const TransAlgo data = batch ? TransAlgo{plan::SplitAlgo{*batch}} : TransAlgo{plan::ReplicateAlgo{}};
  const auto& tensor_split = tp_layout_.splits[op.id.index()];
  // Ops tensor parallelism does not split run on every tp rank and, as in Megatron, compute whole
  // gradients there (one all-reduce of their output gradient, none of their weights' gradients).
  const TransAlgo tensor = tensor_split ? TransAlgo{*tensor_split}
                                        : TransAlgo{plan::ReplicateAlgo{.redundant_backward = true}};
  // At a layer degree t below tp (layer_tp), the batch splits dp x (tp / t) ways: replica e is data-parallel
  // copy e mod (tp / t) of dp rank e / (tp / t) (group_rank).
  const int degree = op_tp(op);
  const int replicas = c_.dp * (c_.tp / degree);
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> dp_parts,
                          with_context(split(plan_, pieces[k], data, replicas), fmt::format("data parallelism {}", replicas)));
    for (int e = 0; e < replicas; ++e) {
      LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> tp_parts,
                            with_context(split(plan_, dp_parts[static_cast<std::size_t>(e)], tensor, degree),
                                         fmt::format("tensor parallelism {}", degree)));
      for (int k_tp = 0; k_tp < degree; ++k_tp) {
        const auto [r, j] = group_rank(degree, e, k_tp);
        LOOM_ASSIGN_OR_RETURN(const std::vector<SubOpId> parts,
                              coshard(op, tp_parts[static_cast<std::size_t>(k_tp)], part_slot(k, r, j)));
        for (SubOpId part : parts) {
          LOOM_RETURN_IF_ERROR(plan::assign(plan_, part, device(stage, r, j)));
          if (batch) blocks_[block_slot(virtual_stage, r, j)][k].push_back(part);
        }
      }
    }
  }
  return {};
}

}  // namespace loom::policy::detail
