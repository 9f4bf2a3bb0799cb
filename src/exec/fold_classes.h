// The device classes of a folded step (exec/fold.h): which slice devices the step unfolds and simulates,
// every other device an image of one of them.
//
// Device classes (device_classes.h) compare each program alone. A folded step also takes every member
// of a collective to arrive when its representative reaches it, and every device to wait, at each recv,
// for what its representative waits for. That holds when the classes are stable: the coarsest refinement
// of the program classes in which, position by position, every device and its representative agree on
//   the segments    which instructions repeat per micro-batch (fold_segments);
//   a collective    its members as (class, position in the member's program), and how its group lies
//                   over the nodes (members per node, sorted);
//   a recv          its sender's class, the position of the send in the sender's program, and whether the
//                   sender is on the same node;
//   a send          whether the receiver is on the same node;
// and in which each representative's collectives hold every member's representative (a member whose
// representative is outside becomes its own class; refined again until both hold). ZeRO-1's 64 replicas of
// llama3-8b over 8 nodes fall into 1 class (16 before the materializer moved a group before any input
// of its reader and made small gradients' routes node-symmetric: exec/materialize.cc, layout_transition.cc),
// where keeping a node's within-node collectives its own made every device a class (64). Cost: a few passes
// over the slice's collectives, sends and recvs.
#pragma once

#include <vector>

#include "loom/exec/device_classes.h"
#include "loom/exec/exec_plan.h"

namespace loom::exec {

// `programs`: the slice's classes by program (device_classes); `segments`: fold_segments'; `node_of`: by
// slice device, the node its full device lies on.
DeviceClasses fold_classes(const ExecPlan& slice, const DeviceClasses& programs,
                           const std::vector<std::vector<int>>& segments, const std::vector<int>& node_of);

}  // namespace loom::exec
