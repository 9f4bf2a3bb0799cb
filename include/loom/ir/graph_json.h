// The JSON form of a Graph: the engine's exchange format (the Python tracer writes it too).
// Deterministic: the same graph gives byte-identical text, and graph_from_json(graph_to_json(g)) == g.
#pragma once

#include <string>
#include <string_view>

#include "loom/ir/graph.h"

namespace loom::ir {

inline constexpr int kGraphJsonVersion = 1;

std::string graph_to_json(const Graph& graph);

// Structural parse only: malformed JSON, missing or mistyped fields and ids out of range are errors
// that name the JSON path (e.g. "ops[12].inputs[1]"). Operator semantics are checked by validate_graph.
Expected<Graph> graph_from_json(std::string_view text);

}  // namespace loom::ir
