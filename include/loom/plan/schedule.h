// Pipeline stages and schedule templates (DESIGN.md, "Primitives": pipeline schedules are order edges
// over (stage, micro-batch, pass) blocks), built from assign and order alone.
//
// A block is the forward sub-ops of one stage for one micro-batch (in program order), or their backward
// parts (in reverse). Each stage runs its blocks in the template's sequence; an order edge goes from
// the last sub-op of each block to the first sub-op of the next block of the same stage. Inside a
// block, data dependencies keep the sub-ops together.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "loom/plan/plan.h"

namespace loom::plan {

// Places every listed sub-op (and its backward part) on `device`.
Expected<void> stage(Plan& plan, std::span<const SubOpId> sub_ops, int device);

enum class ScheduleKind : std::uint8_t {
  gpipe,        // all forwards of a stage in micro-batch order, then all backwards
  one_f_one_b,  // nnScaler Table 4: (stages - i) forwards on stage i, then backward/forward pairs
};
struct Schedule {
  ScheduleKind kind = ScheduleKind::gpipe;
};

struct Block {
  int stage = 0;
  int micro_batch = 0;
  ir::Pass pass = ir::Pass::forward;  // forward or backward

  bool operator==(const Block&) const = default;
};
std::string to_string(const Block& block);  // "F2" / "B0"

// The template: per stage, its blocks in execution order. Every stage runs each (micro-batch, pass) once.
std::vector<std::vector<Block>> schedule_blocks(Schedule schedule, int num_stages, int num_micro_batches);

// stages[s][m]: the forward sub-ops of stage s for micro-batch m, in program order (e.g.
// MicroBatches::micro_batch). Adds the template's order edges and returns the template. Errors: an empty
// or ragged stage list, a sub-op that is not a live forward part, a stage spread over several devices,
// or two stages on one device (their blocks would need one merged sequence: interleaved schedules are
// not supported yet).
Expected<std::vector<std::vector<Block>>> apply_schedule(Plan& plan, Schedule schedule,
                                                         const std::vector<std::vector<std::vector<SubOpId>>>& stages);

// The sub-ops of one block: the forward list, or the backward parts of its sub-ops in reverse order
// (forward sub-ops without a backward part are left out).
std::vector<SubOpId> block_sub_ops(const Plan& plan, std::span<const SubOpId> forward, ir::Pass pass);

}  // namespace loom::plan
