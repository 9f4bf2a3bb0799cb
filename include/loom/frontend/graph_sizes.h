// The graph file's optional "sizes" section: which sizes of a traced graph are multiples of its batch, so
// `loom plan --graph g.json --global-batch N` plans the graph at another batch without tracing again
// (docs/json.md). The Python tracer writes it (loom.trace traces the module a second time at batch + 1 and
// records every size that moved):
//
//   "sizes": {"version": 1, "symbols": {"batch": 2},
//             "tensors": [{"id": 0, "shape": ["batch", 16]}, {"id": 9, "shape": ["16*batch", 64]}],
//             "attrs": [{"op": 3, "name": "shape", "value": ["16*batch", 64]}]}
//
// A size is a whole number (fixed) or a term "batch" / "K*batch" (K times the batch). Tensors and
// attributes not listed keep their sizes. The section is split off before ir::graph_from_json, whose
// reader is strict about the fields it knows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/graph.h"

namespace loom::frontend {

struct BatchTerm {
  std::int64_t coefficient = 1;  // the size is coefficient x batch
  bool operator==(const BatchTerm&) const = default;
};
using SizeExpr = std::variant<std::int64_t, BatchTerm>;

struct GraphSizes {
  std::int64_t batch = 0;  // the batch the graph was traced at
  struct TensorSizes {
    std::size_t id = 0;
    std::vector<SizeExpr> shape;
  };
  struct AttrSizes {
    std::size_t op = 0;
    std::string name;
    std::vector<SizeExpr> value;  // one entry for an integer attribute, one per element for a list
    bool list = false;
  };
  std::vector<TensorSizes> tensors;
  std::vector<AttrSizes> attrs;
};

struct SplitSizes {
  std::string graph_json;            // the text without the section (the input itself when it has none)
  std::optional<GraphSizes> sizes;
};

// Errors name the JSON path ("sizes.tensors[3].shape[0]") and the fix. Text that is not a JSON object comes
// back unchanged, for ir::graph_from_json to report.
Expected<SplitSizes> split_sizes(std::string_view text);

// The graph at `batch` samples a step: every recorded size evaluated at it. Errors: a record that does not
// match the graph (ids out of range, a recorded size that is not what the graph holds at the traced
// batch), a resized tensor holding constant elements, a size past the engine's limits.
Expected<void> resize_graph(ir::Graph& graph, const GraphSizes& sizes, std::int64_t batch);

}  // namespace loom::frontend
