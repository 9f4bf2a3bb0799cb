// Private to codegen: the manifest's parts that describe the model rather than one rank's code: how a
// loaded tensor gets its initial value, and each computed sub-op's op form (type, attributes, local and
// full shapes, offsets, and for a backward part its forward part and mirror layout).
#pragma once

#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"

namespace loom::codegen::detail {

// {"shape", "dtype", "role", "init": "uniform" | "integer" (with "bound") | "zeros" | "copy" (with
// "copy_of") | "derived" (with "derived": {"from", "kind", "ignore_index", "trim"?})}, as
// verify::initial_values makes the single-device values (same seed, same generator).
nlohmann::json tensor_entry(const ir::Graph& graph, ir::TensorId tensor);

// The op form of one sub-op; errors name the sub-op (a backward part without its forward part, a bad
// mirror layout).
Expected<nlohmann::json> sub_op_entry(const plan::Plan& plan, plan::SubOpId id);

}  // namespace loom::codegen::detail
