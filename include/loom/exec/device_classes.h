// Device classes (DESIGN.md, "ExecPlan"): devices whose programs are equal up to renaming of devices and
// buffers (data-parallel replicas, tensor-parallel peers, the devices of one pipeline stage) share a
// class. This is what lets the simulator run one program per class instead of one per device: a
// 1024-GPU data-parallel plan costs one simulated program, not 1024.
//
// Two programs are equal when they have the same length and, instruction by instruction, the same
// signature: the instruction kind and
//   compute     the graph op of the sub-op and the local shapes of its inputs and outputs;
//   load        the tensor and the local shape;
//   collective  the kind, the group size, and the local shapes of input and output;
//   start       the kind, the group size, and the local shapes of inputs and outputs;
//   wait        nothing more;
//   send / recv the local shape and the bytes;
//   local       the local kind and the shapes of inputs and output;
//   free        the shape of the freed buffer.
// Device ids, peers, tags, buffer ids and box offsets are names and are left out. So is a member's
// position in a collective's group: ring and pairwise collectives cost the same at every position, and
// what the position decides (which chunk a member holds) is data, not shape; keeping it would split
// every group of tensor-parallel peers into one class per member.
#pragma once

#include <vector>

#include "loom/exec/exec_plan.h"

namespace loom::exec {

struct DeviceClasses {
  std::vector<int> class_of;         // by device
  std::vector<int> representatives;  // by class: its first device; classes numbered by first device
};

// Programs are hashed, and only devices with equal hashes are compared in full, so the cost is about
// linear in the total instruction count however many devices there are.
DeviceClasses device_classes(const ExecPlan& exec);

// Fills exec.class_of and exec.representatives from device_classes(exec).
void assign_device_classes(ExecPlan& exec);

}  // namespace loom::exec
