// The segments of a slice's programs (exec/fold.h): which instructions run once per step (the loads,
// the epilogue) and which belong to a block (model chunk, pass) repeated once per micro-batch.
#pragma once

#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"
#include "loom/exec/fold.h"

namespace loom::exec {

inline constexpr int kPrologue = -1;  // runs once, before every block (loads, data received once)
inline constexpr int kEpilogue = -2;  // runs once, after every block (optimizer steps, reduced gradients)

// A block's segment id: 2 * chunk, plus 1 for the backward pass.
inline int block_segment(int chunk, bool backward) { return 2 * chunk + (backward ? 1 : 0); }
inline bool is_block(int segment) { return segment >= 0; }

// By slice device, by instruction: its segment. A compute belongs to its sub-op's block (a forward op's
// chunk; the backward pass for its backward part and for a recomputation, its second run); an optimizer
// step to the epilogue; a compute of an op without a stage to the block around it. A collective, recv or
// local belongs where its output is first read, else with what wrote its input (a start: where its
// outputs are first read; its wait with it); a send where its recv runs; a free with the instruction
// before it. Errors: a transfer or collective whose members disagree
// on running once per step or once per micro-batch.
Expected<std::vector<std::vector<int>>> fold_segments(const ExecPlan& slice, const FoldShape& shape);

}  // namespace loom::exec
