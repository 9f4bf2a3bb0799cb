// Semantic validation of a Graph against an operator catalog: every op type known, attributes match
// the schema, shapes and dtypes re-inferred from the annotation equal the recorded ones, backward ops
// consistent with the forward ops they mirror, roles consistent. Errors name the op and the fix.
#pragma once

#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"

namespace loom::ir {

Expected<void> validate_graph(const Graph& graph, const OpCatalog& catalog);

}  // namespace loom::ir
