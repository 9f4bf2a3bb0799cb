// Readable forms of an ExecPlan: one device's program, one line an instruction, for golden tests,
// debugging and the messages of check_exec_plan; and a one-screen summary of the whole plan. Tensors are
// named by the graph's names ("%fc1.weight[0:8, 0:8] (1 of 2)"), buffers as "b7". The text functions
// accept plans that fail check_exec_plan (ids out of range print with a '?') so they can describe them.
#pragma once

#include <string>

#include "loom/exec/exec_plan.h"

namespace loom::exec {

// "%h[0:4, 0:16]", with " (1 of 2)" for a value part; "%<id>" when the graph does not know the tensor.
std::string piece_to_text(const ExecPlan& exec, const plan::SubTensor& piece);
// "b7 %h[0:4, 0:16]"; "-" for kNoBuffer; "b99?" for an id out of range.
std::string buffer_to_text(const ExecPlan& exec, BufferId id);
// "all-reduce #5 of 'fc1.weight.grad' (group 0,1)": kind, tag, the tensor of exec.collectives[tag]
// when there is one, and the group's devices.
std::string collective_label(const ExecPlan& exec, const Collective& collective);
// "all-reduce start #7 of 'fc1.weight.grad' (group 0,1)": the tensor is the first of the bucket's.
std::string collective_label(const ExecPlan& exec, const CollectiveStart& start);
// One instruction without its position, e.g. "send -> 1 #6 b9 %h[0:4, 0:16]".
std::string instruction_to_text(const ExecPlan& exec, const Instruction& instruction);

// One device's program, a line an instruction prefixed by its position:
//   0: load b0 %x[0:2, 0:8]
//   2: compute fc[0/2]  b0 %x[0:2, 0:8], b1 %w[0:8, 0:8] -> b2 %h[0:2, 0:8]
//   4: all-reduce #0 of 'loss' (group 0,1)  b3 %loss[] (1 of 2) -> b4 %loss[]
//   9: all-reduce start #7 of 'w.grad' (group 0,1)  b8 %w.grad[0:8] (1 of 2), ... -> b9 %w.grad[0:8], ...
//  12: wait #7
std::string exec_to_text(const ExecPlan& exec, int device);

// "8 devices in 2 classes" then a line a device class (classes computed afresh, see device_classes.h)
// with each device's counts: loads, computes, collectives by kind, starts, waits, sends with their
// bytes, recvs, locals, frees.
std::string exec_summary(const ExecPlan& exec);

}  // namespace loom::exec
