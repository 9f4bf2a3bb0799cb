// The baselines of the papers' evaluations (nnScaler §6, Rhino §7): the best plan each system's own space
// holds, found by grid search as its authors tune it, each candidate planned and simulated by Loom.
//   megatron-best   Megatron-LM: tp in {1, 2, 4, 8} inside a node, pp over whole layers, dp the rest;
//                   micro-batch size 1-8; 1F1B, interleaved with 2 chunks where the layers allow;
//                   sequence parallelism with tp; recomputation off, else selective, else full (as
//                   Megatron users turn it on only when memory demands).
//   deepspeed-best  DeepSpeed ZeRO data parallelism over every GPU: ZeRO stage 1-3, micro-batch size
//                   1-8 (gradient accumulation for the rest of the global batch), recomputation off or full.
// The fastest candidate that fits in memory wins (ties: the first in enumeration order); when none fits,
// the one with the smallest peak memory, reported as OOM.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/api/plan_job.h"

namespace loom::api {

bool is_baseline(const std::string& policy);  // "megatron-best", "deepspeed-best"

struct BaselineCandidate {
  std::string policy;  // the built-in policy the candidate applies ("megatron", "zero")
  policy::ParallelConfig config;
};

// The candidates of `baseline` for the request's model, cluster and global batch, in enumeration order.
// Errors: an unknown baseline, a GPU count (request.gpus, else the cluster's) with no candidate.
Expected<std::vector<BaselineCandidate>> baseline_candidates(const PlanRequest& request, const std::string& baseline);

struct BaselineResult {
  std::unique_ptr<PlanResult> best;
  int candidates = 0;  // enumerated
  int evaluated = 0;   // planned and simulated (recomputation variants skipped once one fits)
  int failed = 0;      // candidates the policy could not apply (indivisible shapes)
};

// Plans every candidate (plan_model) and keeps the best. The best result's description names the
// baseline and the configuration it chose.
Expected<BaselineResult> best_baseline(const PlanRequest& request, const std::string& baseline);

}  // namespace loom::api
