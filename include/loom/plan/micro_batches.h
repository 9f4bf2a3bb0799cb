// Micro-batching (DESIGN.md, "Primitives"): trans of a whole (sub)graph along its batch identifier,
// built from trans alone. Each forward op's part k computes micro-batch k; its backward part (.mirror)
// follows, and the weight gradients come out as value parts k of n that the optimizer sums.
#pragma once

#include <span>
#include <vector>

#include "loom/plan/plan.h"

namespace loom::plan {

struct MicroBatches {
  int count = 0;
  std::vector<ir::OpId> ops;                 // the forward ops split, as given
  std::vector<std::vector<SubOpId>> parts;   // parts[i][k]: micro-batch k of ops[i]

  // The forward sub-op of `op` for micro-batch k; invalid when `op` was not split or k is out of range.
  SubOpId forward(ir::OpId op, int k) const;
  // The forward sub-ops of micro-batch k for `ops` (in that order), skipping ops not split.
  std::vector<SubOpId> micro_batch(std::span<const ir::OpId> ops, int k) const;
};

// Splits each listed forward op (which must have one live part) along its batch identifier
// (batch_identifiers) into n parts. Errors name the op: not a forward op, already split, no batch
// identifier, or a batch size not divisible by n. On error the plan may hold the splits made so far.
Expected<MicroBatches> split_micro_batches(Plan& plan, std::span<const ir::OpId> forward_ops, int n);

}  // namespace loom::plan
