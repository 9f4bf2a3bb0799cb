// The graph file's optional "custom_ops" section: the definitions of the user ops its graph uses
// (docs/custom_ops.md), written by the Python tracer for functions given to loom.register_op.
//
//   "custom_ops": [{"type": "custom.bias_gelu", "annotation": "b s h, h -> b s h",
//                   "flops_per_element": 8, "differentiable": true}, ...]
//
// "flops_per_element" (default 0) and "differentiable" (default true) are optional. The section is split
// off before ir::graph_from_json, whose reader is strict about the fields it knows.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/ops/custom_ops.h"

namespace loom::frontend {

struct SplitGraphText {
  std::string graph_json;                   // the text without the section (the input itself when it has none)
  std::vector<ops::CustomOpSpec> custom_ops;
};

// Errors name the JSON path ("custom_ops[1].annotation") and the fix. Text that is not a JSON object
// comes back unchanged, for ir::graph_from_json to report.
Expected<SplitGraphText> split_custom_ops(std::string_view text);

}  // namespace loom::frontend
