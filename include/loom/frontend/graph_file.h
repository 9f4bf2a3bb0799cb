// Reads the engine's JSON graph from a file: parse (ir::graph_from_json), then validate against the
// catalog (ir::validate_graph). Errors name the file.
#pragma once

#include <string>

#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"

namespace loom::frontend {

Expected<ir::Graph> load_graph_file(const std::string& path, const ir::OpCatalog& catalog);

// Writes atomically (a temporary file renamed into place), so a failure never leaves half a file.
Expected<void> save_graph_file(const ir::Graph& graph, const std::string& path);

}  // namespace loom::frontend
