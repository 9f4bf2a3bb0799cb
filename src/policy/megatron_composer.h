// Private to megatron (policy.h). The Composer builds Megatron-LM's dp x tp x pp plan on a fresh,
// checked plan:
//   megatron_composer.cc   what it derives from the graph (stages, batch dimensions), and the order of work;
//   megatron_forward.cc    forward ops cut into micro-batches, split over dp and tp and placed;
//   megatron_followers.cc  the ops no forward op carries along (optimizer steps, accumulations), placed
//                          with the tensor they own;
//   megatron_schedule.cc   each pipeline's schedule, and gradient accumulations ordered into it;
//   megatron_coshard.cc    coshard's chains (policy/coshard.h) ordered one after another and recomputed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/error.h"
#include "loom/plan/primitives.h"
#include "loom/plan/schedule.h"
#include "loom/policy/coshard.h"
#include "loom/policy/interlaced.h"
#include "loom/policy/policy.h"
#include "loom/policy/tensor_parallel.h"
#include "loom/policy/zero.h"

namespace loom::policy::detail {

// trans, or the piece itself when n is 1 (a one-part split would only rename it).
Expected<std::vector<plan::SubOpId>> split(plan::Plan& plan, plan::SubOpId piece, const plan::TransAlgo& algo, int n);

// The schedule template of a pipeline: interleaved 1F1B whenever a device holds several model chunks
// the schedule does not place itself.
inline plan::ScheduleKind schedule_kind(const ParallelConfig& config) {
  if (plan::places_chunks(config.schedule)) return config.schedule;
  return config.virtual_stages > 1 ? plan::ScheduleKind::interleaved_one_f_one_b : config.schedule;
}

class Composer {
 public:
  Composer(plan::Plan& plan, const ParallelConfig& config, TensorParallelLayout tensor_parallel, std::vector<int> stages,
           CoshardPlan coshard = {}, std::optional<InterlacedLayout> interlaced = {});

  Expected<void> run();
  // After run(), the interlaced order chosen ("interlaced order: H in groups of 4, ..."); empty otherwise.
  const std::string& interlaced_order() const { return interlaced_order_; }

 private:
  int device(int stage, int r, int j) const { return device_of(c_, stage, r, j); }
  // Per-layer degrees (ParallelConfig::layer_tp): an op at degree t splits its batch dp x (tp / t) ways
  // (replica e) and then t ways (rank k); replica e, rank k is dp rank e / (tp / t) and tp rank
  // (e mod (tp / t)) x t + k, so a copy's t ranks are neighbours (one NVLink pair at t = 2).
  struct GroupRank {
    int r = 0;
    int j = 0;
  };
  GroupRank group_rank(int degree, int e, int k) const {
    const int copies = c_.tp / degree;
    return {e / copies, (e % copies) * degree + k};
  }
  // The degree of a forward op (its layer's; tp outside the layers), and of a tensor's owner op.
  int op_tp(const ir::Op& op) const { return op_tp_[op.id.index()]; }
  int tensor_tp(ir::TensorId t) const { return t.valid() ? tensor_tp_[t.index()] : c_.tp; }
  // The stage of a tensor: a parameter's is its first forward reader's, an activation's its producer's.
  int stage_of(ir::TensorId t) const { return t.valid() ? tensor_stage_[t.index()] : 0; }
  std::size_t block_slot(int virtual_stage, int r, int j) const {
    return static_cast<std::size_t>((virtual_stage * c_.dp + r) * c_.tp + j);
  }
  // Micro-batch k, dp rank r, tp rank j: which tp part of a forward op.
  std::size_t part_slot(std::size_t k, int r, int j) const {
    return (k * static_cast<std::size_t>(c_.dp) + static_cast<std::size_t>(r)) * static_cast<std::size_t>(c_.tp) +
           static_cast<std::size_t>(j);
  }

  // megatron_forward.cc

  // The batch (dimension 0 of every input) must split into dp x micro_batches equal parts.
  Expected<void> check_batch() const;
  // Per forward op, its micro-batch pieces (one piece for ops without a batch, or a single micro-batch).
  Expected<std::vector<std::vector<plan::SubOpId>>> micro_batches();
  // No micro-batch needs another's values (whole-batch statistics refuse micro-batching).
  Expected<void> check_micro_batches_independent() const;
  Expected<void> place_forward(const ir::Op& op, const std::vector<plan::SubOpId>& pieces);

  // megatron_followers.cc

  Expected<void> place_follower(const ir::Op& op);
  // The value count every producer part of every input of `op` writes it with (0 when they differ, or
  // an input is not produced).
  std::int64_t partial_sums_of(const ir::Op& op) const;
  // How a follower splits over tp.
  plan::TransAlgo tensor_algo(const ir::Op& op, const std::optional<std::string>& tensor, int ways) const;
  // Whether some producer part writes an input of `op` as a value part (a partial sum).
  bool reads_partial_sums(const ir::Op& op) const;

  // megatron_schedule.cc

  // By device, (stage, micro-batch) of a backward block -> the last sub-op of the block before it.
  using BlockStarts = std::vector<std::map<std::pair<int, int>, plan::SubOpId>>;
  // One pipeline per (dp rank, tp rank): its stages' forward parts per micro-batch, ordered by the
  // schedule template.
  Expected<void> schedule();
  Expected<void> order_gradient_accumulations(const BlockStarts& starts);

  // megatron_interlaced.cc

  SharedRole role(const ir::Op& op) const {
    return interlaced_ ? interlaced_->roles[op.id.index()] : SharedRole::none;
  }
  bool shared(ir::TensorId t) const { return interlaced_ && t.valid() && interlaced_->shared_tensors[t.index()]; }
  // Shared part i of dp rank r (of pp x tp): device(i / tp, r, i mod tp), so stage s holds parts s tp ...
  int shared_device(int r, int i) const { return device(i / c_.tp, r, i % c_.tp); }
  // A shared op (role() not none): each micro-batch piece split over dp, then over all pp x tp devices of
  // the replica along its vocabulary (or replicated with whole backward), one part per device.
  Expected<void> place_shared(const ir::Op& op, const std::vector<plan::SubOpId>& pieces);
  // Every (dp rank, tp rank) pipeline ordered by the interlaced template (plan/interlaced_schedule.h).
  Expected<void> schedule_interlaced();
  // By device, each shared block's (last sub-op of the device's block before it, the block's sub-ops):
  // every sub-op ordered after every other device's block before (a barrier of the replica).
  Expected<void> order_shared_barriers(
      const std::vector<std::vector<std::pair<plan::SubOpId, std::vector<plan::SubOpId>>>>& shared_blocks);

  // megatron_coshard.cc

  // A tp part of a cosharded op split coshard parts ways more along its region's identifier (recorded
  // as the op's chain parts); other parts returned as they are.
  Expected<std::vector<plan::SubOpId>> coshard(const ir::Op& op, plan::SubOpId tp_part, std::size_t slot);
  // Each region's chains run one after another (forward in order, backward in reverse), recomputed.
  Expected<void> order_coshard_chains();
  // How a follower owned by `owner` splits on each device after tp: along the dimension the cosharded
  // ops split the tensor (`identifier_at` names a dimension of the follower's first output), else one part.
  template <class IdentifierAt>
  LocalSplit coshard_follower(ir::TensorId owner, const IdentifierAt& identifier_at) const {
    if (!owner.valid() || coshard_.tensor_dims[owner.index()] < 0) return {};
    const std::optional<std::string> x = identifier_at(coshard_.tensor_dims[owner.index()]);
    if (!x) return {};
    return {.algo = plan::SplitAlgo{*x}, .parts = coshard_.parts};
  }

  plan::Plan& plan_;
  const ir::Graph& graph_;
  const ParallelConfig& c_;
  TensorParallelLayout tp_layout_;
  std::vector<int> virtual_stage_;  // by OpId, forward ops: the stage in program order (chunk * pp + rank)
  std::vector<int> stage_;         // by OpId, forward ops: the pipeline rank
  std::vector<int> tensor_stage_;  // by TensorId
  std::vector<int> op_tp_;         // by OpId, forward ops: the tensor-parallel degree (layer_tp)
  std::vector<int> tensor_tp_;     // by TensorId: its first forward reader's or writer's degree
  std::vector<std::optional<std::string>> batch_;
  std::vector<int> batch_dims_;
  std::vector<ir::OpId> producers_;  // by TensorId: the op writing it
  // [block_slot(virtual stage, dp rank, tp rank)][micro-batch]: forward parts, program order.
  std::vector<std::vector<std::vector<plan::SubOpId>>> blocks_;
  CoshardPlan coshard_;
  // By OpId, cosharded ops: [part_slot(micro-batch, dp rank, tp rank)][chain]: its parts.
  std::vector<std::vector<std::vector<plan::SubOpId>>> chains_;
  std::optional<InterlacedLayout> interlaced_;
  // [device][micro-batch]: the forward parts of the shared lookups and of the head (with the loss), in
  // program order.
  std::vector<std::vector<std::vector<plan::SubOpId>>> lookup_parts_, head_parts_;
  std::string interlaced_order_;
};

}  // namespace loom::policy::detail
