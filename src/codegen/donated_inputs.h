// Private to codegen: which inputs of a rank's optimizer steps the step may overwrite (docs/codegen.md,
// "In-place optimizer steps").
//
// An optimizer step (sgd, adam, adamw) writes new versions of its parameter and states. Written into
// fresh buffers, every step copies all of them first (three to four copies of the model a step, the
// largest local cost of a data-parallel step after the backward). torch.optim updates in place; the
// generated program may too where the old version is dead: the input buffer is a load of its own
// (no other load on the rank reads the same tensor, so no second variable holds that value), and no
// later instruction (a start included) reads it. The gradient (input 1) is never donated: the
// step does not write it. The runtime decides at run time whether the value is its own to overwrite (a
// previous step's result) or the caller's (the module's weights on the first step), which it copies.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

#include "loom/exec/exec_plan.h"

namespace loom::codegen::detail {

// By instruction index of `rank`'s program: the input positions of the optimizer step there that die at it.
std::map<std::size_t, std::vector<int>> donated_optimizer_inputs(const exec::ExecPlan& exec, int rank);

}  // namespace loom::codegen::detail
