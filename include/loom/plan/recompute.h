// Recomputation (DESIGN.md, "Primitives": recompute is a transformation too; Chen et al. 2016, Megatron's
// activation recomputation). A recomputed forward sub-op keeps no output for its backward readers: its
// outputs die after their last forward reader, and the sub-op runs again on its device just before the
// first backward sub-op there that reads one. Its inputs come, recursively, from recomputation where
// they were produced on the same device by recomputed sub-ops, and otherwise from what the forward
// pass produced, which then lives until the recomputation (a checkpoint). Values that arrived by
// communication (the all-reduced output of a row-parallel layer) are checkpoints too: recomputation
// never repeats a transfer.
//
// Nested recomputation (nnScaler's coshard under Megatron's full recompute): a recomputed sub-op may be
// nested inside a larger recomputation. A nested sub-op is run again twice in backward: once inside the
// larger recomputation (to rebuild what it feeds, e.g. a coshard region's summed output; those results
// die after that use), and once more for its own backward readers, so the parts of a region are live one
// at a time. Without a larger recomputation around it, a nested sub-op behaves as any recomputed one.
#pragma once

#include <span>

#include "loom/core/error.h"
#include "loom/plan/plan.h"

namespace loom::plan {

// Marks live forward sub-ops as recomputed (idempotent). Parts that trans later makes of a recomputed
// sub-op are recomputed too (nested where it was). `nested` marks them nested (above); a sub-op once
// nested stays so. Errors: a dead, backward or optimizer sub-op (naming it).
Expected<void> recompute(Plan& plan, std::span<const SubOpId> forward_sub_ops, bool nested = false);

bool is_recomputed(const Plan& plan, SubOpId sub_op);
bool is_nested_recompute(const Plan& plan, SubOpId sub_op);

}  // namespace loom::plan
