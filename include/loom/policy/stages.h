// Pipeline stages: the forward ops cut into contiguous groups of program order with roughly equal
// training FLOPs (each forward op's own plus its backward op's, so a forward-only stretch such as
// AlphaFold2's recycling passes counts for less).
#pragma once

#include <vector>

#include "loom/core/error.h"
#include "loom/plan/plan.h"

namespace loom::policy {

// By OpId: the stage (0 .. stages-1) of each forward op, -1 for the other ops. Stages never decrease
// along program order. Errors: stages < 1, or a stage left without an op that sees the batch (too
// many stages for the model).
Expected<std::vector<int>> pipeline_stages(const plan::Plan& plan, int stages);

}  // namespace loom::policy
