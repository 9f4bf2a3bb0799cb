// The batch identifier of each forward op (DESIGN.md, "Primitives": micro-batching is trans along the
// batch identifier of a whole subgraph), found with dim_identifier alone, as a user would.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/plan/plan.h"

namespace loom::plan {

// By OpId: the identifier of the op's annotation that runs along the batch, for forward ops that see
// the batch; nullopt for the others (parameter-only forward ops, backward and optimizer ops).
// Dimension 0 of every graph input is the batch. In program order, an op whose input has a known batch
// dimension named by a splittable identifier (not '^', not a number, not a later atom of a merged
// dimension such as b in "(a b c)") takes that identifier, and each of its outputs holding the identifier
// gets its batch dimension where the identifier sits. The others see the whole batch: data parallelism
// replicates them (e.g. ProphetNet's loss over logits viewed as (ngram batch seq)).
std::vector<std::optional<std::string>> batch_identifiers(const Plan& plan);

// By TensorId: the batch dimension of every tensor (-1: none), derived as batch_identifiers derives the
// ops' (`batch`, its result): dimension 0 of graph inputs, then each batch-carrying op's outputs where its
// batch identifier sits.
std::vector<int> tensor_batch_dims(const Plan& plan, const std::vector<std::optional<std::string>>& batch);

// What ties a step's micro-batches to one another. Micro-batches run one after another, so none may need
// another's values; two kinds of forward ops break that:
//  - a whole-batch reader: an op that reads a tensor carrying the batch but cannot split it (its annotation
//    freezes the batch, 'n^', or merges it: the fused batch_norm computing its statistics inside). It runs
//    once over every micro-batch, so each micro-batch's forward must come before any backward of its stage
//    (a schedule that runs all forwards first: GPipe; never gradient accumulation);
//  - a batch sum read per sample: an op summing over the batch ('+' batch identifier) whose result an op
//    that still sees the batch reads (training-mode batch norm's statistics normalizing every sample). No
//    schedule can cut such a batch. The loss's mean sums over the batch too, but nothing per-sample reads it.
// The policies refuse the micro-batchings these forbid (policy/megatron.h); the search asks first
// (search/plan_space.h, SpaceFacts::micro_batching).
struct BatchCoupling {
  struct WholeBatchReader {
    ir::OpId op;
    ir::TensorId tensor;  // the batch-carrying input it cannot split
  };
  struct BatchSum {
    ir::OpId sum;     // sums over the batch
    ir::OpId reader;  // applies the sum to every sample
  };
  std::vector<WholeBatchReader> whole_batch_readers;  // in program order
  std::optional<BatchSum> batch_sum;                  // the first in program order
  bool independent() const { return whole_batch_readers.empty() && !batch_sum; }
};
// `batch` and `batch_dims`: batch_identifiers' and tensor_batch_dims' results for `plan`.
BatchCoupling batch_coupling(const Plan& plan, const std::vector<std::optional<std::string>>& batch,
                             const std::vector<int>& batch_dims);
BatchCoupling batch_coupling(const Plan& plan);

// Whether identifier x sits after the first atom of a merged dimension in some tensor of the op (b in
// "(a b c)"): a shard of such a dimension along x is not one strided range (blocks of the later atoms,
// repeated for the earlier ones), so the op cannot be split along x (trans refuses it).
bool inside_merged_dim(const ir::Annotation& annotation, std::string_view x);

}  // namespace loom::plan
