// The readable text form of a Graph (for golden tests and `loom graph --text`), one line per
// tensor and per op:
//   %3 = parameter "layers.0.attn.qkv.weight" bf16[2304, 768]
//   #5 linear "layers.0.attn.qkv" (%2, %3, %4) -> (%6)  [* i+, o i+, o -> * o]
#pragma once

#include <string>

#include "loom/ir/graph.h"

namespace loom::ir {

std::string graph_to_text(const Graph& graph);

}  // namespace loom::ir
