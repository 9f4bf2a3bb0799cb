// ZeRO (Rajbhandari et al. 2020) over the data-parallel ranks, with the primitives and residences alone:
// each optimizer step is split dp ways along a dimension of its parameter, so every rank updates a shard
// and holds that shard's optimizer states, and the collectives come from materialization:
//   stage 1  optimizer states sharded. The gradient is reduce-scattered to the shards when the steps
//            read it, so each device keeps its full (unreduced) gradient buffer until then, as DeepSpeed's
//            stage 1 keeps its full gradient partition; the updated parameters are all-gathered at the
//            step's end (step closing: parameters stay resident whole on every rank).
//   stage 2  also the gradients: each final gradient resides in its optimizer shards, so it is
//            reduce-scattered as soon as the backward pass completes it and the full buffer is freed;
//            with micro-batches, each micro-batch's partial gradient as soon as every dp rank has
//            written it, summed on the shards (DeepSpeed's gradient accumulation: no rank ever holds a
//            whole gradient across micro-batches).
//   stage 3  also the parameters: they reside in their optimizer shards, so every op reading a parameter
//            gets it all-gathered for it (forward and backward separately) and frees it after; the step
//            ends with each rank's shard, nothing to gather.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/plan/plan.h"
#include "loom/plan/primitives.h"
#include "loom/policy/policy.h"

namespace loom::policy {

// A split of a part on its own device: `parts` ways by `algo` (1: none).
struct LocalSplit {
  plan::TransAlgo algo = plan::ReplicateAlgo{};
  int parts = 1;
};

// Places one optimizer step (a fresh, unsplit sub-op) for ZeRO stage `config.zero` (1 to 3): split over
// tp by `tensor` (the parameter's tensor-parallel split, or a replication), then each tp part dp ways along
// the first dimension of its shard that dp divides (replicated over dp when none does: zero_notes names
// those), part (r, j) placed on device(r, j), r in node-major order where config.zero_node_ranks says; sets the residences of its gradient (stage >= 2) and its
// parameter (stage 3). Errors: a stage outside 1..3, and what trans or assign report.
// `local`: a further split of each tp part on its device before the dp split (coshard's parameter slices,
// policy/coshard.h), so each slice is sharded over dp on its own.
Expected<void> place_zero_step(plan::Plan& plan, plan::SubOpId step, const plan::TransAlgo& tensor,
                               const ParallelConfig& config, const std::function<int(int dp_rank, int tp_rank)>& device,
                               const LocalSplit& local = {});

// One line per optimizer step that ZeRO left replicated over dp, in program order, e.g.
// "'ln_f.bias' [6]: no dimension divisible by dp 4; its optimizer states stay replicated". Empty when
// config.zero is 0 or dp is 1.
std::vector<std::string> zero_notes(const plan::Plan& plan, const ParallelConfig& config);

}  // namespace loom::policy
