// Folded execution: the step of a large data- and pipeline-parallel job from the ExecPlan of one slice
// (DESIGN.md, "ExecPlan": symmetric devices simulated once, carried over to planning).
//
// A Megatron job of dp x tp x pp devices and m micro-batches repeats the same work m times per pipeline
// device and mirrors it over dp replicas: 1024 GPUs and 64 micro-batches would be ~16M sub-ops planned
// one by one. The slice is the plan of one micro-batch of one replica: the graph built at micro-batch
// size, placed over tp x pp devices (slice device s * tp + t), materialized and checked as any plan.
// unfold_step turns its ExecPlan into the job's step:
//   - each slice program is cut into segments: the loads (once), the blocks (model chunk, pass), and the
//     epilogue (the optimizer steps and what only they consume, once);
//   - each pipeline device runs its blocks in the order of the schedule template for m micro-batches,
//     every block instance a copy of the slice's block with its own buffers and transfer tags;
//   - a buffer a block produces and the epilogue reads (a weight gradient) is accumulated over the
//     instances (a combine per micro-batch, as gradient accumulation does), then, with dp > 1, all-reduced
//     over the dp replicas (the images of its device: full device (s * dp + r) * tp + t) before the
//     optimizer reads it, as the V->R transition of a gradient split by value over dp would be.
// Only the slice's device-class representatives (and the devices sending to them) get programs; every
// other device is an image of its class. Such a step is its own type, FoldedStep, not an ExecPlan: what
// needs every program (check_exec_plan, the interpreter, codegen) takes an ExecPlan and cannot be handed
// one; the simulator, the memory model and the reports have overloads that run the representatives, a
// collective's members taken to arrive when their representatives do (src/exec/fold_classes.h: the
// classes are those whose members wait where their representatives wait). The slice itself is proven by
// `loom verify`; unfolding repeats and mirrors it, which tests compare against explicit plans.
//
// A slice may hold asynchronous collectives (exec passes): a start is repeated with the segment where
// its outputs are first read (as a blocking collective is), and its wait with its start.
//
// ZeRO folds over micro-batches only: its shards differ per dp rank and its collectives run among them,
// so the slice holds every dp replica (one micro-batch each, ZeRO's reduce-scatters and gathers
// materialized), and the shape has dp 1 with the replicas counted in tp (slice device s * tp + t is
// then the full device itself). The layout search may route some of them among a part of the replicas
// (sub-group gathers, sends between nodes): the device classes are refined until every device waits, position
// by position, where its representative waits (fold_classes.h), and a
// collective member classed per micro-batch only by its block-computed input (its output not read in a
// block), whose peers run it once per step, runs it once too, on the accumulated input; and what in a block
// only feeds instructions that run once per step (a slice of a within-node reduce-scatter's output sent to
// another node, the scatter itself) runs once per step too, but not a reduce-scatter that
// `scatter_per_micro_batch` keeps per micro-batch. The job pipeline folds ZeRO-1 across nodes, ZeRO-2 and
// -3 within one node (policy::zero_folds says why). Unfolding repeats the blocks per micro-batch as above: ZeRO-3's
// gathers run where their parameter is read (each block), ZeRO-1's reduce-scatter reads the
// accumulated gradient once, and with `scatter_per_micro_batch` (ZeRO-2 and -3) a reduce-scatter of a
// gradient a block computes runs in that block, its shard accumulated over the instances: as explicit
// ZeRO-2 scatters each micro-batch's partial gradient and sums it on the shards (policy/zero.h).
#pragma once

#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"
#include "loom/plan/schedule.h"

namespace loom::exec {

struct FoldShape {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int chunks = 1;        // model chunks per pipeline device (interleaving)
  int micro_batches = 1;
  // By pipeline rank: its block instances in execution order, Block::stage = chunk * pp + rank
  // (plan::schedule_blocks for micro_batches).
  std::vector<std::vector<plan::Block>> sequences;
  // By OpId: the stage (chunk * pp + rank) of each forward op; -1 for the others.
  std::vector<int> op_stage;
  // ZeRO-2 and -3 slices: reduce-scatters of gradients computed in a block run once per micro-batch.
  bool scatter_per_micro_batch = false;
  // The cluster's GPUs per node (0: the slice lies in one node): a class of devices spans nodes only
  // where their groups lie alike over the nodes (src/exec/fold_classes.h).
  int devices_per_node = 0;
};

// The full device of slice device `slice_device` in dp replica `replica`.
int full_device(const FoldShape& shape, int slice_device, int replica);
// The slice device whose image full device `device` is (full_device's inverse, forgetting the replica).
int slice_device_of(const FoldShape& shape, int device);

// The step of a folded job: `step.programs` holds programs for the class representatives (and the
// devices sending to them) only, step.class_of and step.representatives say whose image every other
// device is.
struct FoldedStep {
  ExecPlan step;
  FoldShape shape;
};

// Errors: a slice whose device count is not tp x pp, sequences that do not match pp, chunks and
// micro-batches, and slices that cannot be repeated: a transfer or collective whose members disagree on
// whether it runs once per step or once per micro-batch (naming the tag and the devices).
Expected<FoldedStep> unfold_step(const ExecPlan& slice, FoldShape shape);

}  // namespace loom::exec
