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

// forward_op_seconds, and from the same materialized plan what device 0 holds for each forward op
// (policy::OpBytes, by OpId; 0 for the other ops), by the memory model's accounting (cost/memory_model.h):
//  - held: the activation and input buffers written during the first micro-batch's forward (its
//    instructions before the first backward compute or recomputation) and still live when it ends, each
//    by the forward op producing its tensor; with recomputation these are the checkpoints (a layer's
//    input, what arrived by communication), without it every activation a backward reads;
//  - state: the parameter, gradient and optimizer-state buffers live where their total is largest, each
//    by its parameter's first forward reader (a gradient's or optimizer state's owner, an updated
//    version's original);
//  - device: the job's GPU memory.
struct ForwardOpCosts {
  std::vector<double> seconds;
  policy::OpBytes bytes;
};
Expected<ForwardOpCosts> forward_op_costs(const Job& job, const policy::ParallelConfig& config);

// forward_op_costs' bytes of device 0's program of a materialized `exec` (`device_bytes`: its memory).
policy::OpBytes op_bytes(const exec::ExecPlan& exec, std::int64_t device_bytes);

// Whether the job's policy stages a pipeline that forward_op_seconds can balance: pp > 1 without
// interleaving (interleaved chunks take Megatron-LM's equal layer counts), not 3F1B.
bool balances_stages(const policy::ParallelConfig& config);

}  // namespace loom::api
