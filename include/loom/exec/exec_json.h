// The JSON form of an ExecPlan (what `loom plan` writes as exec.json), for inspection and tools: the
// device classes, and the program of each class's representative with the buffers it names. The other
// members of a class run the same program with devices and buffers renamed (device_classes.h), so a
// 1024-GPU plan writes a handful of programs, not 1024. Deterministic.
//
//   {"format": "loom-exec", "version": 1, "devices": 8,
//    "classes": [{"representative": 0, "devices": [0, 1, 2, 3]}, ...],
//    "programs": [{"device": 0, "buffers": [{"id": 0, "piece": "%x[0:2, 0:8]", "bytes": 64}, ...],
//                  "instructions": [{"op": "load", "out": 0},
//                                   {"op": "compute", "sub_op": "fc1[0/2]", "in": [0, 1], "out": [2]},
//                                   {"op": "all-reduce", "tag": 5, "group": [0, 1], "tensor": "h", "in": 3, "out": 4},
//                                   {"op": "send", "peer": 1, "tag": 6, "buffer": 4},
//                                   {"op": "start", "kind": "all-reduce", "tag": 7, "group": [0, 1],
//                                    "in": [8, 9], "out": [10, 11]},
//                                   {"op": "wait", "tag": 7}, ...]}]}
#pragma once

#include <string>

#include "loom/exec/exec_plan.h"
#include "loom/exec/fold.h"

namespace loom::exec {

// Fills the classes afresh (device_classes) when exec.class_of is empty or stale in size. With `fold`,
// `exec` is the slice a folded step unfolds from (exec/fold.h), written as is, and a "fold" object says
// how it unfolds: {"dp": 8, "tp": 8, "pp": 16, "chunks": 2, "micro_batches": 64,
// "sequences": [["F0.0", "F16.0", ..., "B0.63"], ...]} (per pipeline rank, pass + stage "." micro-batch).
std::string exec_to_json(const ExecPlan& exec, const FoldShape* fold = nullptr);

}  // namespace loom::exec
