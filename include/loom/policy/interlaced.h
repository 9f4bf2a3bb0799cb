// nnScaler's interlaced pipeline (Lin et al. 2024, §4.2 "Constraints for T5", Table 6; §7, Fig. 6), for
// models whose token embedding table E is large and tied to the LM head (T5, mBART):
//  - every lookup of E and the head (with the loss after it) are split vocabulary-parallel over all
//    pp x tp devices of a data-parallel replica, one part per device (op-trans into n = |D| / dp parts,
//    op-assign one per device), as tensor parallelism splits them over tp (policy/tensor_parallel.h);
//  - the other ops are staged over pp stages, each tensor-parallel tp ways (megatron);
//  - the order interleaves each micro-batch's embedding forward, head forward and backward, and
//    embedding backward, which every device runs, with the stages' 1F1B blocks
//    (plan/interlaced_schedule.h).
// The policy 'interlaced' is megatron with ParallelConfig::interlaced set; its Composer places and orders
// the shared ops as this layout says. The order is searched (plan::search_interlaced) on per-stage costs
// summed from ParallelConfig::op_seconds, and each stage's held micro-batches are capped by memory from
// ParallelConfig::op_bytes (held_caps in src/policy/megatron_interlaced.cc): the headroom, 0.9 of the
// device less the stage's state and its 1/pp of the shared ops' state and lookups, over the bytes one
// micro-batch holds on the stage; at least 1F1B's S - s, at most the micro-batch count.
#pragma once

#include <optional>
#include <vector>

#include "loom/core/error.h"
#include "loom/plan/plan.h"
#include "loom/plan/primitives.h"

namespace loom::policy {

struct ParallelConfig;

enum class SharedRole : std::uint8_t {
  none,       // staged
  embedding,  // a lookup of the table
  head,       // the head reading the table, or an op after it (the loss)
};

struct InterlacedLayout {
  ir::TensorId table;           // the embedding table the head is tied to
  std::vector<SharedRole> roles;  // by OpId (forward ops)
  // By OpId, shared ops: the vocabulary split (nullopt: replicated on every device, e.g. the loss's mean).
  std::vector<std::optional<plan::SplitAlgo>> splits;
  // By TensorId: whether the tensor belongs to the shared ops (the table, the head's and loss's outputs),
  // so the ops that follow it (optimizer step, gradient accumulations, the loss-gradient seed) are spread
  // too, split along tensor_dims (-1: replicated).
  std::vector<bool> shared_tensors;
  std::vector<int> tensor_dims;
};

// The shared ops of `plan`'s graph for `parts` devices per replica. The table is the largest parameter
// an 'embedding' op reads that a 'linear' / 'matmul' (the head) also reads. Errors: no 'embedding' op
// reading a parameter, no head reading the table (naming the table), and `parts` not dividing its rows.
Expected<InterlacedLayout> interlaced_layout(const plan::Plan& plan, int parts);

// The options the interlaced plan refuses: interleaved or zero-bubble schedules (1F1B only), ZeRO,
// coshard, sequence parallelism, Oases overlap.
Expected<void> check_interlaced(const ParallelConfig& config);

}  // namespace loom::policy
