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

// Whether identifier x sits after the first atom of a merged dimension in some tensor of the op (b in
// "(a b c)"): a shard of such a dimension along x is not one strided range (blocks of the later atoms,
// repeated for the earlier ones), so the op cannot be split along x (trans refuses it).
bool inside_merged_dim(const ir::Annotation& annotation, std::string_view x);

}  // namespace loom::plan
