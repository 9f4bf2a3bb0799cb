// Per-rank PyTorch code from an ExecPlan (DESIGN.md, "codegen"; the contract: docs/codegen.md). Each
// device's instruction list becomes one Python module defining `step(rt)`: one statement per
// instruction, over the small runtime API of python/loom/runtime (rt.load, rt.compute, the collectives,
// rt.send / rt.recv, rt.slice / rt.scale / rt.combine, rt.keep), buffers named from their tensor. A
// manifest (JSON) says what the runtime needs besides the code: the world, the process groups, how
// each loaded tensor gets its initial value, each computed sub-op's op form, and which buffers hold
// the loss and the updated persistent tensors at the step's end.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"

namespace loom::codegen {

struct RankPrograms {
  std::vector<std::string> modules;  // by rank: the text of rank_<r>.py
  std::string manifest;              // manifest.json
};

// The ExecPlan must be materialized for every device: a folded (partial) plan is refused, naming the
// fix. `description` goes into each module's header comment and the manifest.
Expected<RankPrograms> emit_rank_programs(const exec::ExecPlan& exec, std::string_view description);

// File name of rank r's module: "rank_<r>.py".
std::string rank_module_file(int rank);

}  // namespace loom::codegen
