// Reads the engine's JSON graph from a file: parse (ir::graph_from_json), then validate against the
// catalog (ir::validate_graph). Errors name the file.
#pragma once

#include <string>

#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"
#include "loom/ops/custom_ops.h"

namespace loom::frontend {

// `batch` (0: as traced) resizes the graph by its "sizes" section (frontend/graph_sizes.h); a graph without
// one plans only at the batch it was traced at, another is an error saying so.

// Built-in ops only: a file that defines custom ops (frontend/custom_op_section.h) is an error naming them.
Expected<ir::Graph> load_graph_file(const std::string& path, const ir::OpCatalog& catalog, std::int64_t batch = 0);

// Also adds the file's custom op definitions to `catalog`, which the rest of the job (training graph,
// plan, cost model, metrics) then uses. Errors: a bad definition, one that duplicates a built-in type, an
// annotation that does not fit a call of the op; each names the file, the op and the fix.
Expected<ir::Graph> load_graph_file(const std::string& path, ops::CustomCatalog& catalog, std::int64_t batch = 0);

// The same from the JSON text itself (the Python bindings' traced graph); errors name it by `label`.
Expected<ir::Graph> load_graph_text(const std::string& text, const std::string& label, ops::CustomCatalog& catalog,
                                    std::int64_t batch = 0);

// Writes atomically (a temporary file renamed into place), so a failure never leaves half a file.
Expected<void> save_graph_file(const ir::Graph& graph, const std::string& path);

}  // namespace loom::frontend
