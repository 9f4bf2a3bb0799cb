// The ExecPlan check (DESIGN.md, "ExecPlan"): the guarantee materialization promises, verified rather
// than trusted. A plan that passes cannot hang, and every read is of data written before it.
//
// Structure:
//  - one program per device; buffers on devices in range, of tensors the graph has;
//  - every buffer written exactly once, by an instruction on its own device; every read on that device,
//    after the write in program order and before any free; a buffer freed at most once;
//  - compute: a live sub-op assigned to this device, buffers aligned with its inputs and outputs; an
//    output buffer holds exactly the output SubTensor; an input buffer holds the input's tensor and box
//    and a value part of the same count (value-part indices are names, exec_plan.h); kNoBuffer only for
//    shape-only inputs;
//  - load: a leaf tensor (no op produces it);
//  - collective: a collective kind, this device in its group, the group's devices distinct and in range;
//    every member runs exactly one instruction with the tag, all agreeing on kind and group, and no
//    other device uses the tag;
//  - start: as a collective (all members starts, none blocking), of kind all-reduce or all-gather, with
//    as many outputs as inputs (at least one), all members agreeing on the number of buffers and,
//    position by position, on the tensor of every input and output and the box of every output, each
//    input's box that box (all-reduce) or inside it (all-gather); exactly one wait of its tag on the
//    same device, after it; its outputs are neither read nor freed before that wait;
//  - wait: after this device's start of its tag, once;
//  - send / recv: matched one to one by (sender, receiver, tag), with equal pieces and bytes;
//  - local: slice reads one buffer whose box contains the output's, same value part; scale reads one
//    buffer of the output's box; combine reads at least one, all of the output's tensor.
// Progress: execution is simulated with loads, computes, locals, frees, sends and starts never blocking
// (sends are buffered; a start joins its collective and goes on), a recv waiting for its send, a
// collective for all its members, and a wait for every member's start of its tag. Devices still
// blocked at the end form a wait-for graph with a cycle, reported as a deadlock naming the devices and
// what each waits in.
// Start order: a device runs its starts one after another, each once all members reach it (the
// simulator's starts stream), so members of two asynchronous collectives start them in one relative order:
// the graph of every device's consecutive starts is acyclic, else a deadlock naming the collectives and
// the devices that order them apart. The passes are about linear in the total instruction count.
#pragma once

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"

namespace loom::exec {

Expected<void> check_exec_plan(const ExecPlan& exec);

}  // namespace loom::exec
