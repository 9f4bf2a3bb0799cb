// The baselines of the papers' evaluations (nnScaler §6, Rhino §7): the best plan each system's own space
// holds, found by grid search as its authors tune it, each candidate planned and simulated by Loom.
//   megatron-best   Megatron-LM: tp in {1, 2, 4, 8} inside a node, pp over whole layers, dp the rest;
//                   micro-batch size 1-8; 1F1B, interleaved with 2 chunks where the layers allow;
//                   sequence parallelism with tp where the model takes it (not Swin's images);
//                   recomputation off, else selective, else full (as Megatron users turn it on only
//                   when memory demands).
//   deepspeed-best  DeepSpeed ZeRO data parallelism over every GPU: ZeRO stage 1-3, micro-batch size
//                   1-8 (gradient accumulation for the rest of the global batch), recomputation off or full.
// The fastest candidate that fits in memory wins (ties: the first in enumeration order); when none fits,
// the one with the smallest peak memory, reported as OOM.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/api/job.h"

namespace loom::api {

bool is_baseline(std::string_view policy);  // "megatron-best", "deepspeed-best"

struct BaselineCandidate {
  std::string policy;  // the built-in policy the candidate applies ("megatron", "zero")
  policy::ParallelConfig config;
};

// The candidates of a job loaded with a baseline as its policy (load_job), in enumeration order: its
// cluster, its GPU count (the resolved --gpus) and its model's global batch and layers.
// Errors: a job whose policy is not a baseline, a GPU count with no candidate.
Expected<std::vector<BaselineCandidate>> baseline_candidates(const Job& loaded);

struct SearchSummary {
  std::string baseline;
  int candidates = 0;  // enumerated
  int evaluated = 0;   // planned and simulated (recomputation variants skipped once one fits)
  int failed = 0;      // candidates the policy could not apply (indivisible shapes)
};

struct BaselineResult {
  std::unique_ptr<Job> best;  // its description names the baseline and the configuration it chose
  SearchSummary summary;
};

// Plans every candidate of `options.policy` (a baseline) and keeps the best.
Expected<BaselineResult> best_baseline(const JobOptions& options);

// The job of a built-in policy (plan_job), or of a baseline's search, whose summary `search` receives.
Expected<std::unique_ptr<Job>> plan_or_search(const JobOptions& options, std::optional<SearchSummary>* search = nullptr);

}  // namespace loom::api
