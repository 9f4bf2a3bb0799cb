// Oases' overlapped tensor parallelism (Li et al., "Oases", §IV and Algorithm 1) on Megatron's plans:
// each device runs its batch as two sub-batches, ordered so that one sub-batch's tensor-parallel
// collective can run while the other computes, in the forward and in the backward.
//
//  - The sub-batches: megatron() with twice the micro-batches, so micro-batches 2k and 2k + 1 are the
//    two sub-batches of micro-batch k (the batch split along its identifier, plan::split_micro_batches,
//    before tensor parallelism replicates anything: a replica whose backward computes whole weight
//    gradients cannot be split along the batch afterwards, trans refuses to divide their values). As in
//    Algorithm 1's Split(O), every op that sees the batch is split, the tensor-parallel blocks with the
//    replicated ops between them.
//  - The order (Algorithm 1, lines 5-13), per device and micro-batch: the ops that see the batch, in
//    program order, cut into segments after each communication point, an op whose output holds partial
//    sums for a collective to add (row-parallel linears, vocabulary-parallel embeddings and loss parts);
//    the segments run as seg 0 of sub-batch 0, seg 0 of sub-batch 1, seg 1 of sub-batch 0, ..., chained
//    by order edges, so the collective after sub-batch 0's segment k runs beside sub-batch 1's segment
//    k, and sub-batch 1's beside sub-batch 0's segment k + 1. The backward parts likewise, in reverse
//    program order, their communication points the parts writing partial sums of activation gradients
//    (the column-parallel linears' input gradients).
//  - The schedule: each chain is one block of the schedule template over the m pairs (plan/schedule.h),
//    chained in the template's order on its device: with pp 1, 1F1B on one device (micro-batch k's
//    backward before micro-batch k + 1's forward, as Megatron's accumulation runs them); with pp > 1,
//    the job's 1F1B or GPipe. These edges replace the order edges megatron() gives the 2m sub-batches.
// The collectives become asynchronous in the ExecPlan (exec/passes.h, overlap_collectives).
#pragma once

#include <cstdint>
#include <string_view>

#include "loom/core/error.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan.h"

namespace loom::policy {

struct ParallelConfig;  // policy.h

enum class Overlap : std::uint8_t { none, oases };
std::string_view name(Overlap overlap);  // "none", "oases"
Expected<Overlap> parse_overlap(std::string_view text);

// megatron() with Oases' sub-batches and order on a fresh plan. Errors: tp 1, a pipeline schedule other
// than 1F1B or GPipe or with interleaved chunks, a batch per device and micro-batch that 2 does not
// divide (naming the op that reads it and the sizes), and whatever megatron() reports.
Expected<void> oases_megatron(plan::Plan& plan, const ParallelConfig& config,
                              const ir::OpCatalog& catalog = ops::builtin_ops());

}  // namespace loom::policy
