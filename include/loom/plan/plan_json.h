// The JSON form of a Plan (what `loom plan` writes as plan.json): its live sub-ops, each with the op it
// is a part of, its device, the pieces it reads and writes and its backward partner, and the order edges.
// Ops and tensors are named as in the graph, so the file reads on its own and loads back against the
// graph it was made for. Deterministic: sub-ops in id order (renumbered 0.. over the live ones), one per
// line.
//
//   {"format": "loom-plan", "version": 1, "graph": {"ops": 124, "tensors": 301},
//    "sub_ops": [
//     {"id": 0, "op": "embed", "name": "embed[0/2]", "device": 0, "backward": 1,
//      "inputs": [{"tensor": "tokens", "box": [[0, 4], [0, 16]]}, ...],
//      "outputs": [{"tensor": "embed.out", "box": [[0, 4], [0, 16], [0, 8]], "value": [0, 2]}]},
//     ...],
//    "orders": [[3, 9], ...],
//    "residence": {"fc1.weight": "optimizer shards", ...}}
//
// A box range is [start, stop] or [start, stop, step]; "value" [k, n] is value part k of n (left out
// when whole); "backward" links a forward sub-op to its backward part (-1 or absent: none), and
// "weight_backward" to its weight part when the backward op is split (ir::split_weight_gradients);
// "recompute": true and "recompute_nested": true mark a recomputed sub-op, plainly and nested
// (plan/recompute.h); "residence" lists the tensors not held where their consumers read them
// (plan/residence.h).
#pragma once

#include <string>
#include <string_view>

#include "loom/core/error.h"
#include "loom/ir/op_def.h"
#include "loom/plan/plan.h"

namespace loom::plan {

std::string plan_to_json(const Plan& plan);

// Rebuilds a plan of `graph` (which must be the graph it was written for: op and tensor names, shapes,
// counts) from plan_to_json's output. Errors name `source`, the sub-op and the field. The result is not
// validated: call validate_plan.
Expected<Plan> plan_from_json(std::string_view text, const ir::Graph& graph, const ir::OpCatalog& catalog,
                              std::string_view source);

}  // namespace loom::plan
