// What a pipeline's stages are balanced by (policy::ParallelConfig::op_seconds): each forward op's
// predicted compute time on the job's GPU, so memory-bound layers (Swin's high-resolution blocks) weigh
// what they take, not what their FLOPs say.
#pragma once

#include <vector>

#include "loom/api/job.h"
#include "loom/core/error.h"
#include "loom/policy/policy.h"

namespace loom::api {

// By OpId of the job's graph: the seconds one device spends on each forward op in a plan of the job's
// policy with `config`'s tp degree, sequence parallelism, coshard and recompute, but dp and pp 1 and the
// batch in micro-batches of the step's size (every device then holds one tp part of every op and runs
// every micro-batch), materialized: device 0's computes of the op's parts, its backward's and its
// recomputation, and the local adds, slices and scales of the tensors they write (coshard's partial sums),
// priced as the simulator prices them (the compute model, the profile database). 0 for the other ops.
// Errors: what the policy, materialization or the cost models report for that plan.
Expected<std::vector<double>> forward_op_seconds(const Job& job, const policy::ParallelConfig& config);

// Whether the job's policy stages a pipeline that forward_op_seconds can balance: pp > 1 without
// interleaving (interleaved chunks take Megatron-LM's equal layer counts), not 3F1B.
bool balances_stages(const policy::ParallelConfig& config);

}  // namespace loom::api
