// Recomputation (DESIGN.md, "Primitives": recompute is a transformation too; Chen et al. 2016, Megatron's
// activation recomputation). A recomputed forward sub-op keeps no output for its backward readers: its
// outputs die after their last forward reader, and the sub-op runs again on its device just before the
// first backward sub-op there that reads one. Its inputs come, recursively, from recomputation where
// they were produced on the same device by recomputed sub-ops, and otherwise from what the forward
// pass produced, which then lives until the recomputation (a checkpoint). Values that arrived by
// communication (the all-reduced output of a row-parallel layer) are checkpoints too: recomputation
// never repeats a transfer.
//
// Nested recomputation (nnScaler's coshard under Megatron's full recompute): a sub-op marked nested keeps
// its own rerun for its backward readers, apart from any larger recomputation that reads it. Marked both
// plainly (the layer's recompute) and nested (a coshard part), it runs again twice in backward: inside the
// layer's recomputation, to rebuild what it feeds (a coshard region's summed output; those results die
// after that use), and once more for its own backward readers, so a region's parts are live one at a
// time. Marked nested alone (coshard without full recompute), it behaves as any recomputed sub-op, and
// what it feeds outside its chain stays a checkpoint.
#pragma once

#include <span>

#include "loom/core/error.h"
#include "loom/plan/plan.h"

namespace loom::plan {

// Marks live forward sub-ops as recomputed (idempotent). Parts that trans later makes of a recomputed
// sub-op are recomputed too, with the same marks. `nested` adds the nested mark (above), else the plain
// one; marks add up. Errors: a dead, backward or optimizer sub-op (naming it).
Expected<void> recompute(Plan& plan, std::span<const SubOpId> forward_sub_ops, bool nested = false);

bool is_recomputed(const Plan& plan, SubOpId sub_op);        // either mark
bool is_plain_recompute(const Plan& plan, SubOpId sub_op);   // marked by recompute(..., nested = false)
bool is_nested_recompute(const Plan& plan, SubOpId sub_op);  // marked by recompute(..., nested = true)

}  // namespace loom::plan
