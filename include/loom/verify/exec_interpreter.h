// Runs an ExecPlan (DESIGN.md, "ExecPlan"): every device's instruction list, with the data semantics
// include/loom/exec/exec_plan.h gives each instruction, on float64 buffers. Where run_plan checks that a
// Plan computes what one device computes, this checks what materialization made of it: every
// collective, send/recv, slice, scale and combine moves exactly the data the consumers need.
//
// The devices run as a cooperative scheduler: each runs its program in order until it blocks; sends are
// buffered, a recv waits for its matching send, and a collective runs once every member of its group
// has reached its instruction with that tag. A start reads its inputs and goes on; the last member to
// start sums every member's outputs, and a wait waits for that. When no device can advance the plan deadlocks, and the
// error names each blocked device and what it waits for.
#pragma once

#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"
#include "loom/verify/kernels.h"
#include "loom/verify/plan_interpreter.h"

namespace loom::verify {

// Mirrors PlanRun, so compare_runs applies unchanged.
struct ExecRun {
  std::vector<NdArray> values;                 // by TensorId: leaves from `initial`, produced tensors assembled
  std::vector<std::vector<PlanPiece>> pieces;  // by TensorId: each Compute output, in execution order
  std::vector<NdArray> held;                   // by BufferId: what each buffer never freed ends with; empty if freed
};

// Runs `exec` from the graph's leaves (`initial`, as for run_graph). Every buffer is written exactly
// once, on its own device, and read only between its write and its free; each live sub-op is computed
// once, on the device the plan assigns it. Errors name the device, the instruction index and the buffer:
// an instruction that breaks these rules or exec_plan.h's (a compute input whose box or value count is
// not the sub-op's, a sum collective input not containing the output box, a gather leaving an element
// uncovered, a recv whose piece differs from the send's, a combine with no tiling, ...), members of
// one collective tag that disagree on kind or group, a deadlock, or a send nobody receives.
Expected<ExecRun> run_exec_plan(const exec::ExecPlan& exec, const std::vector<NdArray>& initial,
                                const KernelRegistry& kernels = reference_kernels());

}  // namespace loom::verify
